"""Snapshot expiry: the retention rules at their boundaries, what is deleted (exactly the files
no retained snapshot or tag needs), tags and consumers holding files and snapshots back, change
streams across expiry, and expiry run by writers after their commits."""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.format import manifest
from changelake.table.io.fileio import FileIO
from stream_follow import fold_until_done

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
FAR_FUTURE = 2**62  # an ``older_than_ms`` every snapshot is older than


def _table(tmp_path: Path, options: dict[str, str] | None = None) -> cl.Table:
    # no compaction: one APPEND snapshot per write, so snapshot ids count the writes
    return cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "1", "num-sorted-run.compaction-trigger": "50", **(options or {})})


def _write(table: cl.Table, value: int, keys: range = range(3)) -> None:
    table.write(pa.table({"k": pa.array(list(keys), pa.int64()), "v": pa.array([value] * len(keys), pa.int64())}))


def _rows(table: cl.Table, **at: object) -> list[dict[str, object]]:
    return sorted(table.scan(**at).to_arrow().to_pylist(), key=lambda r: str(r["k"]))  # type: ignore[arg-type]


def _files(table: cl.Table) -> tuple[set[str], set[str]]:
    """Files the snapshots and tags need, read past any cache (their manifests, live data files
    and changelog files), and the files present (data, changelog, manifests)."""
    ctx = table.context
    needed: set[str] = set()

    def entries(name: str) -> list[manifest.ManifestEntry]:
        needed.add(ctx.paths.manifest(name))
        metas = manifest.read_manifest_list(ctx.file_io, ctx.paths.manifest(name))
        needed.update(ctx.paths.manifest(m.file_name) for m in metas)
        return [e for m in metas for e in manifest.read_entries(ctx.file_io, ctx.paths.manifest(m.file_name))]

    kept = [cl.Snapshot.model_validate_json(p.read_text())
            for p in (Path(table.location) / "changelog").glob("changelog-*")]
    for snap in [*table.snapshots(), *table.tags().values()]:
        live = manifest.merge_entries([*entries(snap.base_manifest_list), *entries(snap.delta_manifest_list)])
        changelog = entries(snap.changelog_manifest_list) if snap.changelog_manifest_list else []
        needed.update(f"{ctx.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}"
                      for e in [*live.values(), *changelog])
    for c in kept:  # its changelog files; without a producer, its delta's files (ADD or DELETE)
        changes = entries(c.changelog_manifest_list) if c.changelog_manifest_list else []
        if Path(ctx.paths.manifest(c.delta_manifest_list)).exists():
            delta = entries(c.delta_manifest_list)
            # the files it added are the changes streams read; compacted files and files it
            # removed may have gone already (only appended ones wait for the changelog's expiry)
            changes += [e for e in delta if e.kind == manifest.FileKind.ADD and e.file.file_source == 0]
            needed.update(p for e in delta
                          if Path(p := f"{ctx.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}").exists())
            # the base list stays with it; older changelogs' expiry deleted the manifests they shared
            needed.add(ctx.paths.manifest(c.base_manifest_list))
            needed.update(p for m in manifest.read_manifest_list(ctx.file_io, ctx.paths.manifest(c.base_manifest_list))
                          if Path(p := ctx.paths.manifest(m.file_name)).exists())
        needed.update(f"{ctx.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}" for e in changes)
    present = {os.path.join(d, n) for d, _, names in os.walk(table.location) for n in names
               if n.endswith(".parquet") or os.path.basename(d) == "manifest"}
    return needed, present


def _assert_exact(table: cl.Table) -> None:
    """Nothing referenced is missing, nothing unreferenced is left."""
    referenced, present = _files(table)
    assert referenced - present == set(), "referenced files were deleted"
    assert present - referenced == set(), "files no snapshot or tag needs were left behind"


def _ids(table: cl.Table) -> list[int]:
    return [s.id for s in table.snapshots()]


