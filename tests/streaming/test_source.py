"""The ``changelake`` Spark data source: batch reads (snapshots, tags, a given schema, filters
Spark evaluates, reused DataFrames), streaming changelog reads (scan modes, read.changelog, admission control,
AvailableNow, restarts, consumers), and the errors bad input gets. The reader's offset logic is
driven directly (no Spark job); a few Spark queries show it end to end."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles, ReadMaxRows, ReadMinRows
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

import changelake as cl
from changelake.errors import (
    OffsetError,
    OptionError,
    ScanError,
    SchemaError,
    SnapshotExpiredError,
    TableNotFoundError,
)
from changelake.streaming import register
from changelake.streaming.source import (
    BatchReader,
    ChangelakeDataSource,
    ChangeSplitPartition,
    ChangeStreamReader,
    SplitPartition,
)
from changelake.streaming.spark_schema import struct_type

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
KINDED = SCHEMA.append(pa.field("rowkind", pa.string()))
Rows = list[tuple[Any, ...]]


def _lookup_table(tmp_path: Path) -> cl.Table:
    """Four commits of inserts, updates and deletes; lookup changelog; two partitions."""
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "changelog-producer": "lookup"})
    _commit(table, [("a", k, f"v{k}", "+I") for k in range(6)] + [("b", k, f"w{k}", "+I") for k in range(4)])
    _commit(table, [("a", 1, "v1x", "+I"), ("b", 2, "w2x", "+I"), ("a", 7, "v7", "+I")])
    _commit(table, [("a", 3, None, "-D"), ("b", 0, None, "-D"), ("a", 1, "v1y", "+I")])
    return table


def _commit(table: cl.Table, rows: Rows) -> None:
    p, k, v, kinds = (list(c) for c in zip(*rows, strict=True))
    table.write(pa.table({"p": p, "k": k, "v": v, "rowkind": kinds}, schema=KINDED))


def _source(table: cl.Table, **options: str) -> ChangelakeDataSource:
    return ChangelakeDataSource(CaseInsensitiveDict({"path": str(table.location), **options}))


def _struct(*fields: tuple[Any, ...]) -> StructType:
    return StructType([StructField(*field) for field in fields])


def _rows(table: pa.Table) -> Rows:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _changes(table: cl.Table, start: int = 0) -> Rows:
    latest = table.latest_snapshot()
    assert latest is not None
    return _rows(table.changes(start, latest.id).to_arrow())


def _read_stream(reader: ChangeStreamReader, limit: Any, start: dict[str, Any] | None = None) -> Iterator[Rows]:
    """Micro-batches as Spark runs them: latestOffset, then partitions and read of [start, end)."""
    start = reader.initialOffset() if start is None else start
    while (end := reader.latestOffset(start, limit)) != start:
        parts = reader.partitions(json.loads(json.dumps(start)), end)
        assert all(isinstance(part, ChangeSplitPartition) for part in parts)
        batch = [b for part in parts for b in reader.read(part)]
        yield _rows(pa.Table.from_batches(batch, reader.output.schema)) if batch else []
        reader.commit(end)
        start = end


# -- without Spark jobs ----------------------------------------------------------------------


def test_types_map_to_spark_and_schemas_are_checked() -> None:
    schema = pa.schema([
        pa.field("i8", pa.int8()), pa.field("i16", pa.int16()), pa.field("i32", pa.int32(), nullable=False),
        pa.field("i64", pa.int64()), pa.field("f", pa.float32()), pa.field("d", pa.float64()),
        pa.field("dec", pa.decimal128(12, 3)), pa.field("s", pa.string()), pa.field("b", pa.binary()),
        pa.field("fb", pa.binary(4)), pa.field("ok", pa.bool_()), pa.field("day", pa.date32()),
        pa.field("ntz", pa.timestamp("ms")), pa.field("ltz", pa.timestamp("us", tz="UTC")),
        pa.field("xs", pa.list_(pa.field("element", pa.int32(), nullable=False))),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
        pa.field("row", pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string(), nullable=False)])),
    ])
    got = struct_type(schema, table="db.t")
    assert got.simpleString() == (
        "struct<i8:tinyint,i16:smallint,i32:int,i64:bigint,f:float,d:double,dec:decimal(12,3),s:string,"
        "b:binary,fb:binary,ok:boolean,day:date,ntz:timestamp_ntz,ltz:timestamp,xs:array<int>,"
        "m:map<string,bigint>,row:struct<x:int,y:string>>")
    assert [f.nullable for f in got.fields][:3] == [True, True, False]
    assert not got["xs"].dataType.containsNull and not got["row"].dataType["y"].nullable
    with pytest.raises(SchemaError, match=r"column 'u'.*no Spark equivalent"):
        struct_type(pa.schema([pa.field("u", pa.uint64())]), table="db.t")


def test_batch_reader_reads_a_given_schema(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)
    reader = _source(table).reader(_struct(("v", StringType()), ("k", LongType())))
    assert isinstance(reader, BatchReader)
    parts = reader.partitions()
    assert len(parts) == len(table.scan().plan()) and all(isinstance(p, SplitPartition) for p in parts)
    got = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
    assert got.schema == pa.schema([pa.field("v", pa.string()), pa.field("k", pa.int64())])
    assert _rows(got) == _rows(table.scan().to_arrow().select(["v", "k"]))


def test_batch_reader_picks_the_snapshot(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)

    def read(target: cl.Table = table, **options: str) -> Rows:
        source = _source(target, **options)
        reader = source.reader(source.schema())
        return _rows(pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)],
                                           reader.output.schema))

    assert read() == _rows(table.scan().to_arrow())
    assert read(**{"scan.snapshot-id": "1"}) == _rows(table.scan(snapshot_id=1).to_arrow())
    moment = table.snapshots()[1].time_millis
    assert read(**{"scan.timestamp-millis": str(moment)}) == _rows(table.scan(timestamp_ms=moment).to_arrow())
    assert read(**{"read.changelog": "true"}) == [("+I", *r) for r in _rows(table.scan().to_arrow())]
    with pytest.raises(OptionError, match=r"option 'scan\.mode': compacted-full is for streaming reads"):
        read(**{"scan.mode": "compacted-full"})
    # An empty table plans nothing, and Spark's placeholder partition reads nothing.
    empty = cl.Catalog(str(tmp_path / "wh")).create_table("db.empty", SCHEMA, primary_keys=["p", "k"])
    assert read(empty) == []
    assert list(_source(empty).reader(_source(empty).schema()).read(InputPartition(None))) == []


def test_reads_of_a_snapshot_offer_its_schema(tmp_path: Path) -> None:
    """The source's schema (decided before reading) for scan.snapshot-id / scan.tag-name is
    the snapshot's, batch and stream, as Paimon time-travels; scan.time-travel.schema=latest
    keeps the table's."""
    table = _lookup_table(tmp_path)
    table.create_tag("first", 1)
    with table.update_schema() as u:
        u.rename_column("v", "label")
        u.add_column("n", pa.int32())
    table.write(pa.table({"p": ["a"], "k": [9], "label": ["x"], "n": pa.array([5], pa.int32())}))
    for options in ({"scan.snapshot-id": "1"}, {"scan.tag-name": "first"},
                    {"scan.mode": "from-snapshot", "scan.snapshot-id": "2"}):
        assert _source(table, **options).schema().names == SCHEMA.names, options
    assert _source(table, **{"scan.snapshot-id": "1", "scan.time-travel.schema": "latest"}).schema().names == [
        "p", "k", "label", "n"]
    # a stream from a snapshot still to come reads in the table's schema
    assert _source(table, **{"scan.mode": "from-snapshot", "scan.snapshot-id": "9"}).schema().names == [
        "p", "k", "label", "n"]
    first_new = min(s.id for s in table.snapshots() if s.schema_id == 1)

    def stream(snapshot_id: int) -> Rows:
        source = _source(table, **{"scan.mode": "from-snapshot", "scan.snapshot-id": str(snapshot_id),
                                   "read.changelog": "true"})
        return [r for batch in _read_stream(source.streamReader(source.schema()), ReadAllAvailable()) for r in batch]

    assert stream(first_new) == [("+I", "a", 9, "x", 5)]
    # from a snapshot of the old schema, the newer file is read in that schema
    assert ("+I", "a", 9, "x") in stream(first_new - 1)


