"""Append tables (no primary key) through the public API: create, write (one-shot and
long-lived writers, exactly once), read in write order with time travel and tags, change
streams of +I rows, compaction, maintenance, schema evolution and refusals."""

from __future__ import annotations

import datetime as dt
import itertools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.errors import OptionError, RowKindError
from changelake.table import context as table_context
from changelake.table.format import data_file
from changelake.table.read import live_files

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string()), ("dt", pa.string())])


def _rows(ids: list[int], dt: str = "a") -> pa.Table:
    return pa.table({"id": ids, "v": [f"v{i}" for i in ids], "dt": [dt] * len(ids)}, schema=SCHEMA)


def _files(table: cl.Table) -> pa.Table:
    return table.system("files")


@pytest.fixture
def catalog(tmp_path: object) -> cl.Catalog:
    return cl.Catalog(str(tmp_path))


def test_unaware_table_keeps_write_order_across_many_files(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["dt"])
    assert table.primary_keys == [] and "bucket" not in table.options  # -1, stored as Paimon stores it: not at all
    for start in range(0, 30, 3):
        table.write(pa.concat_tables([_rows([start, start + 1, start + 2], "a"), _rows([100 + start], "b")]))
    by_dt = table.scan(filter=pa.compute.field("dt") == "a").to_arrow()
    assert by_dt.column("id").to_pylist() == list(range(30))
    assert table.scan(columns=["id"]).to_arrow().num_rows == 40
    # Paimon's layout: bucket-0 with total buckets -1, plain columns, empty keys, level 0
    files = _files(table)
    assert set(files.column("bucket").to_pylist()) == {0}
    assert set(files.column("level").to_pylist()) == {0}
    location = table.location
    path = f"{location}/dt=a/bucket-0/{files.column('file_path').to_pylist()[0].rsplit('/', 1)[-1]}"
    assert pq.read_schema(path).names == ["id", "v", "dt"]
    # time travel: snapshot 3 holds the first three writes
    assert table.scan(snapshot_id=3).to_arrow().num_rows == 12


def test_fixed_buckets_hash_bucket_key_and_keep_order_per_bucket(catalog: cl.Catalog) -> None:
    spread = catalog.create_table("db.f", SCHEMA, options={"bucket": "3", "bucket-key": "id", "write-only": "true"})
    one = catalog.create_table("db.o", SCHEMA, options={"bucket": "3", "bucket-key": "dt", "write-only": "true"})
    for start in range(0, 20, 4):
        spread.write(_rows(list(range(start, start + 4))))
        one.write(_rows(list(range(start, start + 4))))
    assert sorted(spread.scan().to_arrow().column("id").to_pylist()) == list(range(20))
    assert len(set(_files(spread).column("bucket").to_pylist())) == 3
    # every row in one bucket (one bucket-key value): five files read back in write order
    assert len(set(_files(one).column("bucket").to_pylist())) == 1 and _files(one).num_rows == 5
    assert one.scan().to_arrow().column("id").to_pylist() == list(range(20))


