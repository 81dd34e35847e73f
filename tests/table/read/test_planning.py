"""Split planning, manifest compaction and compaction conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.changelog import producers
from changelake.errors import CommitConflictError
from changelake.table.commit import committer as commit
from changelake.table.lsm import compactor as compaction
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"],
                                                  options={"bucket": "1", **options})


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"v{i}" for i in range(lo, hi)]})


def test_overlapping_files_share_a_split_and_disjoint_ones_are_packed(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true", "source.split.target-size": "1 b",
                                "source.split.open-file-cost": "1 b"})
    table.write(_rows(0, 10))
    table.write(_rows(5, 15))  # overlaps the first
    table.write(_rows(100, 110))  # a section of its own
    splits = table.scan().plan()
    assert sorted(len(s.files) for s in splits) == [1, 2]
    lone = next(s for s in splits if len(s.files) == 1)
    assert lone.raw_convertible  # one file without deletes: read as is
    assert not next(s for s in splits if len(s.files) == 2).raw_convertible
    assert table.scan().to_arrow().num_rows == 25


def test_small_sections_are_packed_into_one_split(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true"})
    for lo in range(0, 50, 10):
        table.write(_rows(lo, lo + 10))
    splits = table.scan().plan()
    assert len(splits) == 1 and len(splits[0].files) == 5


def test_compacted_bucket_is_raw_convertible(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true"})
    table.write(_rows(0, 10))
    table.write(pa.table({"id": pa.array([3], pa.int64()), "v": [None], "rowkind": ["-D"]}))
    assert not any(s.raw_convertible for s in table.scan().plan())
    table.compact(full=True)
    splits = table.scan().plan()
    assert all(s.raw_convertible for s in splits)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_manifests_stay_few_after_many_commits(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true", "manifest.merge-min-count": "5"})
    for i in range(40):
        table.write(_rows(i, i + 1))
    snap = table.latest_snapshot()
    assert snap is not None
    assert len(live_files.data_manifests(table.context, snap)) <= 6
    assert table.scan().to_arrow().num_rows == 40
    for old in (1, 10, 25):
        assert table.scan(snapshot_id=old).to_arrow().num_rows == old


def test_full_manifest_compaction_keeps_only_live_files(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"manifest.full-compaction-threshold-size": "1 b",
                                "num-sorted-run.compaction-trigger": "2"})
    for i in range(12):
        table.write(_rows(i * 3, i * 3 + 5))
    snap = table.latest_snapshot()
    assert snap is not None
    base = live_files.manifest_list(table.context, snap.base_manifest_list)
    entries = [e for m in base for e in live_files.manifest_entries(table.context, m.file_name)]
    assert all(e.kind == 0 for e in entries)  # only ADDs of live files remain
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(38))


def test_compaction_of_files_removed_meanwhile_fails_cleanly(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true"})
    table.write(_rows(0, 10))
    table.write(_rows(5, 15))
    first = compaction.compact_table(table.context, full=True, partitions=None,
                                     changelog=producers.for_table(table.context))
    second = compaction.compact_table(table.context, full=True, partitions=None,
                                     changelog=producers.for_table(table.context))
    commit.commit(table.context, first, "a", 2**63 - 1)
    doomed = [f"{m.bucket_dir(table.context)}/{f.file_name}" for m in second for f in m.compact_after]
    assert doomed and all(table.context.file_io.exists(p) for p in doomed)
    with pytest.raises(CommitConflictError, match=r"db\.t"):
        commit.commit(table.context, second, "b", 2**63 - 1)
    assert not any(table.context.file_io.exists(p) for p in doomed)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(15))


def test_compact_selected_partitions_only(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False)])
    table = cl.Catalog(str(tmp_path)).create_table("db.p", schema, primary_keys=["dt", "id"], partition_keys=["dt"],
                                                   options={"bucket": "1", "write-only": "true"})
    for _ in range(2):
        table.write(pa.table({"dt": ["a", "b"], "id": pa.array([1, 2], pa.int64())}))
    table.compact(full=True, partitions=[{"dt": "a"}])
    levels = {table.context.partition_values(e.partition)[0]: e.file.level
              for e in live_files.live_entries(table.context, table.latest_snapshot())}
    assert levels["a"] == 5 and levels["b"] == 0


def _read(table: cl.Table, **scan: Any) -> dict[int, str]:
    return {r["id"]: r["v"] for r in table.scan(**scan).to_arrow().to_pylist()}


def _level0(table: cl.Table, snapshot_id: int) -> bool:
    return any(e.file.level == 0 for e in live_files.live_entries(table.context, table.snapshot(snapshot_id)))


@pytest.mark.parametrize("options", [{}, {"lookup-compact": "gentle"}, {"lookup-wait": "false"}],
                         ids=["radical", "gentle", "lookup-wait-off"])
def test_first_row_batch_scans_skip_level0(tmp_path: Path, options: dict[str, str]) -> None:
    """As Paimon's batch scans of first-row tables (``batchScanSkipLevel0``): rows still at level
    0 are not read, not at an APPEND snapshot a time travel reads, nor in the latest snapshot
    while ``lookup-compact=gentle`` or ``lookup-wait=false`` leaves them there; change streams
    still read them."""
    table = _table(tmp_path, **{"merge-engine": "first-row", **options})
    with table.writer(commit_user="job") as writer:
        writer.write(pa.table({"id": [1, 2], "v": ["a", "a"]}))
        first = writer.commit(0)
        writer.write(pa.table({"id": [2, 3], "v": ["b", "b"]}))
        second = writer.commit(1)
    append = second[0]
    assert append.commit_kind == cl.CommitKind.APPEND and _level0(table, append.id)
    older = first[-1].id if not _level0(table, first[-1].id) else None
    seen = _read(table, snapshot_id=older) if older is not None else {}
    assert _read(table, snapshot_id=append.id) == seen  # the APPEND's rows are at level 0
    latest = table.latest_snapshot()
    assert latest is not None
    if _level0(table, latest.id):  # gentle, or the compaction still in the background
        assert 3 not in _read(table)
    table.compact()
    assert _read(table) == {1: "a", 2: "a", 3: "b"}
    # a change stream's full read of the APPEND snapshot takes level 0 (the snapshots after it
    # follow from there)
    full = [b.data for b in table.stream(mode="from-snapshot-full", snapshot_id=append.id)
            if b.kind is cl.ChangeKind.FULL]
    assert {(r["id"], r["v"]) for t in full for r in t.to_pylist()} == {(1, "a"), (2, "a"), (3, "b")}