def test_retain_min_keeps_the_newest_and_expires_the_rest(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for value in range(6):
        _write(table, value)
    assert table.expire_snapshots(retain_min=6, older_than_ms=FAR_FUTURE).snapshots == ()
    result = table.expire_snapshots(retain_min=3, older_than_ms=FAR_FUTURE)
    # uncompacted, every data file is still live: only metadata goes
    assert result.snapshots == (1, 2, 3) and result.data_files == 0 and result.manifests > 0
    assert _ids(table) == [4, 5, 6]
    assert (Path(table.location) / "snapshot" / "EARLIEST").read_text() == "4"
    assert _rows(table) == [{"k": k, "v": 5} for k in range(3)]
    assert _rows(table, snapshot_id=4) == [{"k": k, "v": 3} for k in range(3)]
    _assert_exact(table)
    with pytest.raises(cl.errors.SnapshotNotFoundError):
        table.scan(snapshot_id=3).to_arrow()
    # the latest is never expired, whatever the arguments
    assert table.expire_snapshots(retain_min=0, older_than_ms=FAR_FUTURE).snapshots == (4, 5)
    assert _ids(table) == [6]
    _assert_exact(table)


def test_time_retained_max_and_limit(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for value in range(8):
        _write(table, value)
    # time: snapshots committed before snapshot 3's time go
    assert table.expire_snapshots(retain_min=1, older_than_ms=table.snapshot(3).time_millis).snapshots == (1, 2)
    # limit: at most two per run
    assert table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE, max_deletes=2).snapshots == (3, 4)
    # max: snapshots beyond retain_max go even when young
    assert table.expire_snapshots(retain_min=1, retain_max=3, older_than_ms=0).snapshots == (5,)
    assert _ids(table) == [6, 7, 8]
    assert table.expire_snapshots(retain_min=1, retain_max=3, older_than_ms=0).snapshots == ()
    _assert_exact(table)


def test_writers_expire_after_commit_unless_write_only(tmp_path: Path) -> None:
    table = _table(tmp_path / "a", {"snapshot.num-retained.min": "2", "snapshot.num-retained.max": "3"})
    for value in range(7):
        _write(table, value)
    assert _ids(table) == [5, 6, 7]
    _assert_exact(table)
    with table.writer(commit_user="w") as writer:
        writer.write(pa.table({"k": pa.array([9], pa.int64()), "v": pa.array([9], pa.int64())}))
        writer.commit(1)
    assert _ids(table) == [6, 7, 8]
    assert table.compact(full=True) is not None
    assert _ids(table) == [7, 8, 9]
    _assert_exact(table)
    idle = _table(tmp_path / "b", {"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1",
                                   "write-only": "true"})
    for value in range(3):
        _write(idle, value)
    assert _ids(idle) == [1, 2, 3]


def test_tags_keep_their_files_until_deleted(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, 0)
    _write(table, 1)
    table.create_tag("t2")
    for value in range(2, 5):
        _write(table, value)
    table.compact(full=True)
    result = table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    assert result.snapshots == (1, 2, 3, 4, 5)
    assert _rows(table, tag="t2") == [{"k": k, "v": 1} for k in range(3)]
    _assert_exact(table)
    _, before = _files(table)
    table.delete_tag("t2")
    _assert_exact(table)
    _, after = _files(table)
    assert len(before - after) >= 2  # the tag's data file and manifests
    assert _rows(table) == [{"k": k, "v": 4} for k in range(3)]


def test_consumers_hold_snapshots_back_until_they_expire(tmp_path: Path) -> None:
    table = _table(tmp_path, {"consumer.expiration-time": "1 h"})
    for value in range(6):
        _write(table, value)
    stream = table.stream(mode="from-snapshot", snapshot_id=1, consumer_id="job")
    batches = iter(stream)
    assert next(batches).snapshot_id == 1
    stream.commit()
    consumer = Path(table.location) / "consumer" / "consumer-job"
    assert json.loads(consumer.read_text()) == {"nextSnapshot": 2}
    assert table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE).snapshots == (1,)
    resumed = table.stream(consumer_id="job")
    assert [b.snapshot_id for b in resumed] == [2, 3, 4, 5, 6]
    # the consumer stays at 2 (never committed again) and is fresh: nothing more goes
    assert table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE).snapshots == ()
    stale = time.time() - 2 * 3600
    os.utime(consumer, (stale, stale))
    result = table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    assert result.consumers == ("job",) and result.snapshots == (2, 3, 4, 5)
    assert not consumer.exists()
    _assert_exact(table)


