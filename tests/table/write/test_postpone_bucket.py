"""Postpone-bucket tables (``bucket = -2``), through the public API: writers put rows into each
partition's ``bucket-postpone/`` as Paimon lays them out, readers skip them, ``Table.compact``
moves them into real buckets (a partition's existing number, else ``postpone.default-bucket-num``
or an estimate) as one COMPACT snapshot, streams see each row once as Paimon emits it per
changelog producer, batch writes go straight into fixed buckets, and maintenance keeps it all."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake import errors
from changelake.table.format import data_file
from changelake.table.format.manifest import ManifestEntry
from changelake.table.format.snapshot import CommitKind
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read.live_files import live_entries

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
POSTPONE_FILE = re.compile(r"^data--u-(?P<user>.+)-s-\d+-w-[0-9a-f-]{36}-0\.parquet$")


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"], options={"bucket": "-2", **options})


def _rows(dt_: str, keys: Iterable[int], v: str, kind: str = "+I") -> pa.Table:
    keys = list(keys)
    return pa.table({"dt": [dt_] * len(keys), "k": pa.array(keys, pa.int64()), "v": [v] * len(keys),
                     "rowkind": [kind] * len(keys)})


def _entries(table: cl.Table) -> list[ManifestEntry]:
    latest = table.latest_snapshot()
    assert latest is not None
    return live_entries(table.context, latest)


def _rows_of(table: cl.Table) -> dict[tuple[str, int], str | None]:
    return {(r["dt"], r["k"]): r["v"] for r in table.scan().to_arrow().to_pylist()}


def _bucket_counts(table: cl.Table) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for e in _entries(table):
        out.setdefault(table.context.partition_values(e.partition)[0], set()).add(e.total_buckets)
    return out


def test_a_writer_lands_rows_in_bucket_postpone_as_paimon_does(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.writer(commit_user="ingest") as writer:
        writer.write(_rows("a", [3, 1], "x"))
        writer.write(_rows("b", [2], "y"))
        writer.write(_rows("a", [3], "x2"))
        [snapshot] = writer.commit(1)
        assert writer.commit(1) == []  # a replayed identifier lands nothing
    assert snapshot.commit_kind is CommitKind.APPEND
    entries = _entries(table)
    assert {(e.bucket, e.total_buckets, e.file.level) for e in entries} == {(-2, -2, 0)}
    assert all(e.file.min_sequence_number == e.file.max_sequence_number == -1 for e in entries)
    a_dir = tmp_path / "db.db" / "t" / "dt=a" / "bucket-postpone"
    [name] = os.listdir(a_dir)
    match = POSTPONE_FILE.match(name)
    assert match is not None and match["user"] == "ingest"
    stored = pq.read_table(a_dir / name)
    # Neither sorted nor merged: the partition's rows as they came, every one numbered -1.
    assert stored.column_names == ["_KEY_k", "_SEQUENCE_NUMBER", "_VALUE_KIND", "dt", "k", "v"]
    assert stored.column("k").to_pylist() == [3, 1, 3] and stored.column("v").to_pylist() == ["x", "x", "x2"]
    assert set(stored.column("_SEQUENCE_NUMBER").to_pylist()) == {-1}
    [a_entry] = [e for e in entries if table.context.partition_values(e.partition) == ("a",)]
    assert table.context.key_of(a_entry.file.min_key) == (3,)  # the first row's key, as Paimon's
    # Readers skip bucket-postpone/ until a compaction moves its rows into real buckets.
    assert table.scan().to_arrow().num_rows == 0
    assert not (tmp_path / "db.db" / "t" / "dt=a" / "bucket--2").exists()
    inspection = str(table.inspect())
    assert "partition dt=a bucket postpone: 1 file" in inspection and "moves these rows into real buckets" in inspection


def test_compaction_moves_rows_into_real_buckets_once(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"postpone.default-bucket-num": "3"})
    model: dict[tuple[str, int], str | None] = {}
    with table.writer(commit_user="ingest") as writer:
        writer.write(_rows("a", range(20), "v1"))
        writer.write(_rows("b", range(5), "v1"))
        writer.commit(1)
        writer.write(_rows("a", range(5), "v2", "+U"))
        writer.write(_rows("a", range(15, 20), "", "-D"))
        writer.commit(2)
    model.update({("a", k): "v1" for k in range(20)} | {("b", k): "v1" for k in range(5)})
    model.update({("a", k): "v2" for k in range(5)})
    for k in range(15, 20):
        del model[("a", k)]
    compacted = table.compact()
    assert compacted is not None and compacted.commit_kind is CommitKind.COMPACT
    assert table.latest_snapshot() == compacted  # one snapshot
    assert _rows_of(table) == model
    assert _bucket_counts(table) == {"a": {3}, "b": {3}}
    assert all(e.bucket >= 0 for e in _entries(table))
    assert not any(e.bucket == -2 for e in _entries(table))
    table.compact(full=True)  # real buckets only now: compacted as any fixed bucket
    assert _rows_of(table) == model and _bucket_counts(table) == {"a": {3}, "b": {3}}
    # Later rows merge with what the real buckets hold, in the partition's buckets.
    with table.writer(commit_user="ingest") as writer:
        writer.write(_rows("a", [0, 1], "v3", "+U"))
        writer.write(_rows("a", [2], "", "-D"))
        writer.commit(3)
    assert _rows_of(table) == model  # not yet compacted
    table.compact()
    model.update({("a", 0): "v3", ("a", 1): "v3"})
    del model[("a", 2)]
    assert _rows_of(table) == model and _bucket_counts(table) == {"a": {3}, "b": {3}}


def test_a_new_partition_gets_buckets_estimated_from_its_postpone_rows(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"postpone.target-row-num-per-bucket": "10"})
    with table.writer() as writer:
        writer.write(_rows("a", range(25), "v"))
        writer.commit(1)
    table.compact()
    assert _bucket_counts(table) == {"a": {3}}
    with table.writer() as writer:
        writer.write(_rows("a", range(100, 160), "v"))  # an existing partition keeps its number
        writer.write(_rows("b", range(5), "v"))
        writer.commit(2)
    table.compact(partitions=[{"dt": "b"}])
    assert _bucket_counts(table) == {"a": {3, -2}, "b": {1}}
    table.compact()
    assert _bucket_counts(table) == {"a": {3}, "b": {1}}
    assert len(_rows_of(table)) == 25 + 60 + 5


def test_a_batch_write_goes_straight_into_fixed_buckets(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"postpone.default-bucket-num": "2"})
    snapshot = table.write(_rows("a", range(10), "v"))
    assert snapshot is not None and snapshot.commit_kind is CommitKind.APPEND
    assert _rows_of(table) == {("a", k): "v" for k in range(10)}
    assert {(e.total_buckets, e.file.level) for e in _entries(table)} == {(2, 0)}
    # Postpone rows written before merge into those buckets at the next compaction.
    with table.writer() as writer:
        writer.write(_rows("a", [1], "later", "+U"))
        writer.commit(1)
    table.compact()
    assert _rows_of(table)[("a", 1)] == "later" and len(_rows_of(table)) == 10

    estimated = cl.Catalog(str(tmp_path)).create_table(
        "db.e", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
        options={"bucket": "-2", "postpone.target-row-num-per-bucket": "10"})
    estimated.write(_rows("a", range(25), "v"))  # 3 buckets wanted: 4, a power of two
    assert _bucket_counts(estimated) == {"a": {4}}

    postponed = cl.Catalog(str(tmp_path)).create_table(
        "db.p", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
        options={"bucket": "-2", "postpone.batch-write-fixed-bucket": "false"})
    postponed.write(_rows("a", range(3), "v"))
    assert {e.bucket for e in _entries(postponed)} == {-2}
    assert postponed.scan().to_arrow().num_rows == 0


@pytest.mark.parametrize("producer", ["none", "input", "lookup"])
def test_a_stream_sees_each_row_once(tmp_path: Path, producer: str) -> None:
    table = _table(tmp_path, **{"changelog-producer": producer, "postpone.default-bucket-num": "2"})
    with table.writer() as writer:
        writer.write(_rows("a", [1, 2], "v1"))
        writer.commit(1)
        stream = table.stream()
        first = [r for b in stream for r in b.data.to_pylist()]
        writer.write(_rows("a", [1], "v2", "+U"))
        writer.commit(2)
    before = [r for b in stream for r in b.data.to_pylist()]
    table.compact()
    after = [r for b in stream for r in b.data.to_pylist()]
    assert [r for b in stream for r in b.data.to_pylist()] == []
    assert _rows_of(table) == {("a", 1): "v2", ("a", 2): "v1"}
    fresh = [r for b in table.stream() for r in b.data.to_pylist()]  # a full read of the compacted table
    assert sorted((r["k"], r["v"]) for r in fresh) == [(1, "v2"), (2, "v1")]
    if producer == "none":
        # As Paimon: without a producer, streams read postpone files as they are (the first
        # full read too) and skip the COMPACT snapshot.
        assert first == [{"rowkind": "+I", "dt": "a", "k": 1, "v": "v1"},
                         {"rowkind": "+I", "dt": "a", "k": 2, "v": "v1"}]
        assert before == [{"rowkind": "+U", "dt": "a", "k": 1, "v": "v2"}] and after == []
    elif producer == "input":
        # Streams skip postpone files: the compaction's changelog is its input rows (by key).
        assert first == before == []
        assert after == [{"rowkind": "+I", "dt": "a", "k": 1, "v": "v1"},
                         {"rowkind": "+U", "dt": "a", "k": 1, "v": "v2"},
                         {"rowkind": "+I", "dt": "a", "k": 2, "v": "v1"}]
    else:
        assert first == before == []
        assert sorted(after, key=lambda r: r["k"]) == [{"rowkind": "+I", "dt": "a", "k": 1, "v": "v2"},
                                                       {"rowkind": "+I", "dt": "a", "k": 2, "v": "v1"}]


def test_maintenance_keeps_postpone_files_right(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"postpone.default-bucket-num": "2"})
    with table.writer() as writer:
        writer.write(_rows("a", range(4), "v1"))
        writer.commit(1)
    table_dir = tmp_path / "db.db" / "t"
    stray = table_dir / "dt=a" / "bucket-postpone" / "data--u-x-s-1-w-stray-0.parquet"
    stray.write_bytes(b"left by a crashed writer")
    os.utime(stray, (0, 0))
    removed = table.remove_orphan_files(older_than=dt.timedelta(hours=1))
    assert removed == [str(stray)] and len(os.listdir(stray.parent)) == 1
    compacted = table.compact()
    assert compacted is not None
    # Rolled back before the compaction: the rows wait in bucket-postpone/ again.
    table.rollback_to(snapshot_id=1)
    assert table.scan().to_arrow().num_rows == 0
    table.compact()
    assert _rows_of(table) == {("a", k): "v1" for k in range(4)}
    # Expiry deletes the postpone files once no snapshot names them.
    table.expire_snapshots(retain_max=1, retain_min=1)
    assert not list((table_dir / "dt=a" / "bucket-postpone").iterdir())
    assert _rows_of(table) == {("a", k): "v1" for k in range(4)}


def test_bad_postpone_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(errors.OptionError, match=r"postpone\.default-bucket-num"):
        _table(tmp_path, **{"postpone.default-bucket-num": "0"})
    with pytest.raises(errors.OptionError, match="bucket"):
        cl.Catalog(str(tmp_path)).create_table("db.u", SCHEMA, primary_keys=["dt", "k"], options={"bucket": "-3"})


_COMPACT_CHILD = textwrap.dedent("""
    import sys, changelake as cl
    cl.Catalog(sys.argv[1]).get_table("db.t").compact()
