"""What a data file's value statistics guarantee about its rows, for skipping files a filter
cannot match (Paimon's ``KeyValueFileStoreScan`` / ``AppendOnlyFileStoreScan`` value filters).

The statistics are read in whatever layout their writer chose: ``_VALUE_STATS_COLS`` naming
the columns (Paimon 1.x's dense layout), or null for every column of the file's schema (Java
Paimon 0.9, pypaimon, changelake), or ``_WRITE_COLS`` where a writer set those instead. Columns
are matched to the current schema by field id; a renamed column's bounds hold under its new
name, one whose type changed gives none. Files without statistics guarantee nothing.

Whether a guarantee may drop a file is the planner's call: only where no merge could change
the file's rows (see ``planner.plan``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.context import TableContext
from changelake.table.format import binary_row
from changelake.table.format.manifest import DataFileMeta

_NOTHING: pc.Expression = pc.scalar(True)


def orderable(bound: object) -> bool:
    """Whether a statistics bound orders rows: not null, nor NaN (which other writers may
    record and which compares to nothing, so a filter could not tell the NaN rows apart)."""
    return bound is not None and bound == bound


def guarantee(ctx: TableContext, file: DataFileMeta) -> pc.Expression:
    """What every row of ``file`` satisfies by its value statistics (True: nothing known)."""
    stats = file.value_stats
    arity, low_row = binary_row.deserialize(stats.min_values)
    if arity == 0:
        return _NOTHING
    schema = ctx.schema if file.schema_id == ctx.schema.id else ctx.schemas.get(file.schema_id)
    by_name = {f.name: f for f in schema.fields}
    if file.value_stats_cols is not None:
        names = list(file.value_stats_cols)
    elif file.write_cols is not None:
        names = list(file.write_cols)
    else:
        names = [f.name for f in schema.fields]
    if arity != len(names) or any(n not in by_name for n in names):
        return _NOTHING  # statistics of columns this table does not know: no guarantee
    fields = [by_name[n] for n in names]
    types = [f.arrow_field().type for f in fields]
    # nested columns have no bounds: their slots are read as opaque bytes and skipped
    readable = [pa.binary() if pa.types.is_nested(t) else t for t in types]
    lows = binary_row.from_bytes(low_row, readable)
    highs = binary_row.from_bytes(binary_row.deserialize(stats.max_values)[1], readable)
    counts = stats.null_counts or ()
    current = {f.id: f for f in ctx.schema.fields}
    result = _NOTHING
    for i, (field, t) in enumerate(zip(fields, types, strict=True)):
        now = current.get(field.id)
        if now is None or pa.types.is_nested(t) or now.arrow_field().type != t:
            continue
        column = pc.field(now.name)
        low, high = lows[i], highs[i]
        nulls = counts[i] if i < len(counts) else None
        if nulls is not None and nulls == file.row_count:
            result = result & column.is_null()
            continue
        if not (orderable(low) and orderable(high)):
            continue
        bounds = [column == pc.scalar(pa.scalar(low, t))] if low == high else \
            [column >= pc.scalar(pa.scalar(low, t)), column <= pc.scalar(pa.scalar(high, t))]
        for bound in bounds:
            # Min and max leave nulls out: a column with nulls (or an unknown count) may hold
            # them. Each bound is or-ed with them on its own: Arrow's simplification reads
            # (x >= a or x is null) and (x <= b or x is null), not ((x >= a and x <= b) or x is null).
            result = result & (bound if nulls == 0 else bound | column.is_null())
    return result
