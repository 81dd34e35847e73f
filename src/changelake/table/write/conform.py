"""Turning user input into validated table rows plus row kinds, or a clear error."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError, NullKeyError, RowKindError, SchemaMismatchError
from changelake.table.context import TableContext
from changelake.table.format import kv

if TYPE_CHECKING:
    import pandas as pd


WriteInput: TypeAlias = "pa.Table | pa.RecordBatch | pa.RecordBatchReader | pd.DataFrame"
ROWKIND_COLUMN = "rowkind"
_KIND_VALUES = pa.array(kv.ROW_KIND_SYMBOLS)


def input_tables(data: Any, table_name: str) -> Iterator[pa.Table]:
    """The input as Arrow tables: a RecordBatchReader batch by batch (a stream is buffered as
    it comes, never read whole), anything else as one table (see :func:`to_arrow`)."""
    if isinstance(data, pa.RecordBatchReader):
        for batch in data:
            yield pa.Table.from_batches([batch])
    else:
        yield to_arrow(data, table_name)


def to_arrow(data: Any, table_name: str) -> pa.Table:
    """An Arrow table from a Table, RecordBatch, RecordBatchReader or pandas DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_records"):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise DataError(
        f"cannot write {type(data).__name__}; pass a pyarrow Table, "
        "RecordBatch, RecordBatchReader or pandas DataFrame",
        table=table_name,
    )


def row_kinds(column: pa.ChunkedArray, table_name: str, column_name: str) -> np.ndarray:
    """Value kinds (0..3) of a column of +I/-U/+U/-D strings."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise RowKindError(
            f"row kind column {column_name!r} must be strings (+I, -U, +U, -D), got {column.type}",
            table=table_name, column=column_name,
        )
    index = pc.index_in(column, value_set=_KIND_VALUES)
    if index.null_count:
        bad = column.filter(index.is_null())
        first = bad[0].as_py()
        raise RowKindError(
            f"invalid row kind {first!r} in column {column_name!r} "
            f"({len(bad)} bad rows); expected one of +I, -U, +U, -D",
            table=table_name, column=column_name,
        )
    return np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int8)


def _kind(data_type: pa.DataType) -> str:
    """The kind of a type: casts are made only between types of one kind."""
    t = pa.types
    if t.is_dictionary(data_type):
        return _kind(data_type.value_type)
    checks = (
        ("integer", t.is_integer), ("floating", t.is_floating), ("decimal", t.is_decimal),
        ("string", lambda d: t.is_string(d) or t.is_large_string(d) or t.is_string_view(d)),
        ("binary", lambda d: t.is_binary(d) or t.is_large_binary(d) or t.is_fixed_size_binary(d)
         or t.is_binary_view(d)),
        ("boolean", t.is_boolean), ("date", t.is_date), ("time", t.is_time), ("timestamp", t.is_timestamp),
        ("list", lambda d: t.is_list(d) or t.is_large_list(d) or t.is_fixed_size_list(d)),
        ("map", t.is_map), ("struct", t.is_struct),
    )
    return next((name for name, check in checks if check(data_type)), str(data_type))


def _same_kind(source: pa.DataType, target: pa.DataType) -> bool:
    # An all-null column (Arrow's null type) fits any column; the cast keeps its values exactly
    # or fails (Arrow's safe cast checks overflow and truncation).
    return pa.types.is_null(source) or _kind(source) == _kind(target)


def _added_nullable(ctx: TableContext, missing: list[str]) -> list[str]:
    """The columns of ``missing`` a schema change added (nullable, with a field id above every
    id of the table's first schema)."""
    if not missing or ctx.schema.id == 0:
        return []
    first = ctx.schemas.get(0).highest_field_id
    return [n for n in missing if (f := ctx.schema.field(n)).nullable and f.id > first]


def _takes_rowkind(ctx: TableContext, names: Sequence[str]) -> bool:
    """Whether the input's row kinds come from a ``rowkind`` column that is not stored."""
    return (ctx.options.rowkind_field is None and ROWKIND_COLUMN in names
            and ROWKIND_COLUMN not in ctx.arrow_schema.names)


def check_columns(ctx: TableContext, names: Sequence[str], *, only_deletes: bool = False) -> list[str]:
    """Check input column ``names`` (a ``rowkind`` column aside) against the table's: a
    SchemaMismatchError names missing, extra or duplicate columns. Returns the missing columns
    the input may leave out: those a schema change added (they are null) and, when every row
    is a -D (``only_deletes``: a CDC delete that carries only the key), all but the primary
    key's."""
    if _takes_rowkind(ctx, names):
        names = [n for n in names if n != ROWKIND_COLUMN]
    table_names = ctx.arrow_schema.names
    missing = [n for n in table_names if n not in names]
    if only_deletes and ctx.primary_keys:
        fill = [n for n in missing if n not in ctx.primary_keys]
    else:
        fill = _added_nullable(ctx, missing)
    missing = [n for n in missing if n not in fill]
    if missing:
        hint = "; a delete may leave out all but the primary key" if only_deletes and ctx.primary_keys else ""
        raise SchemaMismatchError(f"input is missing columns {missing}{hint}", table=ctx.name)
    extra = [n for n in names if n not in table_names]
    if extra:
        raise SchemaMismatchError(f"input has columns not in the table: {extra}", table=ctx.name)
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"input has duplicate column names {list(names)}", table=ctx.name)
    return fill


