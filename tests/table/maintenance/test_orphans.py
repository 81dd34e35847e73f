"""Orphan-file cleanup: what a crashed writer leaves goes, nothing referenced does, and nothing
newer than the threshold."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa

import changelake as cl
from changelake.changelog import producers
from changelake.table.read import live_files
from changelake.table.write.writer import TableWrite


def _table(tmp_path: Path) -> cl.Table:
    schema = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                        pa.field("v", pa.string())])
    return cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["p", "k"], partition_keys=["p"],
                                                  options={"bucket": "2"})


def _rows(start: int) -> pa.Table:
    return pa.table({"p": ["a", "b"] * 5, "k": list(range(start, start + 10)), "v": [f"v{start}"] * 10})


def _age(paths: list[str], days: int) -> None:
    old = (dt.datetime.now() - dt.timedelta(days=days)).timestamp()
    for path in paths:
        os.utime(path, (old, old))


def _all_files(root: str) -> set[str]:
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names}


def test_a_crashed_writers_files_go_and_referenced_ones_stay(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows(0))
    table.write(_rows(5))
    table.compact(full=True)
    table.create_tag("t1", 2)
    before = _all_files(table.location)
    # A writer that wrote data files and died before committing.
    writer = TableWrite(table.context, "crashed", changelog=producers.for_table(table.context))
    writer.write(_rows(100))
    assert writer.prepare()  # data files on disk, never committed, never cleaned up
    stray_manifest = f"{table.location}/manifest/manifest-dead-0"
    Path(stray_manifest).write_bytes(b"x")
    Path(f"{table.location}/snapshot/LATEST.{'a' * 32}.tmp").write_text("9")
    leftovers = _all_files(table.location) - before
    assert len(leftovers) >= 3
    expected = table.scan().to_arrow().sort_by("k")

    assert table.remove_orphan_files(dry_run=True) == []  # all of them are new
    _age(sorted(_all_files(table.location)), days=2)
    fresh = f"{table.location}/manifest/manifest-fresh-0"
    Path(fresh).write_bytes(b"x")
    listed = table.remove_orphan_files(dry_run=True)
    assert set(listed) == leftovers
    assert _all_files(table.location) >= leftovers  # a dry run deletes nothing
    assert table.remove_orphan_files() == listed
    assert not leftovers & _all_files(table.location)
    assert os.path.exists(fresh)  # newer than the threshold
    assert table.remove_orphan_files(older_than=dt.timedelta(0)) == [fresh]

    assert table.scan().to_arrow().sort_by("k").equals(expected)
    for snap in [*table.snapshots(), table.tag("t1")]:
        assert table.scan(snapshot_id=snap.id).to_arrow().num_rows > 0
    entries = live_files.live_entries(table.context, table.tag("t1"))
    assert all(os.path.exists(f"{table.context.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}")
               for e in entries)


def test_a_time_threshold(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows(0))
    stray = Path(table.location) / "p=a" / "bucket-0" / "data-stray.parquet"
    stray.write_bytes(b"x")
    _age([str(stray)], days=3)
    assert table.remove_orphan_files(older_than=dt.datetime.now() - dt.timedelta(days=4), dry_run=True) == []
    assert table.remove_orphan_files(older_than=dt.datetime.now() - dt.timedelta(days=2)) == [str(stray)]


def test_a_tag_of_an_expired_snapshot_keeps_its_data_not_its_changelog(tmp_path: Path) -> None:
    """Expiry deletes an expired tagged snapshot's changelog (a tag holds data files only, as in
    Paimon): orphan cleanup and rollback then pass over the tag's missing changelog list."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = cl.Catalog(str(tmp_path)).create_table("db.c", schema, primary_keys=["k"],
                                                   options={"bucket": "1", "changelog-producer": "input"})
    table.write(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    table.create_tag("t1", 1)
    for i in range(3):
        table.write(pa.table({"k": [i + 10], "v": ["c"]}))
    table.expire_snapshots(retain_min=1, retain_max=1)
    changelog_list = table.tag("t1").changelog_manifest_list
    assert changelog_list is not None and not os.path.exists(table.context.paths.manifest(changelog_list))
    _age(sorted(_all_files(table.location)), days=2)
    live_files.MANIFEST_CACHE.clear()  # as a fresh process finds it
    assert table.remove_orphan_files(dry_run=True) == []
    table.rollback_to(tag="t1")
    assert table.scan().to_arrow().sort_by("k").to_pylist() == [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]
