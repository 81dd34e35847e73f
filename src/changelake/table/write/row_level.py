"""Row-level DELETE and UPDATE of primary-key tables, as Paimon runs them on one (``DELETE
FROM t WHERE ...``, ``UPDATE t SET ... WHERE ...``): the rows the predicate matches in the
latest snapshot's merged view are read, and written back as one commit of ``-D`` rows, or of
``-U`` (the old row) then ``+U`` (the new one). They are ordinary writes: the merge engine, the
changelog producer and exactly-once apply as to any write, and a write of the same key
committed after the read still loses to them (the later commit wins).

Which merge engines take them (Paimon's rules): a delete needs one that removes a record on
-D (``deduplicate``; ``partial-update`` and ``aggregation`` with their
``*.remove-record-on-delete``); an update needs one that replaces values (``deduplicate``;
``partial-update``, which writes only the +U, as a -U would retract nothing there). First-row
tables and ``ignore-delete`` refuse both; primary-key and partition columns cannot be updated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from changelake.errors import OptionError, SchemaMismatchError
from changelake.option_values import MergeEngineKind
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.read import planner, reader, sql_filter
from changelake.table.read.planner import Split
from changelake.table.write.conform import ROWKIND_COLUMN


def deletions(ctx: TableContext, predicate: pc.Expression | str) -> pa.Table | None:
    """The -D rows that delete what ``predicate`` matches (a ``rowkind`` column first); None
    when it matches nothing."""
    check_engine(ctx, "delete")
    rows = _matching(ctx, predicate)
    return None if rows is None else delete_rows(rows)


def updates(ctx: TableContext, predicate: pc.Expression | str, assignments: Mapping[str, Any]) -> pa.Table | None:
    """The rows that set the ``assignments`` (column name to a value, or to a
    ``pyarrow.compute`` expression over the old row) on what ``predicate`` matches: each
    old row as -U then the new one as +U (only the +U under ``partial-update``); None when it
    matches nothing."""
    check_engine(ctx, "update")
    check_assignments(ctx, assignments)
    old = _matching(ctx, predicate)
    return None if old is None else update_rows(ctx, old, assignments)


def delete_rows(rows: pa.Table) -> pa.Table:
    """The -D rows (a ``rowkind`` column first) that delete ``rows``."""
    return rows.add_column(0, ROWKIND_COLUMN, pa.repeat(pa.scalar("-D"), rows.num_rows))


def update_rows(ctx: TableContext, old: pa.Table, assignments: Mapping[str, Any]) -> pa.Table:
    """The -U/+U rows (a ``rowkind`` column first; +U only under partial-update) that set the
    ``assignments`` on the ``old`` rows."""
    new = updated(ctx, old, assignments)
    after = new.add_column(0, ROWKIND_COLUMN, pa.repeat(pa.scalar("+U"), new.num_rows))
    if only_after(ctx):
        return after
    before = old.add_column(0, ROWKIND_COLUMN, pa.repeat(pa.scalar("-U"), old.num_rows))
    return pa.concat_tables([before, after])


def _matching(ctx: TableContext, predicate: pc.Expression | str) -> pa.Table | None:
    """Every column of the latest snapshot's merged rows that ``predicate`` matches."""
    row_filter = predicate_of(ctx, predicate)
    snapshot = ctx.latest_snapshot()
    if snapshot is None:
        return None
    return matching_rows(ctx, planner.plan(ctx, snapshot, row_filter, planner.batch_levels(ctx)), row_filter)


def matching_rows(ctx: TableContext, splits: Sequence[Split], row_filter: pc.Expression) -> pa.Table | None:
    """Every column of the merged rows of ``splits`` that ``row_filter`` matches; None for none."""
    parts = list(reader.read_splits(ctx, splits, ctx.arrow_schema.names, row_filter))
    rows = pa.concat_tables(parts).cast(ctx.arrow_schema) if parts else None
    return rows if rows is not None and rows.num_rows else None


def predicate_of(ctx: TableContext, predicate: pc.Expression | str) -> pc.Expression:
    """A delete's or update's predicate as an expression; OptionError for none."""
    row_filter = sql_filter.as_expression(predicate, ctx.arrow_schema, ctx.name)
    if row_filter is None:
        raise OptionError("needs a predicate (to remove every row, truncate the table)", table=ctx.name)
    return row_filter


