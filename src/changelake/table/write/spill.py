"""Sorted runs spilled to local disk when the write buffer fills, and their merge at flush."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.context import TableContext
from changelake.table.format import kv
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.merge import sort

_SPILL_BATCH_ROWS = 64 * 1024


@dataclass(frozen=True)
class SpilledRun:
    """A run sorted by key, not merged (the flush merges all runs at once), spilled to local
    disk as Arrow IPC record batches, with each batch's range of the first key column so key
    ranges can be read back piecewise."""

    path: str
    bounds: tuple[tuple[Any, Any], ...]
    rows: int
    nbytes: int

    @staticmethod
    def write(path: str, part: pa.Table, first_key: str) -> SpilledRun:
        bounds = []
        options = pa.ipc.IpcWriteOptions(compression="lz4")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, part.schema, options=options) as out:
            for batch in part.to_batches(max_chunksize=_SPILL_BATCH_ROWS):
                out.write_batch(batch)
                killpoints.reached(KillPoint.SPILL_RUN)
                column = sort.comparable(batch.column(part.schema.get_field_index(first_key)))
                bounds.append((column[0].as_py(), column[len(column) - 1].as_py()))
        return SpilledRun(path, tuple(bounds), part.num_rows, part.nbytes)

    def read_range(self, first_key: str, low: Any, high: Any) -> pa.Table | None:
        """Rows whose first key column lies in [low, high) (None = unbounded)."""
        reader = pa.ipc.open_file(self.path)
        wanted = [i for i, (lo, hi) in enumerate(self.bounds)
                  if (low is None or hi >= low) and (high is None or lo < high)]
        if not wanted:
            return None
        rows = pa.Table.from_batches([reader.get_batch(i) for i in wanted])
        return _in_range(rows, first_key, low, high)


def _in_range(rows: pa.Table, column: str, low: Any, high: Any) -> pa.Table:
    values = sort.comparable(rows.column(column))
    mask = None
    if low is not None:
        mask = pc.greater_equal(values, pa.scalar(low, values.type))
    if high is not None:
        upper = pc.less(values, pa.scalar(high, values.type))
        mask = upper if mask is None else pc.and_(mask, upper)
    return rows if mask is None else rows.filter(mask)


def merge_runs(ctx: TableContext, runs: Sequence[SpilledRun], part: pa.Table) -> Iterator[pa.Table]:
    """Spilled runs plus the last buffer (none of them merged), merged range by range of the
    first key column, so only about one buffer's worth of rows is in memory at a time."""
    for rows in _ranges(ctx, runs, part):
        yield ctx.merge_rows(rows, drop_deletes=False)


def sorted_runs(ctx: TableContext, runs: Sequence[SpilledRun], part: pa.Table) -> Iterator[pa.Table]:
    """The same rows not merged, sorted by key and sequence number across the runs, range by
    range (the raw input of a flush, as an input changelog records it)."""
    keys = [kv.key_column(k) for k in ctx.key_names]
    for rows in _ranges(ctx, runs, part):
        yield rows.take(sort.sort_indices([rows.column(k) for k in keys], rows.column(kv.SEQUENCE)))


def _ranges(ctx: TableContext, runs: Sequence[SpilledRun], part: pa.Table) -> Iterator[pa.Table]:
    """The rows of the runs and the buffer, range by range of the first key column (ranges in
    key order; a range holds about half a buffer)."""
    first_key = kv.key_column(ctx.key_names[0])
    starts = sorted({lo for run in runs for lo, _ in run.bounds} | (
        {v.as_py() for v in sort.comparable(part.column(first_key)).take(
            pa.array(range(0, part.num_rows, _SPILL_BATCH_ROWS)))} if part.num_rows else set()))
    total_rows = sum(r.rows for r in runs) + part.num_rows
    total_bytes = sum(r.nbytes for r in runs) + part.nbytes
    # A range holds about half a buffer: merging it briefly needs a few copies of it.
    range_rows = max(_SPILL_BATCH_ROWS, ctx.options.write_buffer_size * total_rows // max(1, 2 * total_bytes))
    step = max(1, range_rows // _SPILL_BATCH_ROWS)
    edges: list[Any] = [None, *starts[step::step], None]
    for low, high in itertools.pairwise(edges):
        pieces = [p for p in (run.read_range(first_key, low, high) for run in runs) if p is not None]
        if part.num_rows:
            pieces.append(_in_range(part, first_key, low, high))
        rows = pa.concat_tables(pieces) if pieces else None
        if rows is not None and rows.num_rows:
            yield rows
        # The allocator keeps freed pages unless told otherwise; hand them back between ranges.
        pa.default_memory_pool().release_unused()
