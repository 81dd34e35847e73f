"""Sorting key-value rows by (key, sequence): the one-sort path for concatenated sorted runs
must give exactly lexsort's order, ties and out-of-order sequences included."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from changelake.table.merge import sort


def lexsorted(keys: np.ndarray, seq: np.ndarray) -> np.ndarray:
    return np.lexsort([seq, keys])


def test_runs_oldest_first_sort_by_key_alone() -> None:
    old = np.arange(0, 100, 2, dtype=np.int64)
    new = np.arange(0, 100, 3, dtype=np.int64)
    keys = np.concatenate([old, new])
    seq = np.concatenate([np.arange(old.size), 1000 + np.arange(new.size)])
    order = sort.sort_indices([pa.array(keys)], pa.array(seq))
    assert order.tolist() == lexsorted(keys, seq).tolist()


def test_runs_newest_first_fall_back_to_the_full_sort() -> None:
    new = np.arange(0, 100, 3, dtype=np.int64)
    old = np.arange(0, 100, 2, dtype=np.int64)
    keys = np.concatenate([new, old])
    seq = np.concatenate([1000 + np.arange(new.size), np.arange(old.size)])
    order = sort.sort_indices([pa.array(keys)], pa.array(seq))
    assert order.tolist() == lexsorted(keys, seq).tolist()
    # the newest row of every key comes last within the key
    assert np.all(np.diff(seq[order])[np.diff(keys[order]) == 0] > 0)


def test_equal_sequences_keep_input_order() -> None:
    keys = np.array([5, 1, 5, 1, 5], dtype=np.int64)
    seq = np.array([7, 7, 7, 3, 7], dtype=np.int64)
    order = sort.sort_indices([pa.array(keys)], pa.array(seq))
    assert order.tolist() == lexsorted(keys, seq).tolist() == [3, 1, 0, 2, 4]


def test_take_sorted_takes_the_rows_of_a_many_chunk_table_batch_by_batch() -> None:
    rng = np.random.default_rng(3)
    n = 5_000
    whole = pa.table({"id": np.arange(n), "name": pa.array([f"n{i}" for i in range(n)])})
    # uneven batches, an empty one among them
    cuts = [0, 7, 7, 1_000, 1_001, 3_333, n]
    chunked = pa.concat_tables([whole.slice(a, b - a) for a, b in itertools.pairwise(cuts)])
    assert chunked.column(0).num_chunks >= 5
    for positions in (np.sort(rng.choice(n, 400, replace=False)), np.array([0, 6, 7, 1_000, 3_333, n - 1]),
                      np.zeros(0, dtype=np.int64)):
        taken = sort.take_sorted(chunked, positions)
        assert taken.schema == whole.schema
        assert taken.to_pydict() == whole.take(pa.array(positions, pa.int64())).to_pydict()