def test_long_lived_writer_commits_each_identifier_once(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.w", SCHEMA)
    with table.writer("stream-1") as writer:
        writer.write(_rows([1, 2]))
        assert len(writer.commit(1)) == 1
        writer.write(_rows([3]))
        assert writer.commit(1) == []  # a replayed identifier lands nothing
        writer.write(_rows([4]))
        writer.commit(2)
    with table.writer("stream-1") as again:  # a restarted writer with the same user
        again.write(_rows([5]))
        assert again.commit(2) == []
    assert table.scan().to_arrow().column("id").to_pylist() == [1, 2, 4]


def test_change_streams_see_appends_as_inserts(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.s", SCHEMA, options={"bucket": "2", "bucket-key": "id"})
    table.write(_rows([1, 2, 3]))
    table.write(_rows([4]))
    table.write(_rows([5, 6]))
    seen = pa.concat_tables([batch.data for batch in table.stream(mode="latest-full")])
    assert set(seen.column("rowkind").to_pylist()) == {"+I"}
    assert sorted(seen.column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]
    changes = table.changes(1, 3).to_arrow()
    assert sorted(changes.column("id").to_pylist()) == [4, 5, 6]
    assert set(changes.column("rowkind").to_pylist()) == {"+I"}
    audit = table.system("audit_log")
    assert sorted(audit.column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]


def test_unaware_compaction_joins_small_files_as_paimon(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.c", SCHEMA, partition_keys=["dt"],
                                 options={"compaction.min.file-num": "3", "compaction.max.file-num": "4"})
    for i in range(9):
        table.write(_rows([i], "a"))
    table.write(_rows([100], "b"))
    compacted = table.compact()
    assert compacted is not None and compacted.commit_kind is cl.CommitKind.COMPACT
    # max 4 files per bin: two bins of 4 in dt=a; the ninth file and dt=b wait
    files = _files(table)
    assert files.num_rows == 2 + 1 + 1
    assert table.scan(filter=pa.compute.field("dt") == "a").to_arrow().column("id").to_pylist() == list(range(9))
    full = table.compact(full=True)
    assert full is not None
    assert _files(table).num_rows == 2
    assert table.compact() is None  # nothing left to join
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [*range(9), 100]
    # streams read the appends once: COMPACT snapshots add no change
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.changes(0, latest.id).to_arrow()
    assert sorted(changes.column("id").to_pylist()) == [*range(9), 100]
    streamed = pa.concat_tables([b.data for b in table.stream(mode="from-snapshot", snapshot_id=1)])
    assert sorted(streamed.column("id").to_pylist()) == [*range(9), 100]


def test_fixed_bucket_writer_compacts_adjacent_files_after_commit(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.b", SCHEMA, options={"bucket": "1", "bucket-key": "id",
                                                           "compaction.max.file-num": "3"})
    kinds = [[s.commit_kind for s in (table.write(_rows([i])),) if s is not None] for i in range(3)]
    assert kinds == [[cl.CommitKind.APPEND]] * 3
    snapshots = table.snapshots()
    assert snapshots[-1].commit_kind is cl.CommitKind.COMPACT  # the third commit compacted three files
    assert _files(table).num_rows == 1
    assert table.scan().to_arrow().column("id").to_pylist() == [0, 1, 2]


def test_maintenance_and_schema_evolution(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.m", SCHEMA, options={"snapshot.num-retained.min": "1"})
    table.write(_rows([1]))
    table.create_tag("first")
    table.write(_rows([2]))
    table.write(_rows([3]))
    assert table.scan(tag="first").to_arrow().column("id").to_pylist() == [1]
    table.rollback_to(snapshot_id=2)
    assert table.scan().to_arrow().column("id").to_pylist() == [1, 2]
    with table.update_schema() as update:
        update.add_column("extra", pa.int32())
    table.write(pa.table({"id": [4], "v": ["x"], "dt": ["a"], "extra": [7]}))
    rows = table.scan().to_arrow()
    assert rows.column("extra").to_pylist() == [None, None, 7]
    table.expire_snapshots(retain_max=1, retain_min=1)
    assert table.scan().to_arrow().column("id").to_pylist() == [1, 2, 4]
    assert table.scan(tag="first").to_arrow().column("id").to_pylist() == [1]
    assert table.remove_orphan_files(older_than=dt.timedelta(0)) == []


@pytest.mark.parametrize(("options", "option"), [
    ({"merge-engine": "aggregation"}, "merge-engine"),
    ({"changelog-producer": "input"}, "changelog-producer"),
    ({"sequence.field": "id"}, "sequence.field"),
    ({"fields.v.aggregate-function": "max"}, "fields.v.aggregate-function"),
    ({"bucket": "4"}, "bucket-key"),
    ({"bucket-key": "id"}, "bucket-key"),
    ({"bucket": "0"}, "bucket"),
    ({"full-compaction.delta-commits": "2"}, "full-compaction.delta-commits"),
])
def test_definitions_only_primary_key_tables_take_are_refused(catalog: cl.Catalog, options: dict[str, str],
                                                             option: str) -> None:
    with pytest.raises(OptionError) as raised:
        catalog.create_table("db.r", SCHEMA, primary_keys=[], options=options)
    assert option in str(raised.value) and "db.r" in str(raised.value)
    assert "db" not in catalog.list_databases() or catalog.list_tables("db") == []


def test_altering_an_append_table_refuses_primary_key_options(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.a", SCHEMA)
    with pytest.raises(OptionError, match="merge-engine"):
        table.set_options({"merge-engine": "partial-update"})
    table.set_options({"target-file-size": "64 mb"})
    assert table.options["target-file-size"] == "64 mb"


def test_retractions_are_refused_and_write_nothing(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.k", SCHEMA)
    bad = _rows([1, 2]).append_column("rowkind", pa.array(["+I", "-D"]))
    with pytest.raises(RowKindError, match="-D") as raised:
        table.write(bad)
    assert "db.k" in str(raised.value)
    assert table.latest_snapshot() is None
    good = _rows([1, 2]).append_column("rowkind", pa.array(["+I", "+U"]))
    table.write(good)
    assert table.scan().to_arrow().column("id").to_pylist() == [1, 2]


def test_read_optimized_reads_every_file_of_an_append_table(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.ro", SCHEMA)
    table.write(_rows([1, 2]))
    table.write(_rows([3]))
    assert table.scan(read_optimized=True).to_arrow().column("id").to_pylist() == [1, 2, 3]
    assert table.system("ro").column("id").to_pylist() == [1, 2, 3]


def test_a_write_whose_file_fails_leaves_nothing(catalog: cl.Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    table = catalog.create_table("db.x", SCHEMA, partition_keys=["dt"])
    table.write(_rows([0], "a"))
    real = data_file.write
    calls = 0

    def failing(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise cl.errors.StorageError("the store failed", file="data-x.parquet")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(data_file, "write", failing)
    before = sorted(p.name for p in Path(table.location).rglob("*.parquet"))
    with table.writer("w") as writer:
        writer.write(pa.concat_tables([_rows([1, 2], "a"), _rows([3], "b"), _rows([4], "c")]))
        with pytest.raises(cl.errors.StorageError):
            writer.commit(1)
        assert sorted(p.name for p in Path(table.location).rglob("*.parquet")) == before
        monkeypatch.setattr(data_file, "write", real)
        writer.commit(1)  # the rows stayed buffered: committing again lands them
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4]


def test_files_are_laid_out_as_paimon_append_files(catalog: cl.Catalog) -> None:
    """A writer flushing at write-buffer-size writes many files per bucket: each holds the
    table's columns only, empty keys, level 0, and sequence numbers that continue the bucket's
    in write order, across writers and commits."""
    table = catalog.create_table("db.l", SCHEMA, options={"bucket": "2", "bucket-key": "id", "write-only": "true",
                                                          "write-buffer-size": "1 kb"})
    with table.writer("w") as writer:
        for start in range(0, 400, 50):
            writer.write(_rows(list(range(start, start + 50))))
        writer.commit(1)
    table.write(_rows(list(range(400, 450))))
    ctx = table.context
    latest = table.latest_snapshot()
    assert latest is not None
    by_bucket = live_files.files_by_bucket(live_files.live_entries(ctx, latest))
    assert sorted(bucket for _, bucket in by_bucket) == [0, 1]
    empty = data_file.EMPTY_STATS
    for (partition, bucket), files in by_bucket.items():
        assert len(files) > 2
        files.sort(key=lambda f: f.min_sequence_number)
        assert files[0].min_sequence_number == 0
        for before, after in itertools.pairwise(files):
            assert after.min_sequence_number == before.max_sequence_number + 1
        for f in files:
            assert f.max_sequence_number - f.min_sequence_number + 1 == f.row_count
            assert (f.level, f.min_key, f.max_key, f.key_stats, f.delete_row_count) == \
                (0, empty.min_values, empty.max_values, empty, 0)
            path = f"{ctx.bucket_dir(partition, bucket)}/{f.file_name}"
            assert pq.read_schema(path).names == ["id", "v", "dt"]
        ids = [i for f in files for i in pq.read_table(f"{ctx.bucket_dir(partition, bucket)}/{f.file_name}")
               .column("id").to_pylist()]
        assert ids == sorted(ids)  # write order kept within the bucket
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(450))


def test_reads_of_partition_columns_only_count_every_row(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.pc", SCHEMA, partition_keys=["dt"])
    table.write(_rows([1, 2], "a"))
    table.write(_rows([3], "a"))
    table.write(_rows([4], "b"))
    assert table.scan(columns=["dt"]).to_arrow().column("dt").to_pylist() == ["a", "a", "a", "b"]
    assert table.scan(columns=[]).to_arrow().num_rows == 4
    only = catalog.create_table("db.only", pa.schema([("dt", pa.string())]), partition_keys=["dt"])
    only.write(pa.table({"dt": ["x", "y", "x"]}))
    assert sorted(only.scan().to_arrow().column("dt").to_pylist()) == ["x", "x", "y"]


def test_racing_writers_of_one_bucket_read_back_in_commit_order(catalog: cl.Catalog) -> None:
    """Two writers flush into the same bucket before either commits: both number their rows
    from the same committed maximum, and the committer renumbers the later commit's files (in
    the manifest: the files hold no numbers), so the bucket reads back in commit order."""
    table = catalog.create_table("db.race", SCHEMA, options={"bucket": "1", "bucket-key": "id", "write-only": "true",
                                                             "write-buffer-size": "1 kb"})
    table.write(_rows([0]))
    first, second = table.writer("a"), table.writer("b")
    first.write(_rows(list(range(100, 160))))  # flushed past the buffer: numbered now
    second.write(_rows(list(range(200, 260))))
    second.commit(1)
    first.commit(1)
    first.close()
    second.close()
    assert table.scan().to_arrow().column("id").to_pylist() == [0, *range(200, 260), *range(100, 160)]
    latest = table.latest_snapshot()
    assert latest is not None
    files = sorted(live_files.live_entries(table.context, latest), key=lambda e: e.file.min_sequence_number)
    ranges = [(e.file.min_sequence_number, e.file.max_sequence_number) for e in files]
    assert all(after[0] > before[1] for before, after in itertools.pairwise(ranges))


@pytest.mark.parametrize("options", [{}, {"bucket": "2", "bucket-key": "id"}], ids=["unaware", "fixed"])
def test_a_null_partition_value_is_paimons_default_partition(catalog: cl.Catalog, options: dict[str, str]) -> None:
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["dt"], options=options)
    table.write(pa.table({"id": [1, 2, 3], "v": ["x", "y", "z"], "dt": ["a", None, None]}))
    assert sorted(os.listdir(table.location)) == ["dt=__DEFAULT_PARTITION__", "dt=a", "manifest", "schema", "snapshot"]
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "x", "dt": "a"}, {"id": 2, "v": "y", "dt": None}, {"id": 3, "v": "z", "dt": None}]
    assert table.scan(filter=pc.field("dt").is_null()).to_arrow().column("id").to_pylist() == [2, 3]


def test_inspect_shows_files_in_write_order_and_the_small_files_a_compaction_joins(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, options={"target-file-size": "4 kb",
                                                          "compaction.min.file-num": "3"})
    for i in range(7):
        table.write(_rows([i]))
    bucket = table.inspect().bucket(0)
    assert [f.min_sequence for f in bucket.files] == list(range(7))  # each file its own run, in write order
    assert len(bucket.runs) == 7
    assert bucket.pending.rule.value == "small-files" and "joined in write order" in bucket.pending.reason
    picked = set(bucket.pending.files)
    assert len(picked) == 6 and picked <= {f.name for f in bucket.files}
    table.compact()
    after = table.inspect().bucket(0)
    assert len(after.files) == 2 and after.pending.rule.value == "none"


def test_every_append_write_rolls_files_at_the_append_default_target(catalog: cl.Catalog,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``target-file-size`` an append table's files roll at Paimon's append default
    (256 MB; shrunk here to roll at every 1024-row piece) in writes, deletes and overwrites
    alike, not at the primary-key tables' 128 MB."""
    table = catalog.create_table("db.t", SCHEMA)
    table.write(_rows(list(range(3000))))
    assert _files(table).num_rows == 1
    monkeypatch.setattr(table_context, "APPEND_TARGET_FILE_SIZE", 1)
    table = catalog.get_table("db.t")  # a context's file settings are worked out once
    table.delete("id = 0")  # rewrites the file: 2999 rows
    assert sorted(_files(table)["record_count"].to_pylist()) == [951, 1024, 1024]
    table.overwrite(_rows(list(range(2500))))
    assert sorted(_files(table)["record_count"].to_pylist()) == [452, 1024, 1024]
    table.write(_rows([1]))
    assert _files(table).num_rows == 4
