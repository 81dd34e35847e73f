"""``table.truncate()`` and ``table.drop_partitions()``: one OVERWRITE snapshot that removes
the rows of every (or the named) partition, on every table kind; older snapshots keep reading
them, streams skip the snapshot unless ``streaming-read-overwrite`` asks for its deletes, the
table takes writes again as if the rows had never been there, and bad input changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import ScanError

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])
KINDS = {
    "fixed, deletion vectors, lookup": ({"bucket": "2", "deletion-vectors.enabled": "true",
                                         "changelog-producer": "lookup"}, ["dt", "id"]),
    "dynamic bucket": ({"bucket": "-1", "dynamic-bucket.target-row-num": "5"}, ["dt", "id"]),
    "cross-partition": ({"bucket": "-1"}, ["id"]),
    "postpone bucket": ({"bucket": "-2"}, ["dt", "id"]),
    "append": ({"bucket": "-1"}, None),
}


def rows(dt: str, ids: range, v: int) -> pa.Table:
    return pa.table({"dt": [dt] * len(ids), "id": list(ids), "v": [v] * len(ids)}, schema=SCHEMA)


def state(table: cl.Table, **at: Any) -> set[tuple[str, int, int]]:
    return {(r["dt"], r["id"], r["v"]) for r in table.scan(**at).to_arrow().to_pylist()}


def make(tmp_path: Path, kind: str) -> cl.Table:
    options, keys = KINDS[kind]
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=keys, partition_keys=["dt"],
                                                   options=options)
    table.write(pa.concat_tables([rows("d0", range(10), 0), rows("d1", range(10, 20), 0)]))
    table.write(rows("d1", range(15, 25), 1))
    if kind == "postpone bucket":
        table.compact()  # the rows move into real buckets, where reads see them
    return table


@pytest.mark.parametrize("kind", list(KINDS))
def test_dropping_a_partition_then_truncating(tmp_path: Path, kind: str) -> None:
    table = make(tmp_path, kind)
    before = table.latest_snapshot()
    assert before is not None
    full = state(table)
    d0 = {r for r in full if r[0] == "d0"}
    assert d0 and len(full) > len(d0)

    dropped = table.drop_partitions([{"dt": "d1"}])
    assert dropped is not None and dropped.commit_kind is cl.CommitKind.OVERWRITE
    assert state(table) == d0
    assert state(table, snapshot_id=before.id) == full  # time travel still reads the dropped rows
    # The partition takes writes again as if its old rows had never been there.
    table.write(rows("d1", range(12, 14), 7))
    if kind == "postpone bucket":
        table.compact()
    assert state(table) == d0 | {("d1", 12, 7), ("d1", 13, 7)}

    truncated = table.truncate()
    assert truncated is not None and truncated.commit_kind is cl.CommitKind.OVERWRITE and state(table) == set()
    assert table.truncate() is None  # nothing left to delete
    table.write(rows("d0", range(3), 9))
    if kind == "postpone bucket":
        table.compact()
    assert state(table) == {("d0", i, 9) for i in range(3)}


def test_streams_skip_the_drop_unless_asked_for_its_deletes(tmp_path: Path) -> None:
    table = make(tmp_path, "fixed, deletion vectors, lookup")
    start = table.latest_snapshot()
    assert start is not None
    kept = state(table)
    table.drop_partitions([{"dt": "d0"}])
    assert table.changes(start.id, start.id + 1).to_arrow().num_rows == 0
    deletes = list(table.stream(snapshot_id=start.id + 1, options={"streaming-read-overwrite": "true"}))
    got = pa.concat_tables([b.data for b in deletes])
    assert set(got["rowkind"].to_pylist()) == {"-D"}
    assert {(r["dt"], r["id"], r["v"]) for r in got.to_pylist()} == {r for r in kept if r[0] == "d0"}


def test_bad_drops_change_nothing(tmp_path: Path) -> None:
    table = make(tmp_path, "dynamic bucket")
    latest = table.latest_snapshot()
    with pytest.raises(ScanError, match=r"partition \{'dt': 'd9'\} holds no data: nothing to drop") as info:
        table.drop_partitions([{"dt": "d0"}, {"dt": "d9"}])
    assert info.value.table == "db.t"
    with pytest.raises(ScanError, match="at least one partition"):
        table.drop_partitions([])
    with pytest.raises(ScanError, match="not partition keys"):
        table.drop_partitions([{"day": "d0"}])
    flat = cl.Catalog(str(tmp_path)).create_table("db.flat", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    flat.write(rows("d0", range(3), 0))
    with pytest.raises(ScanError, match="not partitioned: truncate it instead"):
        flat.drop_partitions([{"dt": "d0"}])
    assert table.latest_snapshot() == latest
    assert flat.truncate() is not None and flat.scan().to_arrow().num_rows == 0
    empty = cl.Catalog(str(tmp_path)).create_table("db.empty", SCHEMA)
    assert empty.truncate() is None and empty.latest_snapshot() is None