""")


@pytest.mark.parametrize("point", [KillPoint.DATA_FILE, KillPoint.COMPACTION, KillPoint.MANIFEST,
                                   KillPoint.SNAPSHOT_BEFORE_LATEST])
def test_a_killed_compaction_moves_every_row_exactly_once(tmp_path: Path, point: KillPoint) -> None:
    table = _table(tmp_path, **{"postpone.default-bucket-num": "2", "changelog-producer": "input"})
    table.write(_rows("a", range(10), "v0"))  # real buckets already hold rows
    with table.writer() as writer:
        writer.write(_rows("a", range(5, 15), "v1", "+U"))
        writer.commit(1)
    env = {**os.environ, "CHANGELAKE_KILL_POINT": str(point), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _COMPACT_CHILD, str(tmp_path)], env=env, check=False)
    assert done.returncode != 0
    table = cl.Catalog(str(tmp_path)).get_table("db.t")
    latest = table.latest_snapshot()
    assert latest is not None
    expected = {("a", k): "v0" for k in range(5)} | {("a", k): "v1" for k in range(5, 15)}
    if latest.commit_kind is CommitKind.COMPACT:  # killed after the snapshot landed
        assert _rows_of(table) == expected
    else:
        assert _rows_of(table) == {("a", k): "v0" for k in range(10)}
        table.compact()
        assert _rows_of(table) == expected
    table.compact()
    assert _rows_of(table) == expected
    changelog = [r for b in table.stream(mode="from-snapshot", snapshot_id=1) for r in b.data.to_pylist()]
    assert sorted((r["k"], r["v"]) for r in changelog if r["v"] == "v1") == [(k, "v1") for k in range(5, 15)]


def test_a_compaction_racing_a_write_into_real_buckets_is_void(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """As Paimon's postpone compaction (``commit.strict-mode.last-safe-snapshot``): rows another
    user put into real buckets meanwhile may be numbered as the moved rows are, so the
    compaction is void; postpone rows written meanwhile just wait for the next compaction."""
    table = _table(tmp_path, **{"postpone.default-bucket-num": "2"})
    table.write(_rows("a", range(4), "v0"))
    with table.writer() as writer:
        writer.write(_rows("a", [1, 2], "v1", "+U"))
        writer.commit(1)
    meanwhile: list[pa.Table] = [_rows("a", [2], "batch", "+U"), _rows("a", [3], "postponed", "+U")]

    def write_meanwhile(point: KillPoint, **_: object) -> None:
        if point is KillPoint.COMPACTION and meanwhile:
            rows = meanwhile.pop(0)
            if rows.column("v")[0].as_py() == "batch":
                table.write(rows)  # into real buckets
            else:
                with table.writer() as other:
                    other.write(rows)
                    other.commit(1)

    monkeypatch.setattr(killpoints, "reached", write_meanwhile)
    files_before = {p for p in (tmp_path / "db.db" / "t" / "dt=a").rglob("*.parquet")}
    with pytest.raises(errors.CommitConflictError, match="wrote real buckets"):
        table.compact()
    # Void: its files are gone, the rows it would have moved still wait.
    written = {p for p in (tmp_path / "db.db" / "t" / "dt=a").rglob("*.parquet")} - files_before
    assert all(p.parent.name == "bucket-postpone" or p.name in {e.file.file_name for e in _entries(table)}
               for p in written)
    assert _rows_of(table) == {("a", 0): "v0", ("a", 1): "v0", ("a", 2): "batch", ("a", 3): "v0"}
    compacted = table.compact()  # a postpone append meanwhile is no conflict
    assert compacted is not None and compacted.commit_kind is CommitKind.COMPACT
    assert _rows_of(table) == {("a", 0): "v0", ("a", 1): "v1", ("a", 2): "v1", ("a", 3): "v0"}
    table.compact()
    assert _rows_of(table) == {("a", 0): "v0", ("a", 1): "v1", ("a", 2): "v1", ("a", 3): "postponed"}


def test_a_failed_flush_leaves_no_file_and_commits_everything_when_retried(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path, **{"postpone.default-bucket-num": "2"})
    real = data_file.write
    failures = ["dt=b"]

    def failing(file_io: object, bucket_dir: str, *args: object, **kwargs: object) -> object:
        if failures and failures[0] in bucket_dir:
            failures.pop()
            raise errors.StorageError("the store failed", file=bucket_dir)
        return real(file_io, bucket_dir, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(data_file, "write", failing)
    with table.writer(commit_user="job") as writer:
        writer.write(pa.concat_tables([_rows("a", range(50), "v"), _rows("b", range(50), "v")]))
        with pytest.raises(errors.StorageError):
            writer.commit(1)
        assert not list(tmp_path.rglob("*.parquet"))  # partition a's file went with the failure
        assert len(writer.commit(1)) == 1
    assert {e.file.row_count for e in _entries(table)} == {50}
    table.compact()
    assert len(_rows_of(table)) == 100


ENGINES = {
    "deduplicate": ({}, {1: (100, None), 2: (1, 5), 3: (3, None)}),
    "deletion-vectors": ({"deletion-vectors.enabled": "true", "changelog-producer": "lookup"},
                         {1: (100, None), 2: (1, 5), 3: (3, None)}),
    "first-row": ({"merge-engine": "first-row"}, {1: (1, None), 2: (1, 5), 3: (3, None)}),
    "partial-update": ({"merge-engine": "partial-update"}, {1: (100, 7), 2: (1, 5), 3: (3, None)}),
    "aggregation": ({"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                     "fields.b.aggregate-function": "sum"}, {1: (111, 7), 2: (1, 5), 3: (3, None)}),
}


@pytest.mark.parametrize("engine", ENGINES)
def test_every_merge_engine_merges_postponed_rows_with_real_buckets(tmp_path: Path, engine: str) -> None:
    options, expected = ENGINES[engine]
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("a", pa.int64()),
                        pa.field("b", pa.int64())])
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.m", schema, primary_keys=["k"], options={"bucket": "-2", "postpone.default-bucket-num": "2", **options})
    table.write(pa.table({"k": [1, 2], "a": [1, 1], "b": [None, 5]}, schema=schema))  # into real buckets
    with table.writer() as writer:
        writer.write(pa.table({"k": [1, 3], "a": [10, 3], "b": [7, None]}, schema=schema))
        writer.commit(1)
        writer.write(pa.table({"k": [1], "a": [100], "b": [None]}, schema=schema))
        writer.commit(2)
    table.compact()
    assert {r["k"]: (r["a"], r["b"]) for r in table.scan().to_arrow().to_pylist()} == expected


def test_a_streams_first_full_read_keeps_the_row_kinds_of_postpone_files(tmp_path: Path) -> None:
    """Without a producer, Paimon's streams read bucket-postpone/ with its no-merge reader, in the
    first full read too: a delete waiting there is a -D, not a row of the table."""
    table = _table(tmp_path, **{"postpone.default-bucket-num": "2"})
    table.write(_rows("a", [7], "real"))  # a merged row of a real bucket: +I
    with table.writer() as writer:
        writer.write(_rows("a", [1, 2], "v"))
        writer.write(_rows("a", [1], "v", "-D"))
        writer.commit(1)
    got = [(r["rowkind"], r["k"]) for b in table.stream() for r in b.data.to_pylist()]
    assert got == [("+I", 7), ("+I", 1), ("+I", 2), ("-D", 1)]
    assert [(r["rowkind"], r["k"]) for b in table.stream(mode="latest") for r in b.data.to_pylist()] == []