def test_stream_reader_micro_batches_cover_the_changes_exactly(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)
    source = _source(table, **{"scan.mode": "from-snapshot", "scan.snapshot-id": "1", "read.changelog": "true",
                                "read.stream.maxRowsPerTrigger": "3", "consumer-id": "c1"})
    reader = source.streamReader(source.schema())
    assert reader.getDefaultReadLimit() == ReadMaxRows(3)
    start = reader.initialOffset()
    batches = list(_read_stream(reader, reader.getDefaultReadLimit(), start))
    assert len(batches) > 3 and all(len(b) <= 3 for b in batches)
    assert sorted(r for b in batches for r in b) == _changes(table)
    assert {r[0] for b in batches for r in b} == {"+I", "-U", "+U", "-D"}
    # Offsets of something else are refused.
    with pytest.raises(OffsetError, match="is not a changelake offset"):
        reader.partitions({"snapshot": 1}, start)
    with pytest.raises(OffsetError, match="belongs to another table"):
        reader.latestOffset({**start, "tableId": "0" * 16}, ReadAllAvailable())
    with pytest.raises(ScanError, match=r"Spark read limit .* is not supported"):
        reader.latestOffset(start, ReadMaxBytes(1024))
    # Files bound batches too; reading everything available is one batch.
    assert len(list(_read_stream(reader, ReadMaxFiles(1), start))) > 1
    # Small changelog files are packed into few tasks (source.split.target-size), in stream order.
    end = reader.latestOffset(start, ReadAllAvailable())
    everything = [s for part in reader.partitions(start, end) for s in part.splits]
    assert len(reader.partitions(start, end)) == 1 and len(everything) > 3
    one_each = _source(table, **{"scan.mode": "from-snapshot", "scan.snapshot-id": "1", "read.changelog": "true",
                                 "source.split.target-size": "1 b"}).streamReader(source.schema())
    assert [p.splits for p in one_each.partitions(start, end)] == [(s,) for s in everything]
    assert len(list(_read_stream(reader, ReadAllAvailable(), start))) == 1
    # The consumer recorded its progress; a new stream of it starts at the next snapshot.
    latest = table.latest_snapshot()
    assert latest is not None
    consumer = json.loads((Path(table.location) / "consumer" / "consumer-c1").read_text())
    assert consumer == {"nextSnapshot": latest.id + 1}
    assert source.streamReader(source.schema()).initialOffset()["snapshotId"] == latest.id + 1


