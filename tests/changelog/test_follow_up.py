"""Follow-up reads with producer ``none``: APPEND snapshots' delta files as stored (row kinds
kept, no before-images), COMPACT and OVERWRITE snapshots skipped; batch change reads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.changelog import starting
from changelake.errors import ScanError, SnapshotExpiredError, SnapshotNotFoundError

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
                                                  options={"bucket": "2", "write-only": "true", **options})


def _rows(keys: list[tuple[str, int]], values: list[str | None], kinds: list[str] | None = None) -> pa.Table:
    data = {"p": [p for p, _ in keys], "k": pa.array([k for _, k in keys], pa.int64()), "v": values}
    return pa.table({**data, "rowkind": kinds} if kinds else data)


def _sorted(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(rows, key=lambda r: (str(r["p"]), int(r["k"]), str(r["rowkind"])))  # type: ignore[call-overload]


def _read(stream: cl.ChangeStream) -> list[cl.ChangeBatch]:
    return list(stream)


def test_none_returns_each_commits_delta_rows_with_their_kinds(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows([("a", 1), ("a", 2), ("b", 3), ("b", 4)], ["x1", "x2", "x3", "x4"]))
    changes = _rows([("a", 1), ("a", 2), ("b", 3), ("b", 5)], ["x1", "y2", "x3", "y5"], ["-U", "+U", "-D", "+I"])
    table.write(changes)
    batches = _read(table.stream(mode="from-snapshot", snapshot_id=2))
    assert {b.snapshot_id for b in batches} == {2} and {b.kind for b in batches} == {cl.ChangeKind.DELTA}
    got = pa.concat_tables([b.data for b in batches])
    assert got.schema.names == ["rowkind", "p", "k", "v"]
    columns = (["-U", "+U", "-D", "+I"], ["a", "a", "b", "b"], [1, 2, 3, 5], ["x1", "y2", "x3", "y5"])
    expected = [{"rowkind": kind, "p": p, "k": k, "v": v} for kind, p, k, v in zip(*columns, strict=True)]
    assert _sorted(got.to_pylist()) == _sorted(expected)


def test_compact_snapshots_are_skipped_and_positions_continue(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows([("a", 1)], ["v1"]))
    compacted = table.compact(full=True)
    assert compacted is not None and compacted.commit_kind is cl.CommitKind.COMPACT
    table.write(_rows([("a", 1)], ["v2"], ["+U"]))
    batches = _read(table.stream(mode="from-snapshot", snapshot_id=1))
    assert [(b.snapshot_id, b.data.column("rowkind").to_pylist()) for b in batches] == [(1, ["+I"]), (3, ["+U"])]
    assert batches[-1].offset.snapshot_id == 4 and batches[-1].offset.index == 0


def test_writes_that_compact_before_returning_stream_once(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["p", "k"],
                                                   options={"num-sorted-run.compaction-trigger": "2"})
    for i in range(6):
        table.write(_rows([("a", j) for j in range(i, i + 3)], [f"v{i}"] * 3))
    kinds = {s.commit_kind for s in table.snapshots()}
    assert cl.CommitKind.COMPACT in kinds  # the writes compacted: COMPACT snapshots are skipped
    rows = pa.concat_tables([b.data for b in table.stream(mode="from-snapshot", snapshot_id=1)])
    assert rows.num_rows == 18


def test_batches_are_chunked_by_max_rows(tmp_path: Path) -> None:
    table = _table(tmp_path, bucket="1")
    table.write(_rows([("a", i) for i in range(50)], [f"v{i}" for i in range(50)]))
    table.write(_rows([("a", i) for i in range(20)], [None] * 20, ["-D"] * 20))
    batches = _read(table.stream(max_rows=7))
    assert all(0 < b.data.num_rows <= 7 for b in batches)
    full = [b for b in batches if b.kind is cl.ChangeKind.FULL]
    assert sum(b.data.num_rows for b in full) == 30
    assert len(full) == 5  # 30 merged rows in chunks of 7


def test_projection_and_filter_apply_to_every_kind_of_read(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows([("a", 1), ("b", 2)], ["x", "y"]))
    table.write(_rows([("a", 1), ("b", 2)], ["x2", "y2"], ["+U", "+U"]))
    stream = table.stream(columns=["k", "v"], filter=pc.field("p") == "a", mode="from-snapshot-full", snapshot_id=1)
    got = pa.concat_tables([b.data for b in stream])
    assert got.to_pylist() == [{"rowkind": "+I", "k": 1, "v": "x"}, {"rowkind": "+U", "k": 1, "v": "x2"}]
    with pytest.raises(ScanError, match="unknown columns"):
        table.stream(columns=["nope"])


def test_changes_between_snapshots(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows([("a", 1)], ["v1"]))
    table.write(_rows([("a", 1), ("a", 2)], ["v2", "w"], ["+U", "+I"]))
    table.compact(full=True)
    table.write(_rows([("a", 2)], ["w"], ["-D"]))
    changes = table.changes(1, 4)
    assert changes.to_arrow().column("rowkind").to_pylist() == ["+U", "+I", "-D"]
    assert pa.Table.from_batches(list(changes.to_batches())).num_rows == 3
    assert table.changes(0, 1).to_arrow().to_pylist() == [{"rowkind": "+I", "p": "a", "k": 1, "v": "v1"}]
    assert table.changes(2, 2).to_arrow().num_rows == 0
    assert table.changes(1, 4, columns=["k"]).to_arrow().schema.names == ["rowkind", "k"]
    with pytest.raises(ScanError, match="reversed"):
        table.changes(3, 2)
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9 does not exist"):
        table.changes(1, 9)
    (Path(table.location) / "snapshot" / "snapshot-1").unlink()
    with pytest.raises(SnapshotExpiredError):
        table.changes(0, 2)
    assert table.changes(1, 2).to_arrow().num_rows == 2


def test_first_full_read_levels_follow_the_producer(tmp_path: Path) -> None:
    table = _table(tmp_path, bucket="1")
    table.write(_rows([("a", 1), ("a", 2)], ["old", "old"]))
    table.compact(full=True)  # to the top level
    table.write(_rows([("a", 2), ("a", 3)], ["new", "new"], ["+U", "+I"]))  # level 0

    def full_read(producer: str) -> list[tuple[int, str]]:
        stream = table.stream(options={"changelog-producer": producer})
        return [(r["k"], r["v"]) for b in stream for r in b.data.to_pylist()]

    assert full_read("none") == [(1, "old"), (2, "new"), (3, "new")]
    # lookup and full-compaction changelog covers level 0: the first read leaves it out.
    assert full_read("lookup") == [(1, "old"), (2, "old")]
    assert full_read("full-compaction") == [(1, "old"), (2, "old")]
    options = table.stream().source.options
    lookup = starting.full_read_levels(dataclasses.replace(options, changelog_producer=cl.ChangelogProducer.LOOKUP))
    full = starting.full_read_levels(
        dataclasses.replace(options, changelog_producer=cl.ChangelogProducer.FULL_COMPACTION))
    assert lookup is not None and full is not None
    assert [lookup(level) for level in range(options.num_levels)] == [False] + [True] * (options.num_levels - 1)
    assert [full(level) for level in range(options.num_levels)] == [False] * (options.num_levels - 1) + [True]
    assert starting.full_read_levels(options) is None


def test_producers_with_changelog_read_only_snapshots_that_list_changelog(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows([("a", 1)], ["v"]))
    # changelake's own snapshots carry no changelog manifest list yet: nothing to read.
    assert list(table.stream(snapshot_id=1, options={"changelog-producer": "input"})) == []


@pytest.mark.parametrize("producer", ["none", "input"])
def test_a_full_read_with_deletion_vectors_is_followed_by_its_snapshots_own_changes(tmp_path: Path,
                                                                                   producer: str) -> None:
    # With deletion vectors every read leaves level 0 out; a stream that read an APPEND snapshot
    # in full went on at the snapshot after it, and never saw the rows that snapshot wrote
    # (Paimon reads the snapshot's own changes next: DELETION_VECTOR_ONLY).
    table = _table(tmp_path, bucket="1", **{"deletion-vectors.enabled": "true", "changelog-producer": producer})
    stream = table.stream()  # on an empty table: snapshot 1 in full, once it comes
    table.write(_rows([("a", 1), ("a", 2)], ["x", "y"]))  # write-only: it stays at level 0
    assert _sorted([r for b in stream for r in b.data.to_pylist()]) == [
        {"rowkind": "+I", "p": "a", "k": 1, "v": "x"}, {"rowkind": "+I", "p": "a", "k": 2, "v": "y"}]
    assert stream.offset.snapshot_id == 2 and not stream.offset.scan_snapshot
    table.compact()
    table.write(_rows([("a", 2)], ["z"], ["+U"]))
    # latest-full at that APPEND snapshot: levels above 0 in full, then the snapshot's changes
    changes = [(r["rowkind"], r["k"], r["v"]) for b in table.stream(mode="latest-full") for r in b.data.to_pylist()]
    assert changes == [("+I", 1, "x"), ("+I", 2, "y"), ("+U", 2, "z")]
    assert [(r["rowkind"], r["k"], r["v"]) for b in stream for r in b.data.to_pylist()] == [("+U", 2, "z")]
