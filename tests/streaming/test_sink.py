"""The Spark sink: exactly-once micro-batches written on the executors, with the table's merge
engine, compaction and lookup changelog, timestamps cast as Spark casts them, and clear errors
that commit nothing."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake import streaming
from changelake.errors import SchemaMismatchError
from changelake.table.read.live_files import live_entries

SCHEMA = pa.schema([
    pa.field("dt", pa.string(), nullable=False),
    pa.field("id", pa.int64(), nullable=False),
    pa.field("v", pa.int32()),
    pa.field("name", pa.string()),
])
SPARK_SCHEMA = "rowkind string, dt string, id long, v int, name string"


def make_table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "2", **options})


def rows_of(table: cl.Table, snapshot_id: int | None = None) -> dict[tuple[str, int], tuple[Any, Any]]:
    data = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return {(r["dt"], r["id"]): (r["v"], r["name"]) for r in data}


def events(batch: int) -> list[dict[str, Any]]:
    """Batch ``batch`` of a change feed: new keys, updates of earlier keys, deletes."""
    out = [{"rowkind": "+I", "dt": f"d{i % 3}", "id": batch * 100 + i, "v": batch, "name": f"n{i}"} for i in range(40)]
    if batch:
        out += [{"rowkind": "+U", "dt": f"d{i % 3}", "id": (batch - 1) * 100 + i, "v": -batch, "name": None}
                for i in range(0, 40, 4)]
        out += [{"rowkind": "-D", "dt": f"d{i % 3}", "id": (batch - 1) * 100 + i, "v": None, "name": None}
                for i in range(1, 40, 10)]
    return out


def model(batches: int) -> dict[tuple[str, int], tuple[Any, Any]]:
    state: dict[tuple[str, int], tuple[Any, Any]] = {}
    for b in range(batches):
        for e in events(b):
            key = (e["dt"], e["id"])
            if e["rowkind"] == "-D":
                state.pop(key, None)
            else:
                state[key] = (e["v"], e["name"])
    return state


@pytest.mark.parametrize("buckets", [{"bucket": "2"}, {"bucket": "-1", "dynamic-bucket.target-row-num": "10"}],
                         ids=["fixed", "dynamic"])
def test_a_streaming_query_writes_each_batch_once_across_restarts(spark: Any, tmp_path: Path,
                                                                  buckets: dict[str, str]) -> None:
    """(Dynamic buckets: each micro-batch extends the HASH index the previous one committed.)"""
    table = make_table(tmp_path, **{"changelog-producer": "lookup", **buckets})
    source = tmp_path / "in"
    source.mkdir()
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> Any:
        df = spark.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        query = streaming.write_stream(df, str(table.location), checkpoint_location=checkpoint,
                                       trigger={"availableNow": True})
        query.awaitTermination()
        return query

    def add(b: int) -> None:
        path = source / f"batch-{b}.json"
        path.write_text("\n".join(json.dumps(e) for e in events(b)))
        os.utime(path, (1_000_000 + b, 1_000_000 + b))  # the file source reads in modification order

    for b in range(3):
        add(b)
    first = run()
    assert rows_of(table) == model(3)
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    # The query id (stable across restarts) commits, with the batch ids as identifiers.
    assert {s.commit_user for s in appends} == {first.id}
    assert [s.commit_identifier for s in appends] == [0, 1, 2]
    # Lookup changelog, made on the executors, lands with each batch (COMPACT, same identifier).
    carrying = [s for s in table.snapshots() if s.changelog_manifest_list is not None]
    assert [s.commit_identifier for s in carrying] == [0, 1, 2]
    changes = table.changes(0, table.latest_snapshot().id).to_arrow()
    kinds = changes.column("rowkind").value_counts().to_pylist()
    assert {k["values"]: k["counts"] for k in kinds} == {"+I": 120, "-U": 20, "+U": 20, "-D": 8}

    # Restart from the checkpoint with more input: only the new batch lands.
    add(3)
    second = run()
    assert second.id == first.id
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    assert [s.commit_identifier for s in appends] == [0, 1, 2, 3]
    assert rows_of(table) == model(4)
    assert table.scan().to_arrow().num_rows == len(model(4))  # no key in two buckets
    if buckets["bucket"] == "-1":
        assert len({e.bucket for e in live_entries(table.context, table.latest_snapshot())}) >= 3  # type: ignore[arg-type]


def test_a_replayed_batch_commits_nothing(spark: Any, tmp_path: Path) -> None:
    table = make_table(tmp_path)
    sink = streaming.ForeachBatchSink(table, commit_user="job")
    sink(spark.createDataFrame(events(0), SPARK_SCHEMA), 7)
    before = table.latest_snapshot()
    files = sorted(p.name for p in Path(table.location).rglob("*.parquet"))
    # Spark replays the batch after a crash between our commit and its commit log.
    sink(spark.createDataFrame(events(0), SPARK_SCHEMA), 7)
    assert table.latest_snapshot() == before
    assert sorted(p.name for p in Path(table.location).rglob("*.parquet")) == files
    sink(spark.createDataFrame(events(1), SPARK_SCHEMA), 8)
    assert rows_of(table) == model(2)


def test_a_batch_replayed_after_its_snapshot_expired_commits_nothing(spark: Any, tmp_path: Path) -> None:
    """A crash after our commit, before Spark's commit log; other writers' commits expire the
    batch's snapshot; the restarted query replays the batch, which lands nothing."""
    table = make_table(tmp_path, **{"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1",
                                    "merge-engine": "aggregation", "fields.v.aggregate-function": "sum"})
    sink = streaming.ForeachBatchSink(table, commit_user="job")
    sink(spark.createDataFrame(events(0), SPARK_SCHEMA), 7)
    for i in range(3):
        table.write(pa.table({"dt": ["d9"], "id": [i], "v": [1], "name": ["other"]}))
    assert "job" not in {s.commit_user for s in table.snapshots()}
    before, rows = table.latest_snapshot(), rows_of(table)
    sink(spark.createDataFrame(events(0), SPARK_SCHEMA), 7)
    assert table.latest_snapshot() == before
    assert rows_of(table) == rows  # landing again would have doubled every sum


