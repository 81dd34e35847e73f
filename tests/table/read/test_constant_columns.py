"""The cache of constant columns a raw split's partition columns are sliced from."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from changelake.table.read.constants import ConstantColumns


def test_slices_equal_a_fresh_repeat_and_the_cache_grows_to_the_longest() -> None:
    cache = ConstantColumns()
    for length in (3, 10, 7, 25, 0):
        for value, type_ in (("2024-01-01", pa.string()), (dt.date(2024, 2, 29), pa.date32()), (7, pa.int16()),
                             (None, pa.string())):
            got = cache.column(value, type_, length)
            assert got.type == type_
            assert got.equals(pa.repeat(pa.scalar(value, type_), length))
    longest = cache.column("2024-01-01", pa.string(), 1)
    assert longest.equals(pa.array(["2024-01-01"]))


def test_memory_stays_within_the_bound_and_slices_outlive_eviction() -> None:
    cache = ConstantColumns(max_bytes=64 * 1024)
    kept = cache.column("a" * 100, pa.string(), 100)  # about 10 kB
    for i in range(50):
        cache.column(f"value-{i}-" + "x" * 90, pa.string(), 100)
        assert cache.nbytes <= cache.max_bytes
    assert kept.equals(pa.repeat(pa.scalar("a" * 100), 100))  # evicted, still whole
    huge = cache.column("y" * 1000, pa.string(), 1000)  # 1 MB: never cached
    assert len(huge) == 1000 and cache.nbytes <= cache.max_bytes
    cache.clear()
    assert cache.nbytes == 0
    assert cache.column(1, pa.int64(), 4).to_pylist() == [1, 1, 1, 1]