def check_engine(ctx: TableContext, operation: str) -> None:
    """OptionError naming the option that keeps ``operation`` off this table."""
    options = ctx.options
    if ctx.kind is not TableKind.PRIMARY_KEY:
        raise OptionError(f"{operation} by predicate works on primary-key tables; this is an append table",
                          table=ctx.name)
    engine = options.merge_engine
    if engine is MergeEngineKind.FIRST_ROW:
        raise OptionError(f"a first-row table keeps each key's first row: it takes no {operation}", table=ctx.name,
                          option="merge-engine")
    if options.ignore_delete:
        raise OptionError(f"ignore-delete drops the -D/-U rows a {operation} writes", table=ctx.name,
                          option="ignore-delete")
    if operation == "delete":
        if engine is MergeEngineKind.PARTIAL_UPDATE and not options.partial_update_remove_record_on_delete:
            raise OptionError("a partial-update table removes records on -D only with this option set",
                              table=ctx.name, option="partial-update.remove-record-on-delete")
        if engine is MergeEngineKind.AGGREGATION and not options.aggregation_remove_record_on_delete:
            raise OptionError("an aggregation table removes records on -D only with this option set",
                              table=ctx.name, option="aggregation.remove-record-on-delete")
    elif engine is MergeEngineKind.AGGREGATION:
        raise OptionError("an aggregation table aggregates what is written: it takes no update", table=ctx.name,
                          option="merge-engine")


def updated(ctx: TableContext, rows: pa.Table, assignments: Mapping[str, Any],
            where: pa.ChunkedArray | None = None) -> pa.Table:
    """``rows`` (the table's columns) with the ``assignments`` applied: to every row, or to
    those ``where`` (a boolean mask) is true."""
    computed = ds.dataset(rows).to_table(columns={
        name: new_value(ctx, name, assignments[name]) for name in rows.column_names if name in assignments})
    columns = []
    for name in rows.column_names:
        column = rows.column(name)
        if name in assignments:
            new = cast_new(ctx, name, computed.column(name))
            column = new if where is None else pc.if_else(where, new, column)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=rows.schema)


def only_after(ctx: TableContext) -> bool:
    """Whether an update writes only its +U rows: under partial-update a -U retracts nothing."""
    return ctx.options.merge_engine is MergeEngineKind.PARTIAL_UPDATE


def check_assignments(ctx: TableContext, assignments: Mapping[str, Any]) -> None:
    """SchemaMismatchError for an update's ``set`` that is empty, names an unknown column, or a
    primary-key or partition column."""
    if not isinstance(assignments, Mapping) or not assignments:
        raise SchemaMismatchError("update needs set={column: value, ...} with at least one column", table=ctx.name)
    for name in assignments:
        if name not in ctx.arrow_schema.names:
            raise SchemaMismatchError("is not a column of the table", table=ctx.name, column=name)
        if name in ctx.primary_keys or name in ctx.partition_keys:
            role = "primary-key" if name in ctx.primary_keys else "partition"
            raise SchemaMismatchError(f"is a {role} column: it cannot be updated", table=ctx.name, column=name)


def new_value(ctx: TableContext, name: str, value: Any) -> pc.Expression:
    """The expression a new value of column ``name`` evaluates to over the old rows: an
    expression as it is, a plain value cast to the column's type (SchemaMismatchError if it
    is none of that type's)."""
    if isinstance(value, pc.Expression):
        return value
    field = ctx.arrow_schema.field(name)
    try:
        scalar = pa.scalar(value).cast(field.type) if value is not None else pa.scalar(None, field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        raise SchemaMismatchError(f"{value!r} is not a value of type {field.type}: {error}", table=ctx.name,
                                  column=name) from None
    return pc.scalar(scalar)


def cast_new(ctx: TableContext, name: str, column: pa.ChunkedArray) -> pa.ChunkedArray:
    """New values of column ``name`` in its type (SchemaMismatchError if they do not cast safely)."""
    field = ctx.arrow_schema.field(name)
    if column.type.equals(field.type):
        return column
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        raise SchemaMismatchError(f"the new values ({column.type}) do not cast safely to {field.type}: {error}",
                                  table=ctx.name, column=name) from None