def test_reads_with_commit_metadata_carry_each_changes_snapshot_and_time(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)
    times = {s.id: s.time_millis for s in table.snapshots()}
    source = _source(table, **{"read.changelog": "true", "read.commit-metadata": "true",
                               "scan.mode": "from-snapshot", "scan.snapshot-id": "1"})
    schema = source.schema()
    assert schema.names[-2:] == ["_commit_snapshot", "_commit_timestamp"]
    reader = source.streamReader(schema)
    rows = [r for batch in _read_stream(reader, reader.getDefaultReadLimit()) for r in batch]
    # every change row, each with the snapshot that committed it (the lookup changelog's COMPACT
    # snapshots carry it) and that snapshot's time (UTC, microseconds in Spark)
    assert sorted(r[:-2] for r in rows) == _changes(table)
    assert {r[-2] for r in rows} <= set(times) and len({r[-2] for r in rows}) >= 3
    assert all(r[-1] == dt.datetime.fromtimestamp(times[r[-2]] / 1000, dt.UTC) for r in rows)
    # a batch read: the snapshot read, for every row
    batch = _source(table, **{"read.commit-metadata": "true", "scan.snapshot-id": "2"})
    batch_reader = batch.reader(batch.schema())
    got = pa.Table.from_batches([b for p in batch_reader.partitions() for b in batch_reader.read(p)],
                                batch_reader.output.schema)
    assert set(got.column("_commit_snapshot").to_pylist()) == {2}
    assert got.num_rows == table.scan(snapshot_id=2).to_arrow().num_rows
    # a table with such a column cannot take them
    clash = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.clash", pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("_commit_snapshot", pa.int64())]),
        primary_keys=["k"])
    with pytest.raises(SchemaError, match=r"read\.commit-metadata adds a '_commit_snapshot' column"):
        _source(clash, **{"read.commit-metadata": "true"}).schema()


