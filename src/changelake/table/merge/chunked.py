"""Merging big sorted inputs in bounded memory: a k-way merge by key bound, whole-batch.

A split or compaction section whose files are big is not read whole: each file is read as
record batches (files are sorted by key), and rows are handed to the merge engine in chunks
that hold every row of each of their keys, so a merge per chunk equals the merge of the whole
(merge engines merge per key). Memory stays about two batches per file, whatever the files'
sizes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.format.manifest import DataFileMeta
from changelake.table.merge.sort import comparable

# Files of a section (or split) larger than this together are merged in chunks; smaller ones
# are read whole, which is faster (one merge, no bookkeeping). Parquet files grow several
# times over in memory, and a merge copies its input, so this is well under the memory a
# whole merge of them takes.
CHUNKED_MERGE_BYTES = 32 * 1024 * 1024
# rows per record batch read from each file of a chunked merge
BATCH_ROWS = 64 * 1024

_Key = tuple[Any, ...]


def is_big(files: Sequence[DataFileMeta], *, limit: int | None = None) -> bool:
    """Whether ``files`` are too big together to be merged whole: over ``limit`` bytes
    (:data:`CHUNKED_MERGE_BYTES` unless given)."""
    return sum(f.file_size for f in files) > (CHUNKED_MERGE_BYTES if limit is None else limit)


def batches_of(rows: pa.Table) -> Iterator[pa.Table]:
    """``rows`` (already in memory) as slices of :data:`BATCH_ROWS` rows, zero-copy."""
    for start in range(0, rows.num_rows, BATCH_ROWS):
        yield rows.slice(start, BATCH_ROWS)


def key_bounded(sources: Sequence[Iterator[pa.Table]], key_columns: Sequence[str]) -> Iterator[pa.Table]:
    """The rows of ``sources`` (each an iterator of batches sorted by the key columns) in chunks
    that each hold all rows of their keys: the concatenation, in source order, of every
    source's rows up to a bound key, then the next bound's. The bound is the smallest last key
    buffered among the sources not exhausted; a source whose buffer ends at the bound reads on
    until it is past it, so every row of the bound key is taken. Each source buffers at most
    the rest of one batch plus one more batch."""
    buffers: list[pa.Table | None] = [_next(source) for source in sources]
    live = [b is not None for b in buffers]
    while True:
        ends = [_last_key(b, key_columns) for b, more in zip(buffers, live, strict=True) if more and b is not None]
        if not ends:
            rest = [b for b in buffers if b is not None and b.num_rows]
            if rest:
                yield pa.concat_tables(rest)
            return
        bound = min(ends)
        for i, source in enumerate(sources):
            buffer = buffers[i]
            while live[i] and buffer is not None and _last_key(buffer, key_columns) == bound:
                more = _next(source)
                if more is None:
                    live[i] = False
                else:
                    buffer = pa.concat_tables([buffer, more])
            buffers[i] = buffer
        taken = []
        for i, source in enumerate(sources):
            buffer = buffers[i]
            if buffer is None:
                continue
            length = _prefix_length(buffer, key_columns, bound)
            if length:
                taken.append(buffer.slice(0, length))
            rest = buffer.slice(length)
            if not rest.num_rows and live[i]:
                refill = _next(source)
                live[i] = refill is not None
                buffers[i] = refill
            else:
                buffers[i] = rest if rest.num_rows else None
        if taken:
            yield pa.concat_tables(taken) if len(taken) > 1 else taken[0]


def _next(source: Iterator[pa.Table]) -> pa.Table | None:
    """The source's next non-empty batch (None once it is exhausted)."""
    for batch in source:
        if batch.num_rows:
            return batch
    return None


def _last_key(rows: pa.Table, key_columns: Sequence[str]) -> _Key:
    """The key of the last row, in the order the files are sorted in (floats as Paimon orders
    them), as comparable Python values."""
    last = rows.slice(rows.num_rows - 1, 1)
    return tuple(comparable(last.column(c))[0].as_py() for c in key_columns)


def _prefix_length(rows: pa.Table, key_columns: Sequence[str], bound: _Key) -> int:
    """How many leading rows of key-sorted ``rows`` have a key <= ``bound``: a binary search
    for one integer key, else a lexicographic comparison over the key columns."""
    columns = [comparable(rows.column(c)) for c in key_columns]
    if len(columns) == 1 and pa.types.is_integer(columns[0].type):
        return int(np.searchsorted(np.asarray(columns[0].to_numpy()), bound[0], side="right"))
    at_most: Any = None
    for column, value in zip(reversed(columns), reversed(bound), strict=True):
        scalar = pa.scalar(value, column.type)
        if at_most is None:
            at_most = pc.less_equal(column, scalar)
        else:
            at_most = pc.or_(pc.less(column, scalar), pc.and_(pc.equal(column, scalar), at_most))
    return int(pc.sum(at_most).as_py() or 0)
