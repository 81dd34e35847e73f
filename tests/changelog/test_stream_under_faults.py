"""A change stream over a table rolled back many times: each rollback record is read once
per process (a stream step lists ``rollback/`` and reads only new records), and a read that
fails leaves the stream where it was, so iterating again continues without loss or repeats."""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import StorageError
from changelake.table.format import data_file
from changelake.table.io.fileio import FileIO
from changelake.table.maintenance import rollback

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
ROLLBACKS = 12


def _rolled_back_table(tmp_path: Path) -> cl.Table:
    """A table rolled back ROLLBACKS times (each time writing two snapshots, dropping one)."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    for i in range(ROLLBACKS):
        kept = table.write(pa.table({"k": [i], "v": [i]}, schema=SCHEMA))
        table.write(pa.table({"k": [i], "v": [-1]}, schema=SCHEMA))
        table.rollback_to(snapshot_id=kept.id)
    return table


def _counting(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """Reads and listings of ``rollback/`` from now on, by path."""
    reads: Counter[str] = Counter()
    listings: Counter[str] = Counter()
    read_bytes, list_names = FileIO.read_bytes, FileIO.list_names

    def counted_read(self: FileIO, path: str) -> bytes:
        if "/rollback/" in path:
            reads[path] += 1
        return read_bytes(self, path)

    def counted_list(self: FileIO, directory: str) -> list[str]:
        if directory.endswith("/rollback"):
            listings[directory] += 1
        return list_names(self, directory)

    monkeypatch.setattr(FileIO, "read_bytes", counted_read)
    monkeypatch.setattr(FileIO, "list_names", counted_list)
    return reads, listings


def test_a_stream_reads_each_rollback_record_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _rolled_back_table(tmp_path)
    rollback.RECORDS.clear()  # as a fresh process finds it
    reads, listings = _counting(monkeypatch)
    stream = table.stream(mode="latest-full", consumer_id="c", max_rows=1)
    assert sorted(r["k"] for b in stream for r in b.data.to_pylist()) == list(range(ROLLBACKS))
    stream.commit()
    for i in range(3):  # more commits, more stream steps: each lists rollback/ once per plan and commit
        table.write(pa.table({"k": [100 + i], "v": [i]}, schema=SCHEMA))
        before = sum(listings.values())
        assert [r["k"] for b in stream for r in b.data.to_pylist()] == [100 + i]
        stream.commit()
        assert sum(listings.values()) - before == 3  # the plan that reads, the one that finds no more, the commit
    kept = table.latest_snapshot()
    assert kept is not None
    table.write(pa.table({"k": [200], "v": [0]}, schema=SCHEMA))
    table.rollback_to(snapshot_id=kept.id)
    resumed = table.stream(consumer_id="c")
    table.write(pa.table({"k": [300], "v": [0]}, schema=SCHEMA))
    assert [r["k"] for b in resumed for r in b.data.to_pylist()] == [300]
    assert len(reads) == ROLLBACKS + 1 and set(reads.values()) == {1}  # the new rollback's record too


def test_a_table_made_anew_at_the_same_location_is_not_given_the_old_records(tmp_path: Path) -> None:
    table = _rolled_back_table(tmp_path)
    offset = table.stream(mode="latest").offset
    assert offset.table_id is not None and offset.table_id.endswith(f".r{ROLLBACKS}")
    shutil.rmtree(table.location)  # dropped by another tool, made anew here
    fresh = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    fresh.write(pa.table({"k": [1], "v": [1]}, schema=SCHEMA))
    assert ".r" not in str(fresh.stream(mode="latest").offset.table_id)


def test_a_failed_read_leaves_the_stream_where_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _rolled_back_table(tmp_path)
    for i in range(6):
        table.write(pa.table({"k": [50 + i, 60 + i], "v": [i, i]}, schema=SCHEMA))
    stream = table.stream(mode="from-snapshot", snapshot_id=1, max_rows=1)
    opens = Counter[str]()
    opened = data_file.opened

    @contextlib.contextmanager
    def fails_once(file_io: FileIO, path: str) -> Iterator[pa.NativeFile]:
        opens["all"] += 1
        if opens["all"] == 4:  # a store failure part way through the stream
            raise StorageError("read failed: injected", file=path)
        with opened(file_io, path) as source:
            yield source

    monkeypatch.setattr(data_file, "opened", fails_once)
    got: list[tuple[int, int]] = []
    with pytest.raises(StorageError, match="injected"):
        for batch in stream:
            got += [(batch.snapshot_id, r["k"]) for r in batch.data.to_pylist()]
    assert got  # it failed part way
    got += [(batch.snapshot_id, r["k"]) for batch in stream for r in batch.data.to_pylist()]
    expected = [(b.snapshot_id, r["k"]) for b in table.stream(mode="from-snapshot", snapshot_id=1)
                for r in b.data.to_pylist()]
    assert got == expected and len(set(got)) == len(got)