def test_stream_reader_modes_upserts_min_rows_and_available_now(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)
    # Default mode (latest-full) without read.changelog: the latest rows, no rowkind column.
    full = _source(table)
    assert full.schema().names == ["p", "k", "v"]
    assert [r for b in _read_stream(full.streamReader(full.schema()), ReadAllAvailable()) for r in b] \
        == _rows(table.scan().to_arrow())
    # latest: nothing until the next commit; then its upserts only (-U and -D left out).
    latest = _source(table, **{"scan.mode": "latest"})
    reader = latest.streamReader(latest.schema())
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    before = table.latest_snapshot()
    assert before is not None
    _commit(table, [("a", 2, "v2z", "+I"), ("a", 4, None, "-D"), ("b", 9, "w9", "+I")])
    assert list(_read_stream(reader, ReadAllAvailable(), start)) == [[("a", 2, "v2z"), ("b", 9, "w9")]]
    assert {r[0] for r in _changes(table, before.id)} == {"-U", "+U", "-D", "+I"}
    # minRowsPerTrigger waits (until maxTriggerDelayMs) after a batch, but not under AvailableNow.
    waiting = _source(table, **{"scan.mode": "from-snapshot", "scan.snapshot-id": "1",
                                "read.stream.maxRowsPerTrigger": "3", "read.stream.minRowsPerTrigger": "1000",
                                "read.stream.maxTriggerDelayMs": "1 h"})
    reader = waiting.streamReader(waiting.schema())
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    first = reader.latestOffset(start, limit)
    assert first != start  # the first batch never waits
    assert reader.latestOffset(first, limit) == first
    assert reader.latestOffset(first, ReadMinRows(1)) != first
    assert reader.latestOffset(first, ReadAllAvailable()) != first
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(first, limit) != first
    only_min = _source(table, **{"read.stream.minRowsPerTrigger": "5", "read.stream.maxTriggerDelayMs": "10"})
    assert only_min.streamReader(only_min.schema()).getDefaultReadLimit() == ReadMinRows(5)
    # AvailableNow: nothing committed after it started is read.
    now = _source(table, **{"read.changelog": "true", "read.stream.maxRowsPerTrigger": "2"})
    reader = now.streamReader(now.schema())
    reader.prepareForTriggerAvailableNow()
    at_start = table.latest_snapshot()
    assert at_start is not None
    _commit(table, [("c", 1, "late", "+I")])
    batches = list(_read_stream(reader, ReadMaxRows(2)))
    snapshot = table.scan(snapshot_id=at_start.id).to_arrow()
    assert len(batches) > 1
    assert sorted(r for b in batches for r in b) == [("+I", *r) for r in _rows(snapshot)]


@pytest.mark.parametrize(("options", "error", "message"), [
    ({}, OptionError, "option 'path': no table path"),
    ({"path": "/nowhere/db.db/t"}, TableNotFoundError, "table db.t: does not exist"),
    ({"scan.mode": "sometimes"}, OptionError, "option 'scan.mode'.*'sometimes'"),
    ({"scan.snapshot-idd": "1"}, OptionError, "option 'scan.snapshot-idd'.*did you mean 'scan.snapshot-id'"),
    ({"read.stream.minRowsPerTrigger": "5"}, OptionError, "option 'read.stream.maxTriggerDelayMs'"),
    ({"scan.mode": "from-snapshot"}, OptionError, "from-snapshot needs scan.snapshot-id"),
    ({"scan.mode": "from-snapshot", "scan.snapshot-id": "1"}, SnapshotExpiredError, "snapshot 1 has expired"),
])
def test_bad_input_gets_a_clear_error(tmp_path: Path, options: dict[str, str], error: type[Exception],
                                      message: str) -> None:
    table = _lookup_table(tmp_path)
    (Path(table.location) / "snapshot" / "snapshot-1").unlink()  # expired
    source = ChangelakeDataSource(CaseInsensitiveDict(options)) if not options else _source(table, **options)
    with pytest.raises(error, match=message):
        source.streamReader(source.schema()).initialOffset()