def test_spark_writes_continue_the_sequence_of_other_writers(spark: Any, tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"merge-engine": "partial-update"})
    table.write(pa.table({"dt": ["d0", "d1"], "id": [1, 2], "v": [10, 20], "name": ["a", "b"]}))
    df = spark.createDataFrame([("d0", 1, None, "x"), ("d1", 2, 21, None)], "dt string, id long, v int, name string")
    df = df.repartition(3)  # several input partitions: rows are shuffled to their bucket's task
    snapshot = streaming.write(df, str(table.location))
    assert snapshot is not None and snapshot.commit_kind is cl.CommitKind.APPEND
    # The later commit wins, field by field for partial-update.
    assert rows_of(table) == {("d0", 1): (10, "x"), ("d1", 2): (21, "b")}
    table.write(pa.table({"dt": ["d0"], "id": [1], "v": [11], "name": [None]}))
    assert rows_of(table)[("d0", 1)] == (11, "x")
    assert streaming.write(spark.createDataFrame([], "dt string, id long, v int, name string"), table) is None


def test_bad_batches_fail_clearly_and_commit_nothing(spark: Any, tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.write(pa.table({"dt": ["d0"], "id": [1], "v": [1], "name": ["a"]}))
    latest = table.latest_snapshot()
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['name'\]"):
        streaming.write(spark.createDataFrame([("d0", 2, 2)], "dt string, id long, v int"), table)
    with pytest.raises(SchemaMismatchError, match="not in the table"):
        streaming.write(spark.createDataFrame([("d0", 2, 2, "b", 1)], "dt string, id long, v int, name string, x int"),
                        table)
    # Caught in the tasks: a null primary key, a value that does not fit the column.
    with pytest.raises(Exception, match="primary-key column 'id' has 1 null values"):
        streaming.write(spark.createDataFrame([("d0", None, 2, "b")], "dt string, id long, v int, name string"), table)
    with pytest.raises(Exception, match="does not cast safely"):
        streaming.write(spark.createDataFrame([("d0", 3, 2**40, "b")], "dt string, id long, v long, name string"),
                        table)
    assert table.latest_snapshot() == latest


@pytest.mark.parametrize("assigners", ["1", "2"])
def test_spark_writes_dynamic_bucket_tables_with_each_key_in_one_bucket(spark: Any, tmp_path: Path,
                                                                        assigners: str) -> None:
    """Rows spread over several Spark tasks: each (partition, assigner) is written by one task,
    which opens only its assigner's buckets; batches after the first find the keys where the
    HASH index put them."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.dyn", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"dynamic-bucket.target-row-num": "20", "dynamic-bucket.assigner-parallelism": assigners})
    state: dict[tuple[str, int], tuple[Any, Any]] = {}
    for batch in range(3):
        rows = [(f"d{i % 2}", batch * 50 + i, batch, f"n{i}") for i in range(100)]  # 50 updates, 50 new
        streaming.write(spark.createDataFrame(rows, "dt string, id long, v int, name string").repartition(3), table)
        state.update({(dt_, id_): (v, name) for dt_, id_, v, name in rows})
        scanned = table.scan().to_arrow()
        assert scanned.num_rows == len(state)  # a key in two buckets would be read twice
        assert rows_of(table) == state
    entries = live_entries(table.context, table.latest_snapshot())  # type: ignore[arg-type]
    buckets = {e.bucket for e in entries}
    assert len(buckets) >= 5 and all(e.total_buckets == -1 for e in entries)
    if assigners == "2":
        assert {b % 2 for b in buckets} == {0, 1}


def test_spark_moves_cross_partition_keys_with_each_key_in_one_partition(spark: Any, tmp_path: Path) -> None:
    """A primary key without the partition column: rows of one key in several partitions and
    Spark tasks meet in their assigner's task (two assigners), which deletes the key where the
    key index (bootstrapped from the table every batch) says it lives; both assigners open
    buckets of their own."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.cross", SCHEMA, primary_keys=["id"], partition_keys=["dt"],
        options={"dynamic-bucket.target-row-num": "15", "dynamic-bucket.assigner-parallelism": "2"})
    state: dict[int, tuple[Any, ...]] = {}
    for batch in range(3):
        # 60 keys, each in a partition picked by the batch: most keys move every batch, and
        # keys 0-9 come twice, in two partitions (in an order the shuffle picks: either wins).
        rows = [(f"d{(i + batch) % 3}", i, batch, f"n{i}") for i in range(60)]
        twice = [(f"d{(i + batch + 1) % 3}", i, batch * 10, f"m{i}") for i in range(10)]
        df = spark.createDataFrame(rows + twice, "dt string, id long, v int, name string").repartition(3)
        streaming.write(df, table)
        state.update({id_: (dt_, v, name) for dt_, id_, v, name in rows})
        scanned = table.scan().to_arrow().to_pylist()
        assert len(scanned) == len(state)  # a key in two partitions would be read twice
        got = {r["id"]: (r["dt"], r["v"], r["name"]) for r in scanned}
        for dt_, id_, v, name in twice:
            assert got[id_] in (state[id_], (dt_, v, name))
            state[id_] = got[id_]
        assert got == state
    buckets = {e.bucket for e in live_entries(table.context, table.latest_snapshot())}  # type: ignore[arg-type]
    assert {b % 2 for b in buckets} == {0, 1}


