"""Tables on object storage through fsspec URLs: a table's whole life on a real S3 endpoint
(moto's server on loopback) reads like the same life on local disk; commits are conditional
puts, so concurrent committers lose nothing and a lost race is retried; a store without
conditional writes refuses to commit unless a commit lock is configured."""

from __future__ import annotations

import contextlib
import datetime as dt
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.io.fileio import FileIO
from s3_support import S3Endpoint

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
OPTIONS = {"bucket": "2", "changelog-producer": "lookup", "snapshot.num-retained.min": "1",
           "snapshot.num-retained.max": "100"}


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


def _life(catalog: cl.Catalog) -> dict[str, Any]:
    """Create, write, compact, read the lookup changelog and a change stream, tag, expire,
    remove an orphan, roll back: what each step shows, with paths made table-relative."""
    table = catalog.create_table("db.t", SCHEMA, ["id"], options=OPTIONS)
    table.write(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    table.write(pa.table({"id": [2, 4], "v": ["B", "d"]}))
    table.create_tag("two")
    table.write(pa.table({"id": [3, 5], "v": ["C", "e"]}))
    compacted = table.compact(full=True)
    latest = table.latest_snapshot()
    assert compacted is not None and latest is not None
    seen = {
        "rows": _rows(table.scan().to_arrow()),
        "changes": _rows(table.changes(0, latest.id).to_arrow()),
        "stream": [(b.snapshot_id, b.kind.value, _rows(b.data)) for b in table.stream(snapshot_id=1)],
        "tables": (catalog.list_databases(), catalog.list_tables("db")),
    }
    stray = f"{table.location}/bucket-0/data-stray.parquet"
    catalog.file_io.fs.pipe_file(stray, b"left by a crashed writer")
    removed = table.remove_orphan_files(older_than=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    seen["orphans"] = [p.removeprefix(table.context.paths.root) for p in removed]
    expired = table.expire_snapshots(retain_max=2)
    seen["expired"] = (expired.snapshots, [s.id for s in table.snapshots()])
    seen["rolled_back"] = table.rollback_to(tag="two").id
    seen["after_rollback"] = _rows(cl.open_table(table.location, catalog.file_io.storage_options).scan().to_arrow())
    return seen


def test_a_table_lives_on_s3_as_on_local_disk(s3: S3Endpoint, s3_warehouse: str, tmp_path: Path) -> None:
    on_s3 = _life(cl.Catalog(s3_warehouse, storage_options=s3.storage_options))
    assert on_s3 == _life(cl.Catalog(str(tmp_path)))
    assert on_s3["orphans"] == ["/bucket-0/data-stray.parquet"]
    keys = s3.keys(s3_warehouse.removeprefix(f"s3://{s3.bucket}/"))
    for kind in ("schema/schema-0", "snapshot/LATEST", "snapshot/EARLIEST", "tag/tag-two", "manifest/",
                 "bucket-0/data-", "rollback/"):
        assert any(f"/db.db/t/{kind}" in k for k in keys), kind


def test_a_table_on_s3_travels_to_another_process_by_pickling(s3: S3Endpoint, s3_warehouse: str) -> None:
    table = cl.Catalog(s3_warehouse, storage_options=s3.storage_options).create_table("db.t", SCHEMA, ["id"])
    table.write(pa.table({"id": [1], "v": ["a"]}))
    copy = pickle.loads(pickle.dumps(table))
    assert copy.context.file_io.storage_options == s3.storage_options
    assert copy.scan().to_arrow().to_pylist() == [{"id": 1, "v": "a"}]


def test_fsspec_configuration_travels_with_the_table(
    s3: S3Endpoint, s3_warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cl.Catalog(s3_warehouse, storage_options=s3.storage_options).create_table("db.t", SCHEMA, ["id"]).write(
        pa.table({"id": [1], "v": ["a"]}))
    monkeypatch.setitem(fsspec.config.conf, "s3", s3.storage_options)
    table = cl.open_table(f"{s3_warehouse}/db.db/t")  # as the Spark data source opens it
    monkeypatch.delitem(fsspec.config.conf, "s3")
    copy = pickle.loads(pickle.dumps(table))  # what an executor gets
    assert copy.context.file_io.storage_options == s3.storage_options
    assert copy.scan().to_arrow().to_pylist() == [{"id": 1, "v": "a"}]


def test_concurrent_committers_on_s3_lose_nothing(s3: S3Endpoint, s3_warehouse: str) -> None:
    catalog = cl.Catalog(s3_warehouse, storage_options=s3.storage_options)
    table = catalog.create_table("db.t", SCHEMA, ["id"], options={"bucket": "1"})
    writers, commits = 4, 3
    start = threading.Barrier(writers)
    failures: list[BaseException] = []

    def commit_many(w: int) -> None:
        try:
            mine = cl.open_table(table.location, s3.storage_options)
            start.wait()
            with mine.writer(commit_user=f"writer-{w}") as writer:
                for c in range(commits):
                    writer.write(pa.table({"id": [w * 100 + c], "v": [f"{w}/{c}"]}))
                    writer.commit(c)
        except BaseException as exc:  # surfaced by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=commit_many, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    table.refresh()
    snapshots = table.snapshots()
    appends = [s for s in snapshots if s.commit_kind is cl.CommitKind.APPEND]
    assert [s.id for s in snapshots] == list(range(1, len(snapshots) + 1))
    assert sorted((s.commit_user, s.commit_identifier) for s in appends) == [
        (f"writer-{w}", c) for w in range(writers) for c in range(commits)]
    assert table.scan().to_arrow().num_rows == writers * commits


def test_a_lost_race_on_s3_is_retried_with_the_next_snapshot_id(
    s3: S3Endpoint, s3_warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fixed buckets: racing writers of new keys into a dynamic-bucket table would conflict
    table = cl.Catalog(s3_warehouse, storage_options=s3.storage_options).create_table("db.t", SCHEMA, ["id"],
                                                                                      options={"bucket": "1"})
    table.write(pa.table({"id": [1], "v": ["first"]}))
    real = FileIO.create_if_absent
    raced: list[bool] = []

    def rival_first(self: FileIO, path: str, data: bytes) -> bool:
        # The first time the loser goes for snapshot-2, a rival lands snapshot-2 just before.
        if path.endswith("/snapshot/snapshot-2") and not raced:
            raced.append(True)
            assert cl.open_table(table.location, s3.storage_options).write(
                pa.table({"id": [2], "v": ["rival"]})) is not None
            created = real(self, path, data)
            raced.append(created)
            return created
        return real(self, path, data)

    monkeypatch.setattr(FileIO, "create_if_absent", rival_first)
    landed = table.write(pa.table({"id": [3], "v": ["loser"]}))
    assert raced == [True, False]  # the conditional put failed: S3 answered 412
    assert landed is not None and landed.id == 3
    assert _rows(table.scan().to_arrow()) == [{"id": 1, "v": "first"}, {"id": 2, "v": "rival"},
                                              {"id": 3, "v": "loser"}]


def test_a_conditional_put_on_s3_fails_on_another_object_not_on_its_own(s3: S3Endpoint, s3_warehouse: str) -> None:
    file_io, root = FileIO.for_url(s3_warehouse, s3.storage_options)
    path = f"{root}/t/snapshot/snapshot-1"
    assert file_io.create_if_absent(path, b"mine")
    assert file_io.create_if_absent(path, b"mine")  # a client retry of a put that landed
    assert not file_io.create_if_absent(path, b"theirs")
    assert file_io.read_bytes(path) == b"mine"


class ThreadLock:
    """A commit lock for the threads of one process: one mutex per table directory (a lock
    for writers in several processes would hold a DynamoDB or ZooKeeper client)."""

    def __init__(self) -> None:
        self.locks: dict[str, threading.Lock] = {}
        self.acquired: list[str] = []
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, table_root: str) -> Iterator[None]:
        with self._guard:
            lock = self.locks.setdefault(table_root, threading.Lock())
        with lock:
            self.acquired.append(table_root)
            yield


def test_a_store_without_conditional_writes_refuses_to_commit_without_a_lock(tmp_path: Path) -> None:
    # fsspec's "dir" filesystem (a prefix over another one) offers no create-if-absent.
    options = {"path": str(tmp_path), "target_protocol": "file"}
    with pytest.raises(cl.errors.UnsafeStorageError, match="configure a commit lock") as refused:
        cl.Catalog("dir://warehouse", storage_options=options).create_table("db.t", SCHEMA, ["id"])
    assert refused.value.file == "warehouse/db.db/t/schema/schema-0"

    lock = ThreadLock()
    table = cl.Catalog("dir://warehouse", storage_options=options, lock=lock).create_table("db.t", SCHEMA, ["id"])
    table.write(pa.table({"id": [1], "v": ["a"]}))
    with pytest.raises(cl.errors.UnsafeStorageError):
        cl.open_table("dir://warehouse/db.db/t", options).write(pa.table({"id": [2], "v": ["b"]}))
    assert [s.id for s in table.snapshots()] == [1]
    assert set(lock.acquired) == {"warehouse/db.db/t"}


def test_a_locked_store_without_conditional_writes_loses_no_concurrent_commit(
    s3: S3Endpoint, s3_warehouse: str
) -> None:
    # "dir" over S3: puts are atomic for readers, but nothing says create-if-absent.
    target = {**s3.storage_options, "use_listings_cache": False}
    options = {"path": s3_warehouse, "target_protocol": "s3", "target_options": target}
    lock = ThreadLock()
    catalog = cl.Catalog("dir://warehouse", storage_options=options, lock=lock)
    # fixed buckets: racing writers of new keys into a dynamic-bucket table would conflict
    table = catalog.create_table("db.t", SCHEMA, ["id"], options={"bucket": "1"})
    start = threading.Barrier(3)

    def commit_many(w: int) -> None:
        start.wait()
        with table.writer(commit_user=f"writer-{w}") as writer:
            for c in range(4):
                writer.write(pa.table({"id": [w * 10 + c], "v": ["x"]}))
                writer.commit(c)

    threads = [threading.Thread(target=commit_many, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snapshots = table.snapshots()
    assert [s.id for s in snapshots] == list(range(1, len(snapshots) + 1))
    assert sum(s.commit_kind is cl.CommitKind.APPEND for s in snapshots) == 12
    assert table.scan().to_arrow().num_rows == 12


def test_memory_urls_commit_atomically_in_process() -> None:
    url = f"memory://changelake-{threading.get_ident()}"
    table = cl.Catalog(url).create_table("db.t", SCHEMA, ["id"])
    table.write(pa.table({"id": [1], "v": ["a"]}))
    assert cl.open_table(f"{url}/db.db/t").scan().to_arrow().to_pylist() == [{"id": 1, "v": "a"}]
    assert fsspec.filesystem("memory").exists(f"/changelake-{threading.get_ident()}/db.db/t/snapshot/snapshot-1")