def _placeholder(ctx: TableContext, field: pa.Field, rows: int) -> pa.Array:
    """A column the input left out: nulls, or for a NOT NULL column its type's zero."""
    if field.nullable:
        return pa.nulls(rows, field.type)
    t = pa.types
    if t.is_string(field.type) or t.is_large_string(field.type):
        zero: pa.Scalar = pa.scalar("", field.type)
    elif t.is_binary(field.type) or t.is_large_binary(field.type):
        zero = pa.scalar(b"", field.type)
    elif t.is_boolean(field.type):
        zero = pa.scalar(value=False)
    elif t.is_integer(field.type) or t.is_floating(field.type) or t.is_decimal(field.type) or \
            t.is_temporal(field.type):
        zero = pa.scalar(0, pa.int64() if t.is_temporal(field.type) and not t.is_date32(field.type) else None)
        zero = zero.cast(pa.int32() if t.is_date32(field.type) else zero.type).cast(field.type)
    else:
        raise SchemaMismatchError(f"a delete by key must carry the NOT NULL column {field.name!r} "
                                  f"({field.type})", table=ctx.name, column=field.name)
    return pa.repeat(zero, rows)


def conform(ctx: TableContext, data: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """Rows cast to the table's schema (column order too) and each row's value kind.

    Raises a DataError naming the table and column for anything that does not fit.
    """
    schema = ctx.arrow_schema
    kind_field = ctx.options.rowkind_field
    kinds: np.ndarray | None = None
    if _takes_rowkind(ctx, data.column_names):
        kinds = row_kinds(data.column(ROWKIND_COLUMN), ctx.name, ROWKIND_COLUMN)
        data = data.drop_columns([ROWKIND_COLUMN])
    only_deletes = kinds is not None and len(kinds) > 0 and bool((kinds == kv.DELETE).all())
    fill = check_columns(ctx, data.column_names, only_deletes=only_deletes)
    if fill:
        # Input shaped like the schema before columns were added, or deletes by key alone: the
        # other columns are null (a NOT NULL one holds its type's zero: a delete's values are
        # not read back).
        filler = [_placeholder(ctx, schema.field(n), data.num_rows) for n in fill]
        data = pa.Table.from_arrays([*data.columns, *filler], names=[*data.column_names, *fill])
    columns = []
    for field in schema:
        column = data.column(field.name)
        if not column.type.equals(field.type):
            if not _same_kind(column.type, field.type):
                raise SchemaMismatchError(
                    f"of type {column.type} does not match the table's {field.type}; "
                    "only casts within a kind of type are made (integers, floats, decimals, strings, ...)",
                    table=ctx.name, column=field.name,
                )
            try:
                column = column.cast(field.type, safe=True)
            except pa.ArrowException as exc:
                raise SchemaMismatchError(
                    f"column {field.name!r} of type {data.column(field.name).type} "
                    f"does not cast safely to {field.type}: {exc}",
                    table=ctx.name, column=field.name,
                ) from None
        if not field.nullable and column.null_count:
            role = "primary-key" if field.name in ctx.primary_keys else "NOT NULL"
            raise NullKeyError(f"{role} column {field.name!r} has {column.null_count} null values",
                               table=ctx.name, column=field.name)
        columns.append(column)
    rows = pa.Table.from_arrays(columns, schema=schema)
    if kind_field is not None:
        kinds = row_kinds(rows.column(kind_field), ctx.name, kind_field)
    if kinds is None:
        kinds = np.zeros(rows.num_rows, dtype=np.int8)
    engine = ctx.merge_engine
    engine.check_input(kinds, ctx.name)
    keep = engine.input_mask(kinds)
    if keep is not None:
        rows, kinds = rows.filter(pa.array(keep)), kinds[keep]
    return rows, kinds
