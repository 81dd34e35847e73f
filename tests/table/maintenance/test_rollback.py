"""Rollback to a snapshot or tag, then writing on; streams from the abandoned history refused;
the system tables of a small table."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import RolledBackOffsetError, ScanError


def _table(tmp_path: Path) -> cl.Table:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
    return cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"])


def test_rollback_then_write(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for i in range(4):
        table.write(pa.table({"k": [i], "v": [f"v{i}"]}))
    table.create_tag("at2", 2)
    table.create_tag("at4", 4)
    expected = table.scan(snapshot_id=2).to_arrow()
    stream = table.stream(mode="from-snapshot", snapshot_id=1)
    list(stream)  # read to the end: positioned after snapshot 4
    offset = stream.offset
    assert table.rollback_to(snapshot_id=2).id == 2
    assert [s.id for s in table.snapshots()] == [1, 2]
    assert list(table.tags()) == ["at2"]  # later tags go, as in Paimon
    assert table.scan().to_arrow().equals(expected)
    assert table.remove_orphan_files(older_than=dt.timedelta(0), dry_run=True) == []
    assert table.write(pa.table({"k": [9], "v": ["new"]})).id == 3
    assert sorted(table.scan().to_arrow()["k"].to_pylist()) == [0, 1, 9]
    with pytest.raises(RolledBackOffsetError):
        list(table.stream(offset=offset))
    assert table.rollback_to(tag="at2").id == 2
    assert sorted(table.scan().to_arrow()["k"].to_pylist()) == [0, 1]
    with pytest.raises(ValueError):
        table.rollback_to()


def test_system_tables(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(pa.table({"k": [1, 2], "v": ["a", "b"]}))
    table.create_tag("t", 1)
    assert table.system("snapshots")["snapshot_id"].to_pylist() == [1]
    assert table.system("snapshots")["commit_kind"].to_pylist() == ["APPEND"]
    assert table.system("tags")["tag_name"].to_pylist() == ["t"]
    assert table.system("schemas")["schema_id"].to_pylist() == [0]
    table.set_options({"snapshot.num-retained.max": "7"})
    assert dict(zip(*table.system("options").to_pydict().values(), strict=True))["snapshot.num-retained.max"] == "7"
    assert table.system("files")["record_count"].to_pylist() == [2]
    assert table.system("buckets")["file_count"].to_pylist() == [1]
    assert table.system("partitions")["record_count"].to_pylist() == [2]
    assert table.system("manifests").num_rows >= 1
    assert table.system("consumers").num_rows == 0
    audit = table.system("audit_log")
    assert audit.column_names == ["rowkind", "k", "v"] and audit["rowkind"].to_pylist() == ["+I", "+I"]
    with pytest.raises(ScanError, match="audit_log"):
        table.system("nope")


def test_a_consumer_past_the_rollback_resumes_at_the_commits_after_it(tmp_path: Path) -> None:
    """A consumer that read past the target is moved back to the snapshot after it: a stream
    resumed from it reads every commit made after the rollback (whose snapshot ids are those it
    had read before); a consumer at or before that snapshot keeps its place."""
    table = _table(tmp_path)
    for i in range(5):
        table.write(pa.table({"k": [i], "v": [f"v{i}"]}))
    ahead = table.stream(mode="from-snapshot", snapshot_id=1, consumer_id="ahead")
    assert [b.snapshot_id for b in ahead] == [1, 2, 3, 4, 5]
    ahead.commit()  # past the end
    behind = table.stream(mode="from-snapshot", snapshot_id=1, consumer_id="behind")
    assert [b.snapshot_id for b in itertools.islice(behind, 2)] == [1, 2]
    behind.commit()  # next: 3, the snapshot after the target
    table.rollback_to(snapshot_id=2)
    assert dict(zip(*table.system("consumers").to_pydict().values(), strict=True)) == {"ahead": 3, "behind": 3}
    table.write(pa.table({"k": [7], "v": ["new"]}))
    table.write(pa.table({"k": [8], "v": ["newer"]}))

    resumed = [(b.snapshot_id, b.data.to_pylist()) for b in table.stream(consumer_id="ahead")]
    assert resumed == [(3, [{"rowkind": "+I", "k": 7, "v": "new"}]), (4, [{"rowkind": "+I", "k": 8, "v": "newer"}])]
    assert [b.snapshot_id for b in table.stream(consumer_id="behind")] == [3, 4]