def test_a_given_schema_must_fit_the_table(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)
    for schema, message in [(_struct(("k", IntegerType())), "column 'k': the given schema has type int, the table "
                                                          "has bigint"),
                            (_struct(("x", StringType())), "column 'x'"),
                            (_struct(("k", LongType()), ("k", LongType())), "column 'k'.*twice"),
                            (_struct(("k", LongType(), False), ("v", StringType(), False)), "column 'v'.*NOT NULL"),
                            (_struct(("rowkind", StringType())), "column 'rowkind'")]:
        with pytest.raises(SchemaError, match=message):
            _source(table).reader(schema)


# -- through Spark ---------------------------------------------------------------------------


def test_spark_batch_reads(spark: Any, tmp_path: Path) -> None:
    register(spark)
    register(spark)
    schema = pa.schema([
        pa.field("k", pa.int32(), nullable=False), pa.field("dec", pa.decimal128(10, 2)),
        pa.field("f", pa.float64()), pa.field("ok", pa.bool_()), pa.field("day", pa.date32()),
        pa.field("ntz", pa.timestamp("ms")), pa.field("ltz", pa.timestamp("us", tz="UTC")),
        pa.field("bin", pa.binary()), pa.field("xs", pa.list_(pa.int64())),
        pa.field("m", pa.map_(pa.string(), pa.int32())), pa.field("row", pa.struct([pa.field("x", pa.string())])),
    ])
    table = cl.Catalog(str(tmp_path)).create_table("db.types", schema, primary_keys=["k"], options={"bucket": "2"})
    row = {"dec": decimal.Decimal("1.25"), "f": 0.5, "ok": True, "day": dt.date(2024, 2, 29),
           "ntz": dt.datetime(2024, 1, 1, 12, 30, 1, 123000), "ltz": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
           "bin": b"\x00\x01", "xs": [1, None], "m": [("a", 1)], "row": {"x": "y"}}
    table.write(pa.Table.from_pylist([{"k": k, **row} for k in range(5)], schema=schema))
    table.write(pa.Table.from_pylist([{"k": k} for k in range(3, 8)], schema=schema))
    table.create_tag("first", 1)

    def read(**options: str) -> pa.Table:
        got = spark.read.format("changelake").options(**options).load(table.location).toArrow()
        return got.sort_by("k").cast(schema)

    assert read().equals(table.scan().to_arrow().sort_by("k"))
    assert read(**{"scan.tag-name": "first"}).equals(table.scan(snapshot_id=1).to_arrow().sort_by("k"))
    # A given schema of fewer columns; Spark evaluates the filters (none is pushed into the read).
    given = spark.read.format("changelake").schema("day DATE, k INT").load(table.location).where(
        "k >= 2 AND k IN (1, 2, 3)")
    assert re.search(r"\bFilter\b", given._jdf.queryExecution().executedPlan().toString())
    assert sorted((tuple(r) for r in given.collect()), key=lambda r: r[1]) == [(dt.date(2024, 2, 29), 2), (None, 3)]
    # read.commit-metadata: the snapshot read and its commit time, as Spark's TIMESTAMP
    tagged = spark.read.format("changelake").option("read.commit-metadata", "true").load(table.location)
    assert tagged.columns[-2:] == ["_commit_snapshot", "_commit_timestamp"]
    first_row = tagged.where("k = 1").collect()[0]
    latest = table.latest_snapshot()
    assert latest is not None and first_row["_commit_snapshot"] == latest.id
    assert first_row["_commit_timestamp"].timestamp() * 1000 == pytest.approx(latest.time_millis)
    # System tables, as Paimon names them: <table>$snapshots.
    snapshots = spark.read.format("changelake").load(f"{table.location}$snapshots").toArrow()
    assert snapshots.column("snapshot_id").to_pylist() == [s.id for s in table.snapshots()]
    assert snapshots.column("commit_kind").to_pylist() == [s.commit_kind.value for s in table.snapshots()]


