"""The shared executor (one pool, recreated after fork) and the caches that can be cleared."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pyarrow as pa

import changelake as cl
from changelake.table import executor
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
