"""``MERGE INTO`` a table, in the shape deltalake users know: source rows are matched to the
table's rows by the primary key (an append table's by the columns ``on`` names), and the
first clause whose condition holds decides each row: update or delete a matched row, insert a
source row nothing matched, delete a table row no source row matched. On a primary-key table
the outcome is written as one commit of -D, -U/+U and +I rows (the merge engine's rules apply,
as to any delete or update); an append table's is carried out by
:mod:`changelake.table.append.merge` from the decisions made here.

Expressions (conditions and new values) see the joined row: the source's columns as
``source.<name>``, the table's as ``target.<name>``; they are ``pyarrow.compute`` expressions
or SQL-like text (``"source.v > target.v"``); a new value may also be a plain value. A source
with two rows of one key is an error, as in Delta.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from changelake.errors import DataError, OptionError, SchemaMismatchError
from changelake.table.context import TableContext
from changelake.table.read import planner, reader, sql_filter
from changelake.table.write import row_level
from changelake.table.write.conform import ROWKIND_COLUMN

SOURCE, TARGET = "source", "target"
_IN_SOURCE, _IN_TARGET = "__in_source", "__in_target"


class MergeCase(enum.StrEnum):
    """Which rows a WHEN clause acts on."""

    MATCHED = "matched"  # a source row and the table row of its key
    NOT_MATCHED = "not_matched"  # a source row no table row matches
    NOT_MATCHED_BY_SOURCE = "not_matched_by_source"  # a table row no source row matches


class MergeAction(enum.StrEnum):
    """What a WHEN clause does to the rows it decides."""

    UPDATE = "update"
    DELETE = "delete"
    INSERT = "insert"


@dataclass(frozen=True)
class Clause:
    """One WHEN clause: the rows it acts on, what it does to them, the condition they must meet
    and the new values (None: every column from the source)."""

    when: MergeCase
    action: MergeAction
    condition: pc.Expression | str | None = None
    values: Mapping[str, Any] | None = None


def merge_keys(ctx: TableContext, on: Sequence[str] | None) -> list[str]:
    """The columns a merge matches rows by: ``on`` (a list of column names, as MERGE INTO ...
    ON), which an append table needs; a primary-key table's primary key, which ``on`` must then
    name if given. OptionError otherwise."""
    keys = list(ctx.primary_keys)
    if on is None:
        if not keys:
            raise OptionError("a merge into an append table needs the columns to match rows by: "
                              "merge(source, on=[...])", table=ctx.name)
        return keys
    if isinstance(on, str) or not on or not all(isinstance(name, str) for name in on):
        raise OptionError(f"merge takes on=[column, ...] (a non-empty list of column names), not {on!r}",
                          table=ctx.name)
    for name in on:
        if name not in ctx.arrow_schema.names:
            raise SchemaMismatchError("is not a column of the table (merge on=...)", table=ctx.name, column=name)
    if len(set(on)) != len(on):
        raise OptionError(f"merge on={list(on)} names a column twice", table=ctx.name)
    if keys and set(on) != set(keys):
        raise OptionError(f"a primary-key table merges by its primary key {keys}, not on={list(on)}",
                          table=ctx.name)
    return keys or list(on)


def merged_changes(ctx: TableContext, source: pa.Table, clauses: Sequence[Clause]) -> pa.Table | None:
    """The rows (``rowkind`` first) that carry out ``clauses`` for ``source`` on a primary-key
    table; None when no row changes."""
    keys = merge_keys(ctx, None)
    check(ctx, source.column_names, clauses, keys)
    check_unique(ctx, source, keys)
    # Without a clause on table rows no source row matches, only the source's keys are read:
    # a filter on each key column prunes partitions and files and drops other rows early.
    return changes(ctx, source, _table_rows(ctx, key_filter(ctx, source, clauses, keys)), clauses)


def check(ctx: TableContext, source_columns: Sequence[str], clauses: Sequence[Clause], keys: Sequence[str]) -> None:
    """SchemaMismatchError for a source without the match columns or an update that sets
    columns it may not; on a primary-key table, OptionError for a clause its merge engine
    refuses."""
    if ctx.primary_keys:
        for action in (MergeAction.DELETE, MergeAction.UPDATE):
            if any(c.action is action for c in clauses):
                row_level.check_engine(ctx, action.value)
    missing = [k for k in keys if k not in source_columns]
    if missing:
        raise SchemaMismatchError(f"the merge source lacks the columns {missing} it is matched on", table=ctx.name)
    for clause in clauses:
        if clause.action is MergeAction.UPDATE and clause.values is not None:
            row_level.check_assignments(ctx, clause.values)


def check_unique(ctx: TableContext, source: pa.Table, keys: Sequence[str]) -> None:
    """DataError for a source with two rows of one key, as in Delta."""
    duplicated = source.group_by(list(keys)).aggregate([([], "count_all")]).filter(pc.field("count_all") > 1)
    if duplicated.num_rows:
        raise duplicate_keys(ctx, duplicated.num_rows, {k: duplicated.column(k)[0].as_py() for k in keys})


def duplicate_keys(ctx: TableContext, count: int, first: Mapping[str, Any]) -> DataError:
    """The error of a source with ``count`` keys in more than one row, the first ``first``."""
    return DataError(f"the merge source has {count} keys in more than one row (the first: {dict(first)})",
                     table=ctx.name)


def reads_unmatched(clauses: Sequence[Clause]) -> bool:
    """Whether a clause acts on table rows no source row matches (so every row is read)."""
    return any(c.when is MergeCase.NOT_MATCHED_BY_SOURCE for c in clauses)


def key_filter(ctx: TableContext, source: pa.Table, clauses: Sequence[Clause],
               keys: Sequence[str]) -> pc.Expression | None:
    """The filter the table rows a merge may touch pass: those with a key of ``source``,
    unless a clause acts on the table rows no source row matches (None: every row)."""
    return None if reads_unmatched(clauses) else _keys_of(ctx, source, keys)


def changes(ctx: TableContext, source: pa.Table, target: pa.Table, clauses: Sequence[Clause]) -> pa.Table | None:
    """The rows (``rowkind`` first) that carry out ``clauses`` for ``source`` on the rows
    ``target`` of a primary-key table (every table row a source key or a clause on unmatched
    rows may need); None when no row changes."""
    parts: list[pa.Table] = []
    for clause, rows in decide(ctx, source, target, clauses, ctx.primary_keys):
        parts += _outcome(ctx, clause, rows, source.column_names)
    return pa.concat_tables(parts) if parts else None


def decide(ctx: TableContext, source: pa.Table, target: pa.Table, clauses: Sequence[Clause],
           keys: Sequence[str]) -> list[tuple[Clause, pa.Table]]:
    """Each clause with the joined rows (``source.<column>`` and ``target.<column>``) it
    decides: the first clause whose condition holds decides a row."""
    joined = _join(ctx, source, target, list(keys))
    in_source, in_target = joined.column(_IN_SOURCE).is_valid(), joined.column(_IN_TARGET).is_valid()
    cases = {MergeCase.MATCHED: pc.and_(in_source, in_target),
             MergeCase.NOT_MATCHED: pc.and_(in_source, pc.invert(in_target)),
             MergeCase.NOT_MATCHED_BY_SOURCE: pc.and_(pc.invert(in_source), in_target)}
    decided = pa.repeat(pa.scalar(value=False), joined.num_rows)
    out = []
    for clause in clauses:
        chosen = pc.and_(cases[clause.when], pc.invert(decided))
        if clause.condition is not None:
            condition = sql_filter.as_expression(clause.condition, joined.schema, ctx.name)
            chosen = pc.and_(chosen, _evaluate(joined, condition).fill_null(fill_value=False))
        decided = pc.or_(decided, chosen)
        rows = joined.filter(chosen)
        if rows.num_rows:
            out.append((clause, rows))
    return out


def _keys_of(ctx: TableContext, source: pa.Table, keys: Sequence[str]) -> pc.Expression:
    """A filter every table row with a key of ``source`` passes (each key column in the
    source's values of it)."""
    terms = [pc.field(k).isin(pc.unique(source.column(k).cast(ctx.arrow_schema.field(k).type))) for k in keys]
    expression = terms[0]
    for term in terms[1:]:
        expression = expression & term
    return expression


def _table_rows(ctx: TableContext, row_filter: pc.Expression | None) -> pa.Table:
    """The latest snapshot's merged rows (those ``row_filter`` passes)."""
    snapshot = ctx.latest_snapshot()
    names = ctx.arrow_schema.names
    if snapshot is None:
        return ctx.arrow_schema.empty_table()
    splits = planner.plan(ctx, snapshot, row_filter, planner.batch_levels(ctx))
    parts = list(reader.read_splits(ctx, splits, names, row_filter))
    return pa.concat_tables(parts).cast(ctx.arrow_schema) if parts else ctx.arrow_schema.empty_table()


def _join(ctx: TableContext, source: pa.Table, target: pa.Table, keys: list[str]) -> pa.Table:
    """Source and table rows side by side by key (a full outer join), columns prefixed."""
    left = source.append_column(_IN_SOURCE, pa.repeat(pa.scalar(value=True), source.num_rows))
    right = target.append_column(_IN_TARGET, pa.repeat(pa.scalar(value=True), target.num_rows))
    left = left.rename_columns([f"{SOURCE}.{n}" if n != _IN_SOURCE else n for n in left.column_names])
    right = right.rename_columns([f"{TARGET}.{n}" if n != _IN_TARGET else n for n in right.column_names])
    left_keys = [f"{SOURCE}.{k}" for k in keys]
    right_keys = [f"{TARGET}.{k}" for k in keys]
    # Key columns of the source cast to the table's types, so that the join compares like with like.
    for k, name in zip(keys, left_keys, strict=True):
        index = left.column_names.index(name)
        left = left.set_column(index, name, left.column(name).cast(ctx.arrow_schema.field(k).type))
    joined = left.join(right, keys=left_keys, right_keys=right_keys, join_type="full outer", coalesce_keys=False)
    return joined.combine_chunks()


def _evaluate(rows: pa.Table, expression: pc.Expression) -> pa.ChunkedArray:
    return ds.dataset(rows).to_table(columns={"value": expression}).column("value")


def new_rows(ctx: TableContext, rows: pa.Table, values: Mapping[str, Any] | None, base: str,
            source_columns: Sequence[str], *, fallback: str | None) -> pa.Table:
    """The new rows in the table's columns: ``values`` where given (an expression over the
    joined row, or a value), else ``base``'s column (``source`` or ``target``); a column the
    source lacks comes from ``fallback`` (``target``), or is null."""
    columns = []
    for field in ctx.arrow_schema:
        if values is not None and field.name in values:
            column = _evaluate(rows, row_level.new_value(ctx, field.name, values[field.name]))
        elif base == TARGET or (field.name not in source_columns and fallback == TARGET):
            column = rows.column(f"{TARGET}.{field.name}")
        elif field.name in source_columns:
            column = rows.column(f"{SOURCE}.{field.name}")
        else:
            column = pa.chunked_array([pa.nulls(rows.num_rows, field.type)])
        columns.append(row_level.cast_new(ctx, field.name, column))
    return pa.Table.from_arrays(columns, schema=ctx.arrow_schema)


def old_rows(ctx: TableContext, rows: pa.Table) -> pa.Table:
    return pa.Table.from_arrays([rows.column(f"{TARGET}.{n}") for n in ctx.arrow_schema.names],
                                schema=ctx.arrow_schema)


def _kind(rows: pa.Table, symbol: str) -> pa.Table:
    return rows.add_column(0, ROWKIND_COLUMN, pa.repeat(pa.scalar(symbol), rows.num_rows))


def _outcome(ctx: TableContext, clause: Clause, rows: pa.Table, source_columns: Sequence[str]) -> list[pa.Table]:
    """The rows that carry out ``clause`` on the joined ``rows`` it decides."""
    if clause.action is MergeAction.DELETE:
        return [_kind(old_rows(ctx, rows), "-D")]
    if clause.action is MergeAction.INSERT:
        return [_kind(new_rows(ctx, rows, clause.values, SOURCE, source_columns, fallback=None), "+I")]
    base = TARGET if clause.values is not None else SOURCE
    after = _kind(new_rows(ctx, rows, clause.values, base, source_columns, fallback=TARGET), "+U")
    if row_level.only_after(ctx):
        return [after]
    return [_kind(old_rows(ctx, rows), "-U"), after]