def test_spark_reads_a_snapshot_in_its_schema(spark: Any, tmp_path: Path) -> None:
    register(spark)
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["p", "k"])
    _commit(table, [("a", 1, "one", "+I")])
    with table.update_schema() as u:
        u.rename_column("v", "label")
        u.add_column("n", pa.int32())
    old = spark.read.format("changelake").option("scan.snapshot-id", "1").load(table.location)
    assert old.columns == ["p", "k", "v"] and [tuple(r) for r in old.collect()] == [("a", 1, "one")]


def test_a_reused_dataframe_gives_each_query_its_rows(spark: Any, tmp_path: Path) -> None:
    register(spark)
    table = cl.Catalog(str(tmp_path / "wh")).create_table("db.t", SCHEMA, primary_keys=["p", "k"],
                                                          partition_keys=["p"], options={"bucket": "2"})
    _commit(table, [("a" if k < 5 else "b", k, f"v{k}", "+I") for k in range(10)])
    # Spark keeps a Python data source's plan per load(): each query of the DataFrame after a
    # filtered one must still get every row its own filters keep.
    df = spark.read.format("changelake").load(table.location)
    queries = {
        "k > 7": 2,
        "TRUE": 10,  # no filter left (Spark drops it): the whole table
        "p = 'b' AND k < 7": 2,
        "k IS NOT NULL": 10,  # a filter Spark drops: k is NOT NULL
        "k < 3": 3,
        "k = 1 OR k = 9": 2,  # a filter Python is not offered
    }
    assert {where: df.where(where).count() for where in queries} == queries


