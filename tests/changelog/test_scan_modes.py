"""Starting scanners: each scan mode's start and follow-up, Paimon's defaulting, the errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import OffsetError, OptionError, SnapshotExpiredError, SnapshotNotFoundError

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _rows(keys: list[int], value: str, kind: str = "+I") -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "v": [value] * len(keys), "rowkind": [kind] * len(keys)})


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    """Snapshots: 1 APPEND {1,2,3}=a, 2 APPEND 2=b, 3 COMPACT, 4 APPEND -D 3, 5 APPEND 4=c."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"],
                                                   options={"bucket": "1", "write-only": "true"})
    table.write(_rows([1, 2, 3], "a"))
    table.write(_rows([2], "b", "+U"))
    table.compact(full=True)
    table.write(_rows([3], "a", "-D"))
    table.write(_rows([4], "c"))
    return table


def _changes(stream: cl.ChangeStream) -> list[tuple[int, str, str, int, str]]:
    return [(b.snapshot_id, b.kind.value, kind, k, v) for b in stream
            for kind, k, v in zip(*(b.data.column(c).to_pylist() for c in ("rowkind", "k", "v")), strict=True)]


def test_latest_full_reads_the_latest_snapshot_then_follows(table: cl.Table) -> None:
    stream = table.stream()
    assert _changes(stream) == [(5, "full", "+I", 1, "a"), (5, "full", "+I", 2, "b"), (5, "full", "+I", 4, "c")]
    table.write(_rows([1], "d", "+U"))
    assert _changes(stream) == [(6, "delta", "+U", 1, "d")]
    assert _changes(stream) == []  # caught up
    assert _changes(table.stream(mode="full")) == _changes(table.stream(mode="latest-full"))
    assert _changes(table.stream(options={"scan.mode": "default"}))[0][:2] == (6, "full")


def test_latest_reads_only_later_changes(table: cl.Table) -> None:
    stream = table.stream(mode="latest")
    assert _changes(stream) == []
    table.write(_rows([5], "e"))
    assert _changes(stream) == [(6, "delta", "+I", 5, "e")]


def test_compacted_full_reads_the_latest_compaction_then_the_changes_after_it(table: cl.Table) -> None:
    assert _changes(table.stream(mode="compacted-full")) == [
        (3, "full", "+I", 1, "a"), (3, "full", "+I", 2, "b"), (3, "full", "+I", 3, "a"),
        (4, "delta", "-D", 3, "a"), (5, "delta", "+I", 4, "c"),
    ]


def test_compacted_full_without_a_compaction_reads_the_latest(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"],
                                                   options={"bucket": "1", "write-only": "true"})
    table.write(_rows([1], "a"))
    assert _changes(table.stream(mode="compacted-full")) == [(1, "full", "+I", 1, "a")]


def test_from_snapshot_and_tag_and_from_snapshot_full(table: cl.Table) -> None:
    assert _changes(table.stream(snapshot_id=4)) == [(4, "delta", "-D", 3, "a"), (5, "delta", "+I", 4, "c")]
    table.create_tag("t4", snapshot_id=4)
    assert _changes(table.stream(tag="t4")) == _changes(table.stream(mode="from-snapshot", snapshot_id=4))
    assert _changes(table.stream(mode="from-snapshot-full", snapshot_id=2)) == [
        (2, "full", "+I", 1, "a"), (2, "full", "+I", 2, "b"), (2, "full", "+I", 3, "a"),
        (4, "delta", "-D", 3, "a"), (5, "delta", "+I", 4, "c"),
    ]
    assert _changes(table.stream(snapshot_id=6)) == []  # the next snapshot: waits for it
    assert _changes(table.stream(options={"scan.snapshot-id": "5"})) == [(5, "delta", "+I", 4, "c")]


def test_from_timestamp_starts_at_the_first_snapshot_at_or_after_it(table: cl.Table) -> None:
    snapshots = table.snapshots()
    for target in snapshots:
        first = min(s.id for s in snapshots if s.time_millis >= target.time_millis)
        stream = table.stream(timestamp_ms=target.time_millis)
        assert stream.offset.snapshot_id == first and not stream.offset.scan_snapshot
    assert table.stream(timestamp_ms=0).offset.snapshot_id == 1
    text = "2000-01-01 00:00:00"
    assert table.stream(options={"scan.mode": "from-timestamp", "scan.timestamp": text}).offset.snapshot_id == 1


