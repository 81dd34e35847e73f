"""Sorting key-value rows by (key, sequence) and finding each key's segment, whole-column.

Keys that numpy can order (integers, temporals, booleans, floats) sort with ``lexsort``; other
keys (strings, decimals, binaries) sort with Arrow. Floats order as Paimon orders them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.format import kv


def numpy_key(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """A numpy view that sorts like the column, for fixed-width integer-like columns (None for
    other columns)."""
    t = arr.type
    if pa.types.is_integer(t):
        return np.asarray(arr.to_numpy())
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        width = pa.int64() if t.bit_width == 64 else pa.int32()
        return np.asarray(arr.cast(width).to_numpy())
    if pa.types.is_boolean(t):
        return np.asarray(arr.to_numpy(zero_copy_only=False))
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return kv.float_order(np.asarray(arr.to_numpy(zero_copy_only=False)))
    return None


def comparable(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The column itself, or for floats int64s ordered like Paimon orders float keys."""
    if pa.types.is_floating(column.type):
        return pa.array(kv.float_order(np.asarray(column.to_numpy(zero_copy_only=False))))
    return column


def sort_indices(keys: Sequence[pa.Array | pa.ChunkedArray], seq: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row order by (keys..., seq), stable for ties."""
    numeric = [numpy_key(k) for k in keys]
    seq_np = np.asarray(seq.to_numpy())
    if len(numeric) == 1 and numeric[0] is not None:
        presorted = _presorted_order(numeric[0], seq_np)
        if presorted is not None:
            return presorted
    if all(n is not None for n in numeric):
        columns = [seq_np] + [n for n in reversed(numeric) if n is not None]
        return np.asarray(np.lexsort(columns), dtype=np.int64)
    table = pa.table({f"k{i}": comparable(k) for i, k in enumerate(keys)} | {"seq": seq_np})
    order = [(f"k{i}", "ascending") for i in range(len(keys))] + [("seq", "ascending")]
    return np.asarray(pc.sort_indices(table, sort_keys=order).to_numpy(), dtype=np.int64)


def _presorted_order(key: np.ndarray, seq: np.ndarray) -> np.ndarray | None:
    """Order by one key, or None unless that order also has sequence numbers ascending within
    every key. A compaction's input is sorted runs (files) concatenated oldest first: a stable
    sort by key alone (Timsort, which merges the runs it finds) then orders it by (key,
    sequence), checked here, at the cost of one sort instead of lexsort's two."""
    order = np.argsort(key, kind="stable")
    ordered_key, ordered_seq = key[order], seq[order]
    ties = ordered_key[1:] == ordered_key[:-1]
    if np.any(ties & (ordered_seq[1:] < ordered_seq[:-1])):
        return None
    return np.asarray(order, dtype=np.int64)


def sorted_positions(column: pa.ChunkedArray, wanted: np.ndarray) -> np.ndarray:
    """Positions, ascending, of the rows of a key-sorted integer ``column`` whose key is one of
    the sorted ``wanted`` keys (a repeated wanted key finds its rows once per repeat): two
    binary searches per wanted key instead of hashing every row. Searched chunk by chunk, each
    chunk a view: a big file's keys come in many chunks, never concatenated."""
    found = []
    offset = 0
    for chunk in column.chunks:
        stored = chunk.to_numpy()
        if len(stored):
            # only the wanted keys within the chunk's range (a key's rows may span two chunks)
            inside = wanted[int(np.searchsorted(wanted, stored[0], side="left")):
                            int(np.searchsorted(wanted, stored[-1], side="right"))]
            starts = np.searchsorted(stored, inside, side="left")
            counts = np.searchsorted(stored, inside, side="right") - starts
            # each found key's run of rows (usually one): start, start + 1, ..., start + count - 1
            runs = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
            found.append(np.repeat(starts, counts) + runs + offset)
        offset += len(stored)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def take_sorted(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """The rows of ``table`` at ascending ``positions``, taken record batch by record batch:
    Arrow's take on a many-chunk column first concatenates the chunks, which costs the whole
    column (a big cached file) to fetch a few of its rows."""
    if table.num_columns == 0 or table.column(0).num_chunks <= 1:
        return table.take(pa.array(positions))
    batches = table.to_batches()
    ends = np.cumsum([b.num_rows for b in batches])
    cuts = np.searchsorted(positions, ends)
    taken, start, low = [], 0, 0
    for batch, end, high in zip(batches, ends, cuts, strict=True):
        if high > low:
            taken.append(batch.take(pa.array(positions[low:high] - start)))
        start, low = int(end), int(high)
    return pa.Table.from_batches(taken, schema=table.schema)


def group_ends(sorted_keys: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Mask of rows that are the last of their key among rows sorted by key."""
    return ordered_group_ends(sorted_keys, None)


def ordered_group_ends(keys: Sequence[pa.Array | pa.ChunkedArray | np.ndarray], order: np.ndarray | None
                       ) -> np.ndarray:
    """Mask of the positions of ``order`` (None: the rows as they are) that hold the last row
    of their key, for rows that ``order`` sorts by key; numeric keys are compared in numpy,
    without taking the Arrow column."""
    n = len(keys[0]) if order is None else len(order)
    if n == 0:
        return np.zeros(0, dtype=bool)
    changed = np.zeros(n - 1, dtype=bool)
    for column in keys:
        numeric = column if isinstance(column, np.ndarray) else numpy_key(column)
        if numeric is not None:
            ordered = numeric if order is None else numeric[order]
            changed |= ordered[1:] != ordered[:-1]
        else:
            assert not isinstance(column, np.ndarray)
            ordered_column = column if order is None else column.take(order)
            diff = pc.not_equal(ordered_column[1:], ordered_column[:-1])
            changed |= np.asarray(pc.fill_null(diff, True).to_numpy(zero_copy_only=False))
    return np.append(changed, True)


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct ``values``, ascending: ``values`` themselves when they are so already (the
    keys of one sorted file, as a compaction's level-0 input mostly is), checked in one pass
    instead of sorted again."""
    if len(values) < 2 or bool(np.all(values[1:] > values[:-1])):
        return values
    return np.unique(values)


def deduplicate(table: pa.Table, key_names: Sequence[str], *, drop_retractions: bool = False) -> pa.Table:
    """Last row (highest sequence) of every key, sorted by key; delete markers kept, or with
    ``drop_retractions`` left out (taken once, rather than taken and then filtered)."""
    if table.num_rows <= 1 and not drop_retractions:
        return table
    keys = [table.column(k) for k in key_names]
    order = sort_indices(keys, table.column(kv.SEQUENCE))
    last = order[ordered_group_ends(keys, order)]
    if drop_retractions:
        kinds = np.asarray(table.column(kv.VALUE_KIND).to_numpy())[last]
        last = last[(kinds == kv.INSERT) | (kinds == kv.UPDATE_AFTER)]
    return table.take(last)
