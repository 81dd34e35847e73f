"""Reading splits: each split's files merged by the merge engine (or read raw), filtered and
projected; many splits in parallel on the shared executor, a bounded window at a time. Change
scans read one-file splits as stored, with each row's kind."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future

import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import ScanError
from changelake.table.context import TableContext
from changelake.table.executor import WORKERS, executor
from changelake.table.format import deletion_vector, kv
from changelake.table.read import deletion_vectors
from changelake.table.read.deletion_vectors import DeletionFile
from changelake.table.read.planner import Split


def read_split(
    ctx: TableContext,
    split: Split,
    columns: Sequence[str],
    expression: pc.Expression | None,
    rows: tuple[int, int] | None = None,
) -> pa.Table:
    """The merged rows of one split, filtered by ``expression`` and projected to ``columns``;
    ``rows`` = (start, stop) keeps only those merged rows (counted before the filter), so a
    change stream can resume inside a split."""
    # A filter may name any column; a projection needs the columns its merge depends on too.
    value_columns = list(ctx.arrow_schema.names) if expression is not None else \
        ctx.merge_engine.required_columns(columns)
    # Raw splits are not merged: their rows need only their kinds besides the values.
    wanted = [kv.VALUE_KIND, *value_columns] if split.raw_convertible else \
        [*ctx.key_columns, kv.SEQUENCE, kv.VALUE_KIND, *value_columns]
    parts = [ctx.read_file(split.bucket_dir, f, wanted) for f in split.files]
    deletion_files = split.deletion_files or (None,) * len(parts)
    if split.raw_convertible:
        # Not merged: each file's live rows, in one filter per file.
        parts = [_live_rows(ctx, part, d) for part, d in zip(parts, deletion_files, strict=True)]
    elif split.deletion_files:
        parts = [_without_deleted(ctx, part, d) for part, d in zip(parts, deletion_files, strict=True)]
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    merged = table if split.raw_convertible else ctx.merge_rows(table, drop_deletes=True)
    if rows is not None:
        merged = merged.slice(rows[0], rows[1] - rows[0])
    return apply_filter(ctx, merged, expression).select(list(columns))


def _live_rows(ctx: TableContext, part: pa.Table, deletion_file: DeletionFile | None) -> pa.Table:
    """The rows of a whole file of a raw split that are neither marked by its deletion vector
    nor retractions: raw splits hold no retractions by their metadata, and dropping them anyway
    guards against writers whose delete counts are wrong (one mask, one filter)."""
    kinds = part.column(kv.VALUE_KIND).to_numpy()
    keep = (kinds == kv.INSERT) | (kinds == kv.UPDATE_AFTER)
    if deletion_file is not None:
        alive = deletion_vector.keep_mask(deletion_vectors.read_vector(ctx, deletion_file), part.num_rows)
        if alive is not None:
            keep &= alive
    return part if keep.all() else part.filter(keep)


def _without_deleted(ctx: TableContext, part: pa.Table, deletion_file: DeletionFile | None) -> pa.Table:
    """The rows of a whole file that its deletion vector does not mark (one vectorized mask)."""
    if deletion_file is None:
        return part
    keep = deletion_vector.keep_mask(deletion_vectors.read_vector(ctx, deletion_file), part.num_rows)
    return part if keep is None else part.filter(keep)


def apply_filter(ctx: TableContext, table: pa.Table, expression: pc.Expression | None) -> pa.Table:
    """The rows of ``table`` that match ``expression`` (all rows without one)."""
    if expression is None:
        return table
    try:
        return table.filter(expression)
    except pa.ArrowException as exc:
        raise ScanError(f"filter {expression} does not apply: {exc}", table=ctx.name) from None


def read_changes(ctx: TableContext, split: Split, columns: Sequence[str],
                 rows: tuple[int, int] | None = None) -> pa.Table:
    """The rows of a one-file split as stored, not merged: ``_VALUE_KIND`` (each row's kind)
    then ``columns``, in file order; ``rows`` = (start, stop) reads only those rows."""
    (meta,) = split.files
    return ctx.read_file(split.bucket_dir, meta, [kv.VALUE_KIND, *columns], rows)


def read_splits(
    ctx: TableContext, splits: Sequence[Split], columns: Sequence[str], expression: pc.Expression | None
) -> Iterator[pa.Table]:
    """Every split's rows in plan order, read in parallel with a window of a few splits ahead."""
    pool = executor()
    pending: deque[Future[pa.Table]] = deque()
    upcoming = iter(splits)
    for split in upcoming:
        pending.append(pool.submit(read_split, ctx, split, columns, expression))
        if len(pending) >= 2 * WORKERS:
            break
    while pending:
        result = pending.popleft().result()
        nxt = next(upcoming, None)
        if nxt is not None:
            pending.append(pool.submit(read_split, ctx, nxt, columns, expression))
        yield result