def test_an_evolved_table_is_written_and_read_through_spark(spark: Any, tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.write(pa.table({"dt": ["d0"], "id": [1], "v": [1], "name": ["a"]}))
    with table.update_schema() as update:
        update.add_column("score", pa.float64())
        update.rename_column("name", "label")
    df = spark.createDataFrame([("d0", 2, 2, "b", 0.5)], "dt string, id long, v int, label string, score double")
    streaming.write(df, str(table.location))  # opened afresh: the new schema
    streaming.register(spark)
    got = spark.read.format("changelake").load(table.location).toArrow().sort_by("id").to_pylist()
    # The old file is read by field id: its name under the new label, no score.
    assert got == [{"dt": "d0", "id": 1, "v": 1, "label": "a", "score": None},
                   {"dt": "d0", "id": 2, "v": 2, "label": "b", "score": 0.5}]


@pytest.fixture
def new_york(spark: Any) -> Iterator[None]:
    """The session time zone America/New_York for one test, restored after it."""
    key = "spark.sql.session.timeZone"
    before = spark.conf.get(key)
    spark.conf.set(key, "America/New_York")
    yield
    spark.conf.set(key, before)


def test_timestamps_cross_flavours_in_the_session_time_zone(spark: Any, tmp_path: Path, new_york: None) -> None:
    schema = pa.schema([
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ntz", pa.timestamp("us")),  # Paimon TIMESTAMP: a wall-clock time
        pa.field("ltz", pa.timestamp("us", tz="UTC")),  # Paimon TIMESTAMP_LTZ: an instant
        pa.field("ntzs", pa.list_(pa.timestamp("us"))),
        pa.field("event", pa.struct([pa.field("at", pa.timestamp("us")), pa.field("seen", pa.timestamp("us", "UTC"))])),
    ])
    table = cl.Catalog(str(tmp_path)).create_table("db.ts", schema, primary_keys=["id"], options={"bucket": "2"})
    # Spark's TIMESTAMP is an instant shown in the session zone, TIMESTAMP_NTZ a wall-clock time:
    # written across, each is cast as Spark's CAST does, in the session zone (EST in January,
    # EDT in July).
    df = spark.sql("""
        SELECT id, TIMESTAMP '2024-01-15 12:00:00' AS ntz, TIMESTAMP_NTZ '2024-07-15 12:00:00' AS ltz,
               array(TIMESTAMP '2024-07-15 12:00:00') AS ntzs,
               named_struct('at', TIMESTAMP '2024-01-15 12:00:00', 'seen', TIMESTAMP_NTZ '2024-01-15 12:00:00') AS event
        FROM range(3)""")
    streaming.write(df, table)
    january, july = dt.datetime(2024, 1, 15, 12), dt.datetime(2024, 7, 15, 12)
    expected = {"ntz": january, "ltz": dt.datetime(2024, 7, 15, 16, tzinfo=dt.UTC), "ntzs": [july],
                "event": {"at": january, "seen": dt.datetime(2024, 1, 15, 17, tzinfo=dt.UTC)}}
    assert table.scan().to_arrow().sort_by("id").to_pylist() == [{"id": i, **expected} for i in range(3)]
    # Read back through Spark: the same wall-clock times (TIMESTAMP columns in the session zone).
    streaming.register(spark)
    back = spark.read.format("changelake").load(table.location).selectExpr(
        "CAST(ntz AS STRING)", "CAST(ltz AS STRING)", "CAST(ntzs[0] AS STRING)", "CAST(event.at AS STRING)",
        "CAST(event.seen AS STRING)").distinct().collect()
    assert [tuple(r) for r in back] == [("2024-01-15 12:00:00", "2024-07-15 12:00:00", "2024-07-15 12:00:00",
                                         "2024-01-15 12:00:00", "2024-01-15 12:00:00")]


def test_a_postpone_bucket_table_takes_batches_once_and_reads_them_once_compacted(spark: Any,
                                                                                   tmp_path: Path) -> None:
    """``bucket = -2``: every task writes its rows into bucket-postpone/ as a writer of its own
    (no shuffle to buckets), a replayed batch lands nothing, readers see the rows once a
    compaction moved them into real buckets."""
    streaming.register(spark)
    table = make_table(tmp_path, bucket="-2", **{"postpone.default-bucket-num": "3"})
    sink = streaming.ForeachBatchSink(table, commit_user="job")
    sink(spark.createDataFrame(events(0), SPARK_SCHEMA).repartition(3), 0)
    first = table.latest_snapshot()
    assert first is not None and first.commit_kind is cl.CommitKind.APPEND
    postpone_files = [p for p in Path(table.location).rglob("*.parquet") if p.parent.name == "bucket-postpone"]
    writers = {p.name.rsplit("-w-", 1)[0] for p in postpone_files}
    assert len(writers) > 1 and all(w.startswith("data--u-job-s-") for w in writers)
    assert spark.read.format("changelake").load(table.location).count() == 0
    sink(spark.createDataFrame(events(0), SPARK_SCHEMA).repartition(3), 0)  # replayed after a crash
    assert table.latest_snapshot() == first
    table.compact()
    sink(spark.createDataFrame(events(1), SPARK_SCHEMA).repartition(2), 1)
    assert rows_of(table) == model(1)
    table.compact()
    got = spark.read.format("changelake").load(table.location).toArrow().to_pylist()
    assert {(r["dt"], r["id"]): (r["v"], r["name"]) for r in got} == model(2) == rows_of(table)
    assert {b.bucket for b in table.inspect().buckets} <= {0, 1, 2}  # three real buckets a partition


def test_a_batch_write_puts_a_postpone_bucket_tables_rows_in_real_buckets(spark: Any, tmp_path: Path) -> None:
    """``streaming.write`` of a postpone-bucket table (``postpone.batch-write-fixed-bucket``, the
    default) writes real buckets as Paimon's batch writers do: readers see the rows at once; a
    new partition gets ``postpone.default-bucket-num`` buckets (else buckets for its size), a
    partition that has buckets keeps their number; ``false`` leaves the rows in bucket-postpone/."""
    table = make_table(tmp_path, bucket="-2", **{"postpone.default-bucket-num": "3"})
    first = [e for e in events(0) if e["dt"] != "d2"]

    def applied(changes: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[Any, Any]]:
        state: dict[tuple[str, int], tuple[Any, Any]] = {}
        for e in changes:
            if e["rowkind"] == "-D":
                state.pop((e["dt"], e["id"]), None)
            else:
                state[(e["dt"], e["id"])] = (e["v"], e["name"])
        return state

    streaming.write(spark.createDataFrame(first, SPARK_SCHEMA).repartition(3), table)
    assert rows_of(table) == applied(first)
    assert not list(Path(table.location).rglob("bucket-postpone"))
    table.set_options({"postpone.default-bucket-num": "5"})
    streaming.write(spark.createDataFrame(events(1), SPARK_SCHEMA).repartition(2), table)
    assert rows_of(table) == applied(first + events(1))
    entries = live_entries(table.context, table.latest_snapshot())  # type: ignore[arg-type]
    by_dt = {table.context.describe_partition(e.partition): e.total_buckets for e in entries}
    assert by_dt == {"partition {dt=d0}": 3, "partition {dt=d1}": 3, "partition {dt=d2}": 5}
    assert all(e.bucket < e.total_buckets for e in entries)
    table.set_options({"postpone.batch-write-fixed-bucket": "false"})
    streaming.write(spark.createDataFrame(events(2), SPARK_SCHEMA), table)
    assert list(Path(table.location).rglob("bucket-postpone/*.parquet"))
    assert rows_of(table) == applied(first + events(1))  # in bucket-postpone/ until compacted
    table.compact()
    assert rows_of(table) == applied(first + events(1) + events(2))


def test_append_tables_are_written_once_and_read_through_spark(spark: Any, tmp_path: Path) -> None:
    """An unaware and a fixed-bucket append table (no primary key): foreachBatch micro-batches
    land once each (a replay lands nothing), every row is kept (duplicates too), a -D row is
    refused with nothing written, and spark.read / readStream read them back as +I rows."""
    streaming.register(spark)
    catalog = cl.Catalog(str(tmp_path / "warehouse"))
    schema = pa.schema([("dt", pa.string()), ("id", pa.int64()), ("v", pa.int32()), ("name", pa.string())])
    tables = [catalog.create_table("db.u", schema, partition_keys=["dt"]),
              catalog.create_table("db.f", schema, options={"bucket": "2", "bucket-key": "id"})]
    batches = [[{"dt": f"d{i % 2}", "id": b * 10 + i % 5, "v": b, "name": f"n{i}"} for i in range(10)]
               for b in range(3)]
    for table in tables:
        sink = streaming.ForeachBatchSink(table, commit_user="job")
        for b, rows in enumerate(batches):  # in three Spark partitions: several tasks write a bucket
            sink(spark.createDataFrame(rows, "dt string, id long, v int, name string").repartition(3), b)
        before = table.latest_snapshot()
        sink(spark.createDataFrame(batches[2], "dt string, id long, v int, name string"), 2)  # a replay
        assert table.latest_snapshot() == before
        with pytest.raises(Exception, match="append table takes inserts only"):
            sink(spark.createDataFrame([{"rowkind": "-D", "dt": "d0", "id": 1, "v": 0, "name": None}],
                                       "rowkind string, dt string, id long, v int, name string"), 3)
        assert table.latest_snapshot() == before
        appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
        assert [(s.commit_user, s.commit_identifier) for s in appends] == [("job", 0), ("job", 1), ("job", 2)]
        expected = sorted((r["dt"], r["id"], r["v"], r["name"]) for rows in batches for r in rows)
        read = spark.read.format("changelake").load(table.location).toArrow().to_pylist()
        assert sorted((r["dt"], r["id"], r["v"], r["name"]) for r in read) == expected
        ours = table.scan().to_arrow().to_pylist()
        assert sorted((r["dt"], r["id"], r["v"], r["name"]) for r in ours) == expected
        query = (spark.readStream.format("changelake").option("read.changelog", "true").load(table.location)
                 .writeStream
                 .format("memory").queryName(f"append_{table.name.split('.')[1]}").trigger(availableNow=True).start())
        query.awaitTermination()
        streamed = spark.sql(f"select * from append_{table.name.split('.')[1]}").toArrow().to_pylist()
        assert {r["rowkind"] for r in streamed} == {"+I"}
        assert sorted((r["dt"], r["id"], r["v"], r["name"]) for r in streamed) == expected
