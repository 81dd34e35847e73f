"""Branches through the public API: create (empty, from a tag, from a snapshot), read and write
within a branch, delete, list, fast-forward, ``db.t$branch_x``, and bad names or starts."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake import errors

FAR_FUTURE = 2**62


def _table(tmp_path: Path, **options: str) -> cl.Table:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
    return cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"],
                                                  options={"bucket": "1", **options})


def _rows(table: cl.Table, **scan: object) -> dict[int, str]:
    data = table.scan(**scan).to_arrow().to_pydict()  # type: ignore[arg-type]
    return dict(zip(data["k"], data["v"], strict=True))


def _write(table: cl.Table, rows: dict[int, str]) -> cl.Snapshot | None:
    return table.write(pa.table({"k": pa.array(list(rows), pa.int64()), "v": list(rows.values())}))


def test_a_branch_from_a_tag_reads_and_writes_apart_from_the_table(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, {1: "a", 2: "a"})
    table.create_tag("t1")
    _write(table, {2: "main", 3: "main"})

    branch = table.create_branch("dev", from_tag="t1")
    assert branch.name == "db.t$branch_dev" and branch.branch_name == "dev" and table.branch_name == "main"
    assert table.list_branches() == ["dev"]
    assert _rows(branch) == {1: "a", 2: "a"}
    assert list(branch.tags()) == ["t1"] and [s.id for s in branch.snapshots()] == [1]

    landed = _write(branch, {1: "dev", 4: "dev"})
    assert landed is not None and landed.id == 2  # the branch's own snapshot 2, not the table's
    branch.update("k = 4", set={"v": "dev2"})
    branch.delete(pc.field("k") == 2)
    branch.create_tag("b3")
    assert _rows(branch) == {1: "dev", 4: "dev2"}
    assert _rows(branch, tag="t1") == {1: "a", 2: "a"}
    assert _rows(table) == {1: "a", 2: "main", 3: "main"}  # the table did not move
    assert list(table.tags()) == ["t1"]
    stream = table.branch("dev").stream(mode="from-snapshot", snapshot_id=2)
    changes = pa.concat_tables(b.data for b in stream)
    assert changes.to_pydict() == {"rowkind": ["+I", "+I", "+U", "-D"], "k": [1, 4, 4, 2],
                                   "v": ["dev", "dev", "dev2", "a"]}
    with pytest.raises(errors.OffsetError):  # a position in the table's history is none in the branch's
        list(branch.stream(offset=table.stream(mode="latest").offset))

    # The catalog opens it by Paimon's name; the schema evolves within the branch only.
    same = cl.Catalog(str(tmp_path)).get_table("db.t$branch_dev")
    assert _rows(same) == _rows(branch) == _rows(cl.open_table(f"{table.location}$branch_dev"))
    with same.update_schema() as update:
        update.add_column("extra", pa.int32())
    assert same.schema.names == ["k", "v", "extra"] and cl.Catalog(str(tmp_path)).get_table("db.t").schema.names == [
        "k", "v"]
    assert table.branch("main") is not table and _rows(table.branch("main")) == _rows(table)

    # Compaction and expiry of the branch keep what the table names, and the other way round.
    branch.compact(full=True)
    branch.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    table.compact(full=True)
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    assert table.remove_orphan_files(older_than=dt.timedelta(0)) == []
    stray = Path(table.location) / "snapshot" / f".snapshot-9.{'a' * 32}.tmp"  # a crashed commit's, in the table
    stray.write_text("{}")
    os.utime(stray, (1_000_000_000, 1_000_000_000))  # from long ago
    assert branch.remove_orphan_files(older_than=dt.timedelta(0)) == [str(stray)]  # the whole table's cleanup
    assert _rows(table) == {1: "a", 2: "main", 3: "main"}
    assert _rows(table.branch("dev")) == {1: "dev", 4: "dev2"}
    assert _rows(table.branch("dev"), tag="t1") == _rows(table, tag="t1") == {1: "a", 2: "a"}


def test_an_empty_branch_and_one_from_a_snapshot(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, {1: "a"})
    _write(table, {2: "b"})
    empty = table.create_branch("empty")
    assert empty.latest_snapshot() is None and empty.scan().to_arrow().num_rows == 0
    _write(empty, {9: "e"})
    assert _rows(empty) == {9: "e"} and [s.id for s in empty.snapshots()] == [1]
    source = pa.table({"k": pa.array([9, 10], pa.int64()), "v": ["m", "m"]})
    empty.merge(source).when_matched_update().when_not_matched_insert().execute()
    assert _rows(empty) == {9: "m", 10: "m"}
    empty.overwrite(pa.table({"k": pa.array([11], pa.int64()), "v": ["o"]}))
    assert _rows(empty) == {11: "o"} and [s.id for s in empty.snapshots()] == [1, 2, 3]
    assert _rows(table) == {1: "a", 2: "b"}

    first = table.create_branch("first", from_snapshot=1)
    assert _rows(first) == {1: "a"} and first.tags() == {}
    assert first.rescale(bucket=2) is not None  # the branch's schema and files only
    assert (first.options["bucket"], table.options["bucket"]) == ("2", "1") and _rows(first) == {1: "a"}
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)  # the branch keeps snapshot 1's files
    assert table.remove_orphan_files(older_than=dt.timedelta(0)) == []
    assert _rows(first) == {1: "a"}
    assert table.list_branches() == ["empty", "first"]
    branches = table.system("branches")
    assert branches.column("branch_name").to_pylist() == ["empty", "first"]
    assert branches.schema.field("create_time").type == pa.timestamp("ms")
    assert branches.column("create_time").null_count == 0

    table.delete_branch("first")
    assert table.list_branches() == ["empty"]
    assert not (Path(table.location) / "branch" / "branch-first").exists()
    with pytest.raises(errors.BranchNotFoundError, match="'first'"):
        table.branch("first")


@pytest.mark.parametrize(("name", "error"), [
    ("main", errors.InvalidBranchNameError),
    ("  ", errors.InvalidBranchNameError),
    ("123", errors.InvalidBranchNameError),
    ("a/b", errors.InvalidBranchNameError),
    ("dev", errors.BranchAlreadyExistsError),
])  # fmt: skip
def test_bad_branch_names_change_nothing(tmp_path: Path, name: str, error: type[Exception]) -> None:
    table = _table(tmp_path)
    _write(table, {1: "a"})
    table.create_branch("dev")
    before = sorted(str(p) for p in Path(table.location).rglob("*"))
    with pytest.raises(error, match=f"db.t: .*{name!r}"):
        table.create_branch(name)
    assert sorted(str(p) for p in Path(table.location).rglob("*")) == before


def test_missing_branches_tags_and_snapshots_are_clear_errors(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, {1: "a"})
    before = sorted(str(p) for p in Path(table.location).rglob("*"))
    with pytest.raises(errors.TagNotFoundError, match="'nope'"):
        table.create_branch("b", from_tag="nope")
    with pytest.raises(errors.SnapshotNotFoundError, match="snapshot 7"):
        table.create_branch("b", from_snapshot=7)
    with pytest.raises(errors.BranchNotFoundError, match=r"db\.t: has no branch 'b'"):
        table.delete_branch("b")
    with pytest.raises(errors.BranchNotFoundError, match="'b'"):
        table.fast_forward("b")
    with pytest.raises(errors.BranchNotFoundError, match="'b'"):
        cl.Catalog(str(tmp_path)).get_table("db.t$branch_b")
    with pytest.raises(errors.InvalidBranchNameError, match="'main'"):
        table.delete_branch("main")
    assert sorted(str(p) for p in Path(table.location).rglob("*")) == before
    table.create_branch("b")
    with pytest.raises(errors.SnapshotNotFoundError, match="branch 'b' has no snapshot"):
        table.fast_forward("b")


def test_fast_forward_makes_the_table_what_the_branch_is(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, {1: "a"})
    table.create_tag("t1")
    _write(table, {2: "main"})
    table.create_tag("t2")  # a tag of the line fast-forward replaces: it goes
    branch = table.create_branch("dev", from_tag="t1")
    with branch.update_schema() as update:
        update.add_column("extra", pa.int32())
    branch.write(pa.table({"k": pa.array([5], pa.int64()), "v": ["dev"], "extra": pa.array([7], pa.int32())}))
    _write(branch, {6: "dev"})
    branch.create_tag("b3")

    table.fast_forward("dev")
    assert table.schema.names == ["k", "v", "extra"]
    assert table.scan().to_arrow().to_pydict() == {"k": [1, 5, 6], "v": ["a", "dev", "dev"], "extra": [None, 7, None]}
    assert [s.id for s in table.snapshots()] == [1, 2, 3] and sorted(table.tags()) == ["b3", "t1"]
    latest = Path(table.location) / "snapshot" / "LATEST"
    assert latest.read_text() == "3"
    _write(table, {7: "after"})  # writes go on from the branch's history
    assert _rows(cl.Catalog(str(tmp_path)).get_table("db.t")) == {1: "a", 5: "dev", 6: "dev", 7: "after"}
    assert _rows(branch) == {1: "a", 5: "dev", 6: "dev"}
    # The files only the replaced snapshot 2 named are orphans now, and only they.
    orphans = table.remove_orphan_files(older_than=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5), dry_run=True)
    assert orphans and all(os.path.basename(p).startswith(("data-", "manifest")) for p in orphans)
    table.remove_orphan_files(older_than=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5))
    assert _rows(table) == {1: "a", 5: "dev", 6: "dev", 7: "after"} and _rows(branch) == {1: "a", 5: "dev", 6: "dev"}
    assert _rows(table, tag="t1") == {1: "a"}


def test_a_branch_fast_forwards_to_another_and_rolls_back_in_itself(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, {1: "a"})
    table.create_tag("t1")
    one = table.create_branch("one", from_tag="t1")
    two = table.create_branch("two", from_tag="t1")
    _write(one, {2: "one"})
    _write(two, {3: "two"})
    _write(two, {4: "two"})
    one.fast_forward("two")
    assert _rows(one) == {1: "a", 3: "two", 4: "two"} and [s.id for s in one.snapshots()] == [1, 2, 3]
    assert _rows(table) == {1: "a"}
    one.rollback_to(snapshot_id=2)
    assert _rows(one) == {1: "a", 3: "two"} and _rows(two) == {1: "a", 3: "two", 4: "two"}
    with pytest.raises(errors.InvalidBranchNameError, match="itself"):
        one.fast_forward("one")
    # What a creation killed before its rename leaves is no branch, and is in nobody's way.
    staging = Path(table.location) / "branch" / f".branch-three.{'0' * 32}.tmp" / "schema"
    staging.mkdir(parents=True)
    (staging / "schema-0").write_text((Path(table.location) / "schema" / "schema-0").read_text())
    assert table.list_branches() == ["one", "two"]
    assert _rows(table.create_branch("three", from_snapshot=1)) == {1: "a"}


def test_a_branch_whose_start_the_table_rolled_back_past_and_rewrote_is_not_fast_forwarded_to(tmp_path: Path) -> None:
    """The table's snapshots kept below the branch's start would not be the branch's history:
    joined, expiry deleted files the branch's snapshots read (and a kept snapshot's newer schema
    was lost). Refused, changing nothing; rolled back before it, the table fast-forwards."""
    table = _table(tmp_path)
    for i in range(1, 4):
        _write(table, {i: "main"})
    branch = table.create_branch("b", from_snapshot=3)
    _write(branch, {4: "b"})
    table.rollback_to(snapshot_id=1)
    _write(table, {2: "rewritten"})
    before = [s.id for s in table.snapshots()]
    with pytest.raises(errors.CommitConflictError, match="committed after branch 'b'"):
        table.fast_forward("b")
    assert [s.id for s in table.snapshots()] == before and _rows(table) == {1: "main", 2: "rewritten"}
    table.rollback_to(snapshot_id=1)
    table.fast_forward("b")
    table.expire_snapshots(retain_max=1, retain_min=1)
    assert _rows(table) == {1: "main", 2: "main", 3: "main", 4: "b"}