def test_a_stream_behind_expiry_gets_a_clear_error(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for value in range(4):
        _write(table, value)
    stream = table.stream(mode="from-snapshot", snapshot_id=1)
    first = next(iter(stream))
    assert first.snapshot_id == 1
    table.expire_snapshots(retain_min=2, older_than_ms=FAR_FUTURE)
    with pytest.raises(cl.errors.SnapshotExpiredError, match="snapshot 2 has expired"):
        table.stream(offset=first.offset)
    with pytest.raises(cl.errors.SnapshotExpiredError, match="snapshot 2 has expired"):
        stream.source.plan(first.offset)
    with pytest.raises(cl.errors.SnapshotExpiredError):
        table.changes(1, 4).to_arrow()
    assert table.changes(2, 4).to_arrow().num_rows == 6


def test_changelog_outlives_its_snapshots_when_retained_longer(tmp_path: Path) -> None:
    table = _table(tmp_path, {"changelog-producer": "input", "snapshot.num-retained.min": "2",
                              "snapshot.num-retained.max": "2", "changelog.num-retained.max": "5"})
    for value in range(8):
        _write(table, value, range(value, value + 2))
    assert _ids(table) == [7, 8]
    kept = sorted(p.name for p in (Path(table.location) / "changelog").glob("changelog-*"))
    assert kept == ["changelog-4", "changelog-5", "changelog-6"]  # 5 ids retained in all
    _assert_exact(table)
    changes = table.stream(mode="from-snapshot", snapshot_id=4)
    assert [(b.snapshot_id, b.data.column("v").to_pylist()) for b in changes] == [
        (i, [i - 1, i - 1]) for i in range(4, 9)]
    assert table.changes(3, 8).to_arrow().num_rows == 10
    with pytest.raises(cl.errors.SnapshotExpiredError, match="snapshot 3 has expired"):
        table.stream(mode="from-snapshot", snapshot_id=3)
    # the changelogs expire once the snapshots pass them by more than changelog.num-retained.max
    _write(table, 8, range(8, 10))
    assert sorted(p.name for p in (Path(table.location) / "changelog").glob("changelog-*")) == [
        "changelog-5", "changelog-6", "changelog-7"]
    _assert_exact(table)


@pytest.mark.parametrize("trigger", ["50", "2"])
def test_without_producer_a_decoupled_changelog_keeps_the_appended_files(tmp_path: Path, trigger: str) -> None:
    """Paimon's decoupled changelog for ``changelog-producer=none``: expired snapshots keep their
    data manifests and appended files (also when compaction removed them: trigger 2), so
    streams read their writes; changelog expiry then deletes them."""
    table = _table(tmp_path, {"snapshot.num-retained.min": "2", "snapshot.num-retained.max": "2",
                              "changelog.num-retained.max": "6", "num-sorted-run.compaction-trigger": trigger})
    for value in range(8):
        _write(table, value, range(value, value + 2))
        _assert_exact(table)
    earliest = table.snapshots()[0].id
    kept = sorted(int(p.name.split("-")[1]) for p in (Path(table.location) / "changelog").glob("changelog-*"))
    assert kept and kept[-1] == earliest - 1 and kept == list(range(kept[0], earliest))
    writes = [(b.snapshot_id, b.data.column("v").to_pylist()) for b in table.stream(mode="from-snapshot",
                                                                                      snapshot_id=kept[0])]
    first_value = {v for _, vs in writes[:1] for v in vs}.pop()
    assert [vs for _, vs in writes] == [[v, v] for v in range(first_value, 8)]
    assert table.changes(kept[0] - 1, table.latest_snapshot().id).to_arrow().num_rows == 2 * (8 - first_value)
    with pytest.raises(cl.errors.SnapshotExpiredError):
        table.changes(kept[0] - 2, table.latest_snapshot().id).to_arrow()
    assert _rows(table) == [{"k": k, "v": max(v for v in range(8) if v <= k <= v + 1)} for k in range(9)]
    for value in range(8, 14):  # the changelogs move on and take their files with them
        _write(table, value, range(value, value + 2))
    _assert_exact(table)
    assert min(int(p.name.split("-")[1]) for p in (Path(table.location) / "changelog").glob("changelog-*")) > kept[-1]
    orphans = table.remove_orphan_files(older_than=datetime.timedelta(0), dry_run=True)
    assert list(orphans) == []


def test_without_decoupling_a_stream_behind_expiry_gets_an_error(tmp_path: Path) -> None:
    table = _table(tmp_path, {"changelog-producer": "input", "snapshot.num-retained.min": "2",
                              "snapshot.num-retained.max": "2"})
    for value in range(4):
        _write(table, value)
    assert not (Path(table.location) / "changelog").exists()
    with pytest.raises(cl.errors.SnapshotExpiredError):
        table.changes(1, 4).to_arrow()
    _assert_exact(table)


def test_ignore_progress_starts_a_consumer_by_scan_mode(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for value in range(3):
        _write(table, value)
    stream = table.stream(mode="from-snapshot", snapshot_id=1, consumer_id="job")
    next(iter(stream))
    stream.commit()
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    os.remove(Path(table.location) / "consumer" / "consumer-job")  # keep the file, but behind: rewrite it
    (Path(table.location) / "consumer" / "consumer-job").write_text('{"nextSnapshot": 1}')
    with pytest.raises(cl.errors.SnapshotExpiredError):
        table.stream(consumer_id="job")
    fresh = table.stream(consumer_id="job", options={"consumer.ignore-progress": "true"})
    assert fresh.offset.snapshot_id == 3 and fresh.offset.scan_snapshot


def test_latest_is_found_when_expiry_deletes_past_a_stale_hint_mid_walk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 8, on purpose: LATEST says 3 (a slow committer wrote it late), snapshot 3
    exists when checked, and expiry deletes 1..8 just before snapshot 4 is checked. The walk
    then stops on 3, which is gone by then: the latest is 10, not an expired id."""
    table = _table(tmp_path)
    for value in range(10):
        _write(table, value)
    (Path(table.location) / "snapshot" / "LATEST").write_text("3")
    other = cl.open_table(table.location)
    real = FileIO.exists
    raced: list[bool] = []

    def exists(self: FileIO, path: str) -> bool:
        if path.endswith("/snapshot/snapshot-4") and not raced:
            raced.append(True)
            expired = other.expire_snapshots(retain_min=2, retain_max=2, older_than_ms=FAR_FUTURE)
            assert expired.snapshots == tuple(range(1, 9))
        return real(self, path)

    monkeypatch.setattr(FileIO, "exists", exists)
    latest = table.latest_snapshot()
    assert raced and latest is not None and latest.id == 10
    assert _rows(table) == [{"k": k, "v": 9} for k in range(3)]
    assert [b.snapshot_id for b in table.stream(mode="latest-full")] == [10]


def test_expiry_under_two_writers_and_a_stream(tmp_path: Path) -> None:
    """Two writers commit 200 times with compaction while writers expire all but a few
    snapshots and a consumer streams the changes: the stream folds to the table, nothing a
    retained snapshot needs is deleted, and nothing only expired snapshots needed is left."""
    table = _table(tmp_path, {"snapshot.num-retained.min": "2", "snapshot.num-retained.max": "4",
                              "num-sorted-run.compaction-trigger": "2", "bucket": "2"})
    commits = 100
    stream = table.stream(mode="latest", consumer_id="follower")
    stream.commit()  # the consumer holds snapshot 1 onwards from now on
    errors: list[BaseException] = []

    def write(user: str, keys: range) -> None:
        try:
            with table.writer(commit_user=user) as writer:
                for identifier in range(1, commits + 1):
                    chosen = keys[identifier % 7::7]
                    writer.write(pa.table({"k": pa.array(list(chosen), pa.int64()),
                                           "v": pa.array([identifier] * len(chosen), pa.int64())}))
                    writer.commit(identifier)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(user, keys))
               for user, keys in (("a", range(0, 70)), ("b", range(100, 170)))]
    for thread in threads:
        thread.start()
    folded = fold_until_done(stream, threads)
    for thread in threads:
        thread.join()
    assert not errors, errors
    ids = _ids(table)
    # expiry kept up, but for what the consumer held when the writers' last expiry ran (it may
    # not have read their last commits yet): one more, past the consumer's last read, keeps 4
    assert ids[0] > 100
    table.expire_snapshots()
    ids = _ids(table)
    assert len(ids) <= 4
    assert folded == {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
    for snapshot_id in ids:
        assert table.scan(snapshot_id=snapshot_id).to_arrow().num_rows == 140
    referenced, present = _files(table)
    assert referenced - present == set(), "referenced files were deleted"
    # Two writers' expiries overlap; one that finds itself overtaken stops, and what it had
    # yet to delete is left as orphans, for orphan cleanup (as a crashed expiry leaves them).
    table.remove_orphan_files(older_than=datetime.timedelta(0))
    _assert_exact(table)