def test_an_empty_table_streams_from_its_first_snapshot(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1"})
    full, latest = table.stream(), table.stream(mode="latest")
    assert _changes(full) == [] and _changes(latest) == []
    table.write(_rows([1, 2], "a"))
    assert _changes(full) == [(1, "full", "+I", 1, "a"), (1, "full", "+I", 2, "a")]
    assert _changes(latest) == [(1, "delta", "+I", 1, "a"), (1, "delta", "+I", 2, "a")]


def test_scan_mode_errors(table: cl.Table, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"scan\.mode") as info:
        table.stream(mode="sideways")
    assert info.value.option == "scan.mode" and info.value.table == "db.t"
    with pytest.raises(OptionError, match=r"needs scan\.snapshot-id or scan\.tag-name") as info:
        table.stream(mode="from-snapshot")
    assert info.value.option == "scan.snapshot-id"
    with pytest.raises(OptionError, match=r"needs scan\.timestamp-millis"):
        table.stream(options={"scan.mode": "from-timestamp"})
    with pytest.raises(OptionError, match=r"not used by scan\.mode latest") as info:
        table.stream(mode="latest", snapshot_id=2)
    assert info.value.option == "scan.snapshot-id"
    with pytest.raises(OptionError, match=r"table\.changes"):
        table.stream(mode="incremental")
    with pytest.raises(OptionError, match="must be a string"):
        table.stream(options={"scan.snapshot-id": 3})  # type: ignore[dict-item]
    with pytest.raises(OptionError, match=r"is unknown; did you mean 'scan\.snapshot-id'") as info:
        table.stream(options={"scan.snapshot-idd": "3"})
    assert info.value.option == "scan.snapshot-idd"
    with pytest.raises(OptionError, match="not a time"):
        table.stream(options={"scan.timestamp": "yesterday"})
    latest = table.latest_snapshot()
    assert latest is not None
    with pytest.raises(SnapshotNotFoundError, match="no snapshot at or after") as info:
        table.stream(timestamp_ms=latest.time_millis + 1)
    assert info.value.option == "scan.timestamp-millis"
    with pytest.raises(SnapshotNotFoundError, match="snapshot 9 does not exist"):
        table.stream(snapshot_id=9)
    with pytest.raises(SnapshotNotFoundError, match="snapshot 6 does not exist yet"):
        table.stream(mode="from-snapshot-full", snapshot_id=6)


def test_expired_start_snapshots_and_offsets(table: cl.Table) -> None:
    offset = next(iter(table.stream(snapshot_id=1))).offset
    (Path(table.location) / "snapshot" / "snapshot-1").unlink()
    (Path(table.location) / "snapshot" / "snapshot-2").unlink()
    with pytest.raises(SnapshotExpiredError, match="snapshot 1 has expired") as info:
        table.stream(snapshot_id=1)
    assert info.value.option == "scan.snapshot-id"
    with pytest.raises(SnapshotExpiredError):
        table.stream(offset=offset)
    with pytest.raises(SnapshotExpiredError):
        table.stream(mode="from-snapshot-full", snapshot_id=2)
    assert _changes(table.stream(snapshot_id=3)) == [(4, "delta", "-D", 3, "a"), (5, "delta", "+I", 4, "c")]


def test_offsets_of_another_table_or_beyond_the_history_are_refused(table: cl.Table, tmp_path: Path) -> None:
    other = cl.Catalog(str(tmp_path / "other")).create_table("db.t", SCHEMA, primary_keys=["k"])
    other.write(_rows([1], "x"))
    foreign = other.stream().offset
    with pytest.raises(OffsetError, match="belongs to another table"):
        table.stream(offset=foreign)
    with pytest.raises(OffsetError, match="beyond this table's history"):
        other.stream(offset=cl.StreamOffset(snapshotId=7))
    # An offset made elsewhere (no tableId) is accepted where it fits the history.
    paimon_shaped = cl.StreamOffset.from_json('{"snapshotId": 4, "index": 0, "scanSnapshot": false}')
    assert _changes(table.stream(offset=paimon_shaped))[0] == (4, "delta", "-D", 3, "a")


@pytest.mark.parametrize("mode", ["latest-full", "compacted-full"])
def test_a_stream_made_on_an_empty_table_reads_the_latest_once_its_first_snapshot_expired(tmp_path: Path,
                                                                                         mode: str) -> None:
    # It starts at snapshot 1 in full; once that expired before it came to read it, it failed
    # with SnapshotExpiredError, where Paimon's stream picks the latest snapshot at its first plan.
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1"})
    stream = table.stream(mode=mode, consumer_id="c")
    assert list(stream) == []
    stream.commit()  # inside the first full read: records nothing
    for k in range(3):
        table.write(pa.table({"k": pa.array([k], pa.int64()), "v": pa.array([str(k)])}))
    table.expire_snapshots(retain_max=1, retain_min=1)
    assert sorted((r["rowkind"], r["k"]) for b in stream for r in b.data.to_pylist()) == [
        ("+I", 0), ("+I", 1), ("+I", 2)]
    # An offset that has read part of an expired snapshot's full read still fails.
    with pytest.raises(SnapshotExpiredError):
        list(table.stream(offset=cl.StreamOffset(snapshotId=1, index=1, scanSnapshot=True)))


def test_a_full_read_of_a_snapshot_whose_changelog_alone_is_kept_is_expired(tmp_path: Path) -> None:
    # It said "snapshot 1 does not exist yet" (SnapshotNotFoundError): the kept changelog made
    # the expiry check pass, and the snapshot itself was gone.
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "1", "changelog-producer": "input", "changelog.num-retained.max": "10",
                 "snapshot.num-retained.max": "2"})
    for k in range(3):
        table.write(pa.table({"k": pa.array([k], pa.int64()), "v": pa.array([str(k)])}))
    table.expire_snapshots(retain_max=1, retain_min=1)
    assert [r["k"] for b in table.stream(mode="from-snapshot", snapshot_id=1) for r in b.data.to_pylist()] == [0, 1, 2]
    with pytest.raises(SnapshotExpiredError, match="snapshot 1 has expired"):
        table.stream(mode="from-snapshot-full", snapshot_id=1)
    with pytest.raises(SnapshotNotFoundError, match="does not exist yet"):
        table.stream(mode="from-snapshot-full", snapshot_id=4)  # the next one
