"""The shared executor (one pool, recreated after fork) and the caches that can be cleared."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table import executor
from changelake.table.io.cache import ManifestCache
from changelake.table.maintenance import rollback
from changelake.table.read import deletion_vectors as read_vectors
from changelake.table.read import live_files


def _pool_works_in_child(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    pool = executor.executor()
    queue.put((os.getpid(), pool.submit(sum, [1, 2, 3]).result(timeout=10)))


def test_one_pool_shared_and_recreated_after_fork() -> None:
    pool = executor.executor()
    assert executor.executor() is pool
    assert executor.map_all(lambda x: x * 2, range(10)) == [x * 2 for x in range(10)]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pool_works_in_child, args=(queue,))
    child.start()
    child.join(30)
    pid, total = queue.get(timeout=5)
    assert child.exitcode == 0 and pid != os.getpid() and total == 6


def test_manifest_cache_and_key_codec_can_be_cleared(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table("db.t", schema, primary_keys=["k"])
    table.write(pa.table({"k": [1, 2], "v": [3, 4]}))
    live_files.MANIFEST_CACHE.clear()
    loads = []
    key = ("test", "some-path")
    assert live_files.MANIFEST_CACHE.get(key, lambda: loads.append(1) or 7) == 7
    assert live_files.MANIFEST_CACHE.get(key, lambda: loads.append(1) or 8) == 7
    live_files.MANIFEST_CACHE.clear()
    assert live_files.MANIFEST_CACHE.get(key, lambda: loads.append(1) or 9) == 9
    assert len(loads) == 2
    codec = table.context.key_of
    first = codec(table.scan().plan()[0].files[0].min_key)
    codec.clear()
    assert codec(table.scan().plan()[0].files[0].min_key) == first == (1,)
    assert table.scan().to_arrow().num_rows == 2


def test_a_cache_bounded_by_bytes_keeps_the_most_recent_within_the_bound() -> None:
    cache = ManifestCache(max_files=100, max_bytes=1000, weigh=len)
    for i in range(10):
        cache.put(("fs", f"f{i}"), b"x" * 300)
        assert cache.nbytes <= 1000
    assert cache.nbytes == 900
    assert cache.get(("fs", "f9"), lambda: b"reloaded") == b"x" * 300  # kept
    assert cache.get(("fs", "f0"), lambda: b"reloaded") == b"reloaded"  # evicted, loaded again
    cache.put(("fs", "huge"), b"y" * 2000)  # over the bound alone: never kept
    assert cache.get(("fs", "huge"), lambda: b"again") == b"again"
    # kept now: f7, f8, f9 (300 each), f0 (8), huge (5); replacing f9 replaces its weight too
    cache.put(("fs", "f9"), b"z" * 10)
    assert cache.nbytes == 300 + 300 + 10 + 8 + 5
    cache.clear()
    assert cache.nbytes == 0


def test_index_files_a_writer_wrote_are_not_read_back(tmp_path: Path) -> None:
    """A writer of a table with deletion vectors keeps the bytes of the index files it writes,
    so that its next commit reads its buckets' vectors without reading storage."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", schema, primary_keys=["k"], options={"bucket": "1", "deletion-vectors.enabled": "true"})
    read_vectors.INDEX_FILE_CACHE.clear()
    table.write(pa.table({"k": [1, 2, 3], "v": [1, 2, 3]}))
    table.write(pa.table({"k": [2], "v": [20]}))
    (index_file,) = os.listdir(os.path.join(table.location, "index"))
    path = table.context.paths.index(index_file)
    cached = read_vectors.INDEX_FILE_CACHE.get((table.context.file_io.protocol, path), lambda: b"read from storage")
    with open(path, "rb") as stored:
        assert cached == stored.read()
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "v": 1}, {"k": 2, "v": 20}, {"k": 3, "v": 3}]


def test_rollback_records_are_read_once_until_the_cache_is_cleared(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"])
    kept = table.write(pa.table({"k": [1], "v": [1]}, schema=schema))
    table.write(pa.table({"k": [1], "v": [2]}, schema=schema))
    table.rollback_to(snapshot_id=kept.id)
    identity = table.stream().source.identity
    rollback.RECORDS.clear()
    (record,) = rollback.RECORDS.records(table.context, identity)
    assert (record.snapshot_id, record.latest_before) == (kept.id, kept.id + 1)
    path = Path(table.location) / "rollback" / "rollback-0"
    # Records are never rewritten; this one is, to show whether it is read again.
    path.write_bytes(path.read_bytes().replace(b'"latestBefore":2', b'"latestBefore":9'))
    assert rollback.RECORDS.records(table.context, identity) == [record]
    rollback.RECORDS.clear()
    assert rollback.RECORDS.records(table.context, identity)[0].latest_before == 9


def test_map_all_waits_for_the_running_calls_before_it_raises() -> None:
    """A caller cleaning up after a failed call must see what the other calls wrote."""
    failed = threading.Event()
    finished: list[int] = []

    def call(i: int) -> int:
        if i == 0:
            failed.set()
            raise ValueError("the first call fails")
        failed.wait(5)
        time.sleep(0.05)  # still running when the failure reaches map_all
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="the first call fails"):
        executor.map_all(call, range(2))
    assert finished == [1]
