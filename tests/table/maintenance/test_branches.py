"""Branches (``branch/branch-<name>``, made by Paimon) share the table's manifests and data
files: rollback, expiry, tag deletion and orphan cleanup of the table keep everything a branch's
snapshots and tags name. (tests/integration/test_pypaimon_after_maintenance.py has pypaimon
make, write and read the branch.)"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.read import live_files

FAR_FUTURE = 2**62  # an ``older_than_ms`` every snapshot is older than


def _table(tmp_path: Path) -> cl.Table:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"],
                                                   options={"bucket": "1", "num-sorted-run.compaction-trigger": "50"})
    for value in (1, 2):
        _write(table, value)
    return table


def _write(table: cl.Table, value: int) -> None:
    table.write(pa.table({"k": pa.array([0, 1, 2], pa.int64()), "v": pa.array([value] * 3, pa.int64())}))


def _branch_from_tag(table: cl.Table, branch: str, tag: str) -> Path:
    """What Paimon's ``FileSystemBranchManager.createBranch(branch, tag)`` does: the tag file,
    the tagged snapshot's file and the schemas up to its schema are copied under
    ``branch/branch-<name>/``; the branch's manifests and data files are the table's."""
    root = Path(table.location)
    home = root / "branch" / f"branch-{branch}"
    tagged = table.tag(tag)
    for directory in ("tag", "snapshot", "schema"):
        (home / directory).mkdir(parents=True)
    shutil.copyfile(root / "tag" / f"tag-{tag}", home / "tag" / f"tag-{tag}")
    shutil.copyfile(root / "snapshot" / f"snapshot-{tagged.id}", home / "snapshot" / f"snapshot-{tagged.id}")
    for schema_id in range(tagged.schema_id + 1):
        shutil.copyfile(root / "schema" / f"schema-{schema_id}", home / "schema" / f"schema-{schema_id}")
    return home


def _rollback(table: cl.Table) -> None:
    table.rollback_to(snapshot_id=1)  # drops snapshot 2 and its tag


def _expire(table: cl.Table) -> None:
    table.delete_tag("t2")
    _write(table, 3)
    table.compact(full=True)  # snapshot 2's files are compacted away
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)


def _release_tag(table: cl.Table) -> None:
    _write(table, 3)
    table.compact(full=True)
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)  # the tag holds snapshot 2's files
    table.delete_tag("t2")  # and lets them go


@pytest.mark.parametrize("maintain", [_rollback, _expire, _release_tag])
def test_maintenance_of_the_table_keeps_what_a_branch_names(tmp_path: Path, maintain: Callable[[cl.Table], None]
                                                            ) -> None:
    table = _table(tmp_path)
    table.create_tag("t2", 2)
    expected = table.scan(tag="t2").to_arrow()
    home = _branch_from_tag(table, "b", "t2")
    stray = home / "snapshot" / f".snapshot-3.{'a' * 32}.tmp"  # what a crashed branch commit leaves
    stray.write_text("{}")

    maintain(table)
    removed = table.remove_orphan_files(older_than=dt.timedelta(0))

    # The branch's snapshot and tag still read whole (read as a fresh process would, through a
    # tag of the table holding the same snapshot JSON).
    live_files.MANIFEST_CACHE.clear()
    check = Path(table.location) / "tag" / "tag-branch-check"
    for source in (home / "snapshot" / "snapshot-2", home / "tag" / "tag-t2"):
        shutil.copyfile(source, check)
        assert table.scan(tag="branch-check").to_arrow().equals(expected), source
        check.unlink()
    assert table.scan().to_arrow().num_rows == 3
    assert removed == [str(stray)]  # the branch's snapshot directory is swept as Paimon's OrphanFilesClean does


@pytest.mark.parametrize("maintain", [_rollback, _expire, _release_tag])
def test_maintenance_of_the_table_keeps_what_a_changelake_branch_names(
        tmp_path: Path, maintain: Callable[[cl.Table], None]) -> None:
    """A branch changelake made from a snapshot (no tag holds its files in the table) and wrote
    on stays whole through the table's rollback, expiry and orphan cleanup."""
    table = _table(tmp_path)
    table.create_tag("t2", 2)
    branch = table.create_branch("b", from_snapshot=2)
    _write(branch, 7)
    branch.compact(full=True)
    expected = {s.id: branch.scan(snapshot_id=s.id).to_arrow() for s in branch.snapshots()}

    maintain(table)
    table.remove_orphan_files(older_than=dt.timedelta(0))

    live_files.MANIFEST_CACHE.clear()
    assert {s.id: table.branch("b").scan(snapshot_id=s.id).to_arrow() for s in branch.snapshots()} == expected
    assert table.scan().to_arrow().num_rows == 3
    # and the other way round: the branch's expiry keeps what the table names
    main = {s.id: table.scan(snapshot_id=s.id).to_arrow() for s in table.snapshots()}
    assert table.branch("b").expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE).snapshots
    live_files.MANIFEST_CACHE.clear()
    assert {s.id: table.scan(snapshot_id=s.id).to_arrow() for s in table.snapshots()} == main


def test_orphan_cleanup_removes_what_a_crashed_branch_creation_staged(tmp_path: Path) -> None:
    """A creation killed before its rename leaves ``branch/.branch-<name>.<uuid>.tmp`` (no engine
    lists it): orphan cleanup removes it once past the cut-off, and not a newer one (a creation
    that may still be running)."""
    table = _table(tmp_path)
    table.create_branch("done", from_snapshot=1)
    branches = Path(table.location) / "branch"
    old, fresh = branches / f".branch-old.{'a' * 32}.tmp", branches / f".branch-new.{'b' * 32}.tmp"
    for staged in (old, fresh):
        shutil.copytree(branches / "branch-done", staged)
    past = (dt.datetime.now() - dt.timedelta(days=2)).timestamp()
    for path in old.rglob("*"):
        os.utime(path, (past, past))

    assert table.remove_orphan_files(dry_run=True) == sorted(str(p) for p in old.rglob("*") if p.is_file())
    table.remove_orphan_files()
    assert not old.exists() and fresh.exists() and (branches / "branch-done").exists()
    assert table.list_branches() == ["done"]
    assert table.branch("done").scan().to_arrow().num_rows == 3
