"""The change-stream facade: table.stream() and its batches, follow() with stop conditions,
table.changes(), and what pickles."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _table(tmp_path: Path) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    table.write(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    return table


def _write(table: cl.Table, k: int, v: str, kind: str = "+I") -> None:
    table.write(pa.table({"k": pa.array([k], pa.int64()), "v": [v], "rowkind": [kind]}))


def test_batches_carry_snapshot_kind_rows_and_offset(tmp_path: Path) -> None:
    table = _table(tmp_path)
    stream = table.stream()
    assert stream.schema.names == ["rowkind", "k", "v"] and stream.schema.field("rowkind").type == pa.string()
    batches = list(stream)
    assert all(isinstance(b, cl.ChangeBatch) and b.kind is cl.ChangeKind.FULL and b.snapshot_id == 1
               for b in batches)
    assert all(b.data.schema == stream.schema for b in batches)
    assert batches[-1].offset == stream.offset == cl.StreamOffset(snapshotId=2, tableId=stream.offset.table_id)
    assert "ChangeStream('db.t'" in repr(stream)


def test_follow_stops_on_a_callable_while_a_writer_commits(tmp_path: Path) -> None:
    table = _table(tmp_path)
    stream = table.stream(mode="latest")
    seen: list[tuple[str, int, str]] = []

    def writer() -> None:
        for i in range(3):
            _write(table, 10 + i, f"w{i}")
        _write(table, 10, "w0", "-D")

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for batch in stream.follow(poll_interval=0.01, stop=lambda: len(seen) >= 4):
            seen.extend((r["rowkind"], r["k"], r["v"]) for r in batch.data.to_pylist())
    finally:
        thread.join()
    assert seen == [("+I", 10, "w0"), ("+I", 11, "w1"), ("+I", 12, "w2"), ("-D", 10, "w0")]


def test_follow_stops_on_an_event(tmp_path: Path) -> None:
    table = _table(tmp_path)
    stop = threading.Event()
    got = []
    for batch in table.stream().follow(poll_interval=0.01, stop=stop):
        got.append(batch)
        stop.set()
    assert len(got) == 1
    stop = threading.Event()
    stop.set()
    assert list(table.stream().follow(stop=stop)) == []


def test_sources_and_splits_pickle_small(tmp_path: Path) -> None:
    table = _table(tmp_path)
    source = table.stream().source
    plan = source.plan()
    assert len(pickle.dumps(source)) < 8192
    copy = pickle.loads(pickle.dumps(source))
    assert [list(copy.to_batches(s)) for s in plan.splits] == [list(source.to_batches(s)) for s in plan.splits]


def test_changes_reads_like_a_scan(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _write(table, 1, "a2", "+U")
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.changes(1, latest.id)
    assert changes.to_arrow().to_pylist() == [{"rowkind": "+U", "k": 1, "v": "a2"}]
    assert changes.to_arrow_batch_reader().read_all().equals(changes.to_arrow())
    assert len(changes.plan()) == 1


def test_max_rows_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(cl.errors.ScanError, match="max_rows"):
        _table(tmp_path).stream(max_rows=0)
    with pytest.raises(cl.errors.ScanError, match="max_files"):
        cl.ReadLimit(max_files=0)