def test_spark_streams_the_changelog_in_bounded_batches_and_restarts(spark: Any, tmp_path: Path) -> None:
    register(spark)
    table = _lookup_table(tmp_path)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> list[Rows]:
        batches: list[Rows] = []
        query = (spark.readStream.format("changelake")
                 .options(**{"scan.mode": "from-snapshot", "scan.snapshot-id": "1", "read.changelog": "true",
                             "read.stream.maxRowsPerTrigger": "8", "consumer-id": "spark"})
                 .load(table.location)
                 .writeStream.foreachBatch(lambda df, _: batches.append([tuple(r) for r in df.collect()]))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        assert len(query.recentProgress) >= len(batches)
        return batches

    def consumer() -> int:
        recorded: int = json.loads((Path(table.location) / "consumer" / "consumer-spark").read_text())["nextSnapshot"]
        return recorded

    batches = run()
    assert len(batches) > 1 and sorted(r for b in batches for r in b) == _changes(table)
    first = table.latest_snapshot()
    assert first is not None
    # Spark commits a batch's offsets to the source when it plans the next batch: the consumer
    # trails by one batch.
    assert 1 < consumer() <= first.id
    _commit(table, [("a", 5, "v5x", "+I"), ("b", 1, None, "-D"), ("c", 1, "x1", "+I")])
    batches = run()
    assert sorted(r for b in batches for r in b) == _changes(table, first.id)  # the new changes, once each
    assert consumer() >= first.id + 1
    failing = (spark.readStream.format("changelake").option("scan.mode", "from-snapshot").load(table.location)
               .writeStream.format("memory").queryName("failing").trigger(availableNow=True).start())
    with pytest.raises(Exception, match=r"from-snapshot needs scan\.snapshot-id"):
        failing.awaitTermination()


def test_an_available_now_run_that_read_only_the_first_full_read_holds_what_the_next_run_reads(
        spark: Any, tmp_path: Path) -> None:
    register(spark)
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"],
        options={"bucket": "1", "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "2"})
    _commit(table, [("a", k, f"v{k}", "+I") for k in range(4)])
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> Rows:
        batches: list[Rows] = []
        query = (spark.readStream.format("changelake")
                 .options(**{"read.changelog": "true", "consumer-id": "nightly"}).load(table.location)
                 .writeStream.foreachBatch(lambda df, _: batches.append([tuple(r) for r in df.collect()]))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        return sorted(r for b in batches for r in b)

    # The first run reads the one snapshot in full (latest-full): Spark commits that batch's
    # offsets only when it plans the next, in the next run.
    assert run() == [("+I", *r) for r in _rows(table.scan().to_arrow())]
    # Expiry after each commit retains two snapshots, but the consumer holds snapshot 1 on: the
    # next run reads exactly the changes committed since.
    for n in range(3):
        _commit(table, [("a", n, None, "-D"), ("b", n, f"w{n}", "+I")])
    assert run() == _changes(table, 1)
    assert [s.id for s in table.snapshots()] == [1, 2, 3, 4]
    consumer = json.loads((Path(table.location) / "consumer" / "consumer-nightly").read_text())
    assert consumer == {"nextSnapshot": 2}  # the first run's batch, committed by this run


def test_spark_resumes_a_consumer_after_a_rollback_at_the_new_commits(spark: Any, tmp_path: Path) -> None:
    """A consumer that had read past a rollback's target is moved back to the snapshot after
    it: a Spark query resumed from it (a new checkpoint, the same ``consumer-id``) reads the
    commits made after the rollback, whose snapshot ids the consumer had read before."""
    register(spark)
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "changelog-producer": "lookup"})
    _commit(table, [("a", k, f"v{k}", "+I") for k in range(4)])
    target = table.latest_snapshot()
    assert target is not None
    _commit(table, [("a", 1, "v1x", "+I"), ("b", 2, "w2", "+I")])
    _commit(table, [("a", 3, None, "-D")])
    consumed = table.stream(mode="from-snapshot", snapshot_id=1, consumer_id="spark")
    list(consumed)
    consumed.commit()  # the consumer read everything
    table.rollback_to(snapshot_id=target.id)
    _commit(table, [("a", 0, "new", "+I"), ("c", 9, "new", "+I")])

    batches: list[Rows] = []
    query = (spark.readStream.format("changelake").options(**{"consumer-id": "spark", "read.changelog": "true"})
             .load(table.location)
             .writeStream.foreachBatch(lambda df, _: batches.append([tuple(r) for r in df.collect()]))
             .option("checkpointLocation", str(tmp_path / "fresh-checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    got = sorted(r for b in batches for r in b)
    assert got == _changes(table, target.id) == [("+I", "c", 9, "new"), ("+U", "a", 0, "new"), ("-U", "a", 0, "v0")]


def test_system_tables_read_in_batch_only(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)
    source = ChangelakeDataSource({"path": f"{table.location}$tags"})
    assert source.schema().names == table.system("tags").schema.names
    with pytest.raises(ScanError, match="read in batch only"):
        source.streamReader(source.schema())
    with pytest.raises(ScanError, match="has no system table 'nope'"):
        ChangelakeDataSource({"path": f"{table.location}$nope"}).schema()


def test_the_read_optimized_path_is_a_split_batch_read(tmp_path: Path) -> None:
    table = _lookup_table(tmp_path)  # lookup: every commit compacts its level 0 up
    table.compact(full=True)
    _commit(table, [("a", 8, "v8", "+I")])
    source = ChangelakeDataSource({"path": f"{table.location}$ro"})
    assert source.schema().names == table.schema.names
    reader = source.reader(source.schema())
    assert isinstance(reader, BatchReader) and len(reader.partitions()) == len(table.scan(read_optimized=True).plan())
    got = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)], reader.output.schema)
    assert _rows(got) == _rows(table.scan(read_optimized=True).to_arrow())
    with pytest.raises(ScanError, match="'ro' is read in batch only"):
        source.streamReader(source.schema())
