"""CDC sync following the source's schema: Debezium (envelope schema, schema-change events),
Canal (mysqlType, ALTER TABLE DDL) and Maxwell (table-alter, untyped fields) streams whose source
gains and widens columns mid-stream; refused type changes; a replayed batch."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

import changelake as cl
from changelake import streaming
from changelake.errors import CdcError, SchemaError
from spark_support import CrashAfterCommit

Row = dict[str, Any]
BASE = pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string())])


def add_file(folder: Path, name: str, lines: list[str], order: int) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (1_000_000 + order, 1_000_000 + order))  # the file source reads in modification order


def sync(spark: SparkSession, table: cl.Table, fmt: str, source: Path, checkpoint: Path) -> None:
    events = spark.readStream.option("maxFilesPerTrigger", 1).text(str(source))
    query = streaming.sync_cdc_stream(events, table, fmt, checkpoint_location=str(checkpoint),
                                      trigger={"availableNow": True})
    try:
        query.awaitTermination()
    finally:
        query.stop()


def by_key(table: cl.Table) -> dict[int, Row]:
    table.refresh()
    return {row.pop("id"): row for row in table.scan().to_arrow().to_pylist()}


# -- Debezium --------------------------------------------------------------------------------


def dbz_field(name: str, kind: str, logical: str | None = None, **parameters: str) -> Row:
    field: Row = {"type": kind, "optional": name != "id", "field": name}
    if logical:
        field["name"] = logical
    if parameters:
        field["parameters"] = parameters
    return field


def dbz(op: str, before: Row | None, after: Row | None, ts: int, fields: list[Row] | None = None) -> str:
    payload = {"op": op, "before": before, "after": after, "ts_ms": ts, "source": {"ts_ms": ts, "table": "t"}}
    if fields is None:
        return json.dumps(payload)
    image = {"type": "struct", "optional": True, "fields": fields}
    schema = {"type": "struct", "fields": [image | {"field": "before"}, image | {"field": "after"},
                                           {"type": "string", "field": "op"}, {"type": "int64", "field": "ts_ms"}]}
    return json.dumps({"schema": schema, "payload": payload})


def dbz_schema_change(*columns: tuple[str, str, int | None, int | None]) -> str:
    """A schema-change event of Debezium's MySQL connector (its schema-history topic)."""
    table = {"defaultCharsetName": "utf8mb4", "primaryKeyColumnNames": ["id"], "columns": [
        {"name": name, "jdbcType": 4, "typeName": kind, "typeExpression": kind, "length": length, "scale": scale,
         "position": i + 1, "optional": name != "id"} for i, (name, kind, length, scale) in enumerate(columns)]}
    return json.dumps({"source": {"ts_ms": 1, "db": "db", "table": "t"}, "databaseName": "db", "schemaName": None,
                       "ddl": "ALTER TABLE t ADD COLUMN ...",
                       "tableChanges": [{"type": "ALTER", "id": '"db"."t"', "table": table}]})


def debezium_batches() -> list[list[str]]:
    v1 = [dbz_field("id", "int32"), dbz_field("name", "string")]
    v3 = [*v1, dbz_field("note", "string"), dbz_field("rank", "int64"),
          dbz_field("score", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
                    **{"connect.decimal.precision": "10"}),
          dbz_field("day", "int32", "io.debezium.time.Date"),
          dbz_field("at", "int64", "io.debezium.time.MicroTimestamp")]
    return [
        [dbz("c", None, {"id": 1, "name": "a"}, 1, v1), dbz("c", None, {"id": 2, "name": "b"}, 2, v1)],
        # The source gains note and rank: a schema-change event types them; the rows carry no
        # schema (the typed declaration wins over the untyped fields).
        [dbz_schema_change(("id", "INT", None, None), ("name", "VARCHAR", 20, None), ("note", "VARCHAR", 20, None),
                           ("rank", "INT", 11, None)),
         dbz("c", None, {"id": 3, "name": "c", "note": "n3", "rank": 30}, 3),
         dbz("u", {"id": 1, "name": "a"}, {"id": 1, "name": "a2", "note": "n1", "rank": 10}, 4)],
        # ... then widens rank to bigint and gains a decimal, a date and a timestamp (envelope).
        [dbz("c", None, {"id": 4, "name": "d", "note": None, "rank": 2**40, "score": 12.34, "day": 19724,
                         "at": 1_700_000_000_000_000}, 5, v3)],
    ]


# -- Canal -----------------------------------------------------------------------------------


def canal(kind: str, data: list[Row], mysql: Row, **fields: Any) -> str:
    return json.dumps({"data": data, "database": "db", "table": "t", "type": kind, "isDdl": False, "es": 1, "ts": 2,
                       "pkNames": ["id"], "mysqlType": mysql} | fields)


def canal_ddl(sql: str) -> str:
    return json.dumps({"data": None, "database": "db", "table": "t", "type": "ALTER", "isDdl": True, "sql": sql,
                       "es": 1, "ts": 2, "mysqlType": None, "old": None})


def canal_batches() -> list[list[str]]:
    v1 = {"id": "int(11)", "name": "varchar(20)"}
    v2 = v1 | {"price": "decimal(10,2)", "qty": "bigint unsigned", "seen": "datetime(3)", "ok": "tinyint(1)"}
    return [
        [canal("INSERT", [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}], v1)],
        [canal_ddl("ALTER TABLE `db`.`t` ADD COLUMN `price` decimal(10,2) NOT NULL DEFAULT '0.00' AFTER name, "
                   "ADD INDEX i (name)"),
         canal_ddl("ALTER TABLE t ADD (memo text, code char(3))"),
         canal("INSERT", [{"id": "3", "name": "c", "price": "9.99", "qty": "18446744073709551615",
                           "seen": "2024-01-02 03:04:05.250", "ok": "1"}], v2),
         canal("UPDATE", [{"id": "1", "name": "a", "price": "1.50", "qty": "7", "seen": None, "ok": "0"}], v2,
               old=[{"price": "0.00"}])],
    ]


# -- Maxwell ---------------------------------------------------------------------------------


def maxwell(kind: str, data: Row, **fields: Any) -> str:
    return json.dumps({"database": "db", "table": "t", "type": kind, "ts": 1700000000, "data": data} | fields)


def maxwell_alter(*columns: Row) -> str:
    definition = {"database": "db", "table": "t", "charset": "utf8mb4", "primary-key": ["id"], "columns": list(columns)}
    return json.dumps({"type": "table-alter", "database": "db", "table": "t", "ts": 1700000001,
                       "sql": "alter table t add column weight double, add column size int", "old": {},
                       "def": definition})


def maxwell_batches() -> list[list[str]]:
    return [
        [maxwell("insert", {"id": 1, "name": "a"}), maxwell("insert", {"id": 2, "name": "b"})],
        [maxwell_alter({"type": "int", "name": "id", "signed": True}, {"type": "varchar", "name": "name"},
                       {"type": "double", "name": "weight"}, {"type": "smallint", "name": "size", "signed": False},
                       {"type": "decimal", "name": "cost", "precision": 8, "scale": 3}),
         maxwell("insert", {"id": 3, "name": "c", "weight": 1.5, "size": 40000, "cost": 1.125, "tag": "x"}),
         maxwell("update", {"id": 1, "name": "a", "weight": 2.5, "size": 1, "cost": None, "tag": None},
                 old={"weight": None, "size": None})],
    ]


EXPECTED: dict[str, tuple[pa.Schema, dict[int, Row]]] = {
    "debezium-json": (pa.schema([("note", pa.string()), ("rank", pa.int64()), ("score", pa.decimal128(10, 2)),
                                 ("day", pa.date32()), ("at", pa.int64())]), {
        1: {"name": "a2", "note": "n1", "rank": 10, "score": None, "day": None, "at": None},
        2: {"name": "b", "note": None, "rank": None, "score": None, "day": None, "at": None},
        3: {"name": "c", "note": "n3", "rank": 30, "score": None, "day": None, "at": None},
        4: {"name": "d", "note": None, "rank": 2**40, "score": Decimal("12.34"), "day": dt.date(
            2024, 1, 2), "at": 1_700_000_000_000_000},
    }),
    "canal-json": (pa.schema([("price", pa.decimal128(10, 2)), ("qty", pa.decimal128(20, 0)),
                              ("seen", pa.timestamp("ms")), ("ok", pa.bool_()), ("memo", pa.string()),
                              ("code", pa.string())]), {
        1: {"name": "a", "price": Decimal("1.50"), "qty": Decimal(7), "seen": None, "ok": False, "memo": None,
            "code": None},
        2: {"name": "b", "price": None, "qty": None, "seen": None, "ok": None, "memo": None, "code": None},
        3: {"name": "c", "price": Decimal("9.99"), "qty": Decimal(2**64 - 1),
            "seen": dt.datetime(2024, 1, 2, 3, 4, 5, 250000), "ok": True, "memo": None,
            "code": None},
    }),
    "maxwell-json": (pa.schema([("weight", pa.float64()), ("size", pa.int32()), ("cost", pa.decimal128(8, 3)),
                                ("tag", pa.string())]), {
        1: {"name": "a", "weight": 2.5, "size": 1, "cost": None, "tag": None},
        2: {"name": "b", "weight": None, "size": None, "cost": None, "tag": None},
        3: {"name": "c", "weight": 1.5, "size": 40000, "cost": Decimal("1.125"), "tag": "x"},
    }),
}
BATCHES = {"debezium-json": debezium_batches, "canal-json": canal_batches, "maxwell-json": maxwell_batches}


def test_each_format_follows_its_source_gaining_and_widening_columns(spark: SparkSession, tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path / "warehouse"))
    for fmt, batches in BATCHES.items():
        name = fmt.replace("-", "_")
        schema = BASE.append(pa.field("_cdc_ts_ms", pa.int64())) if fmt == "debezium-json" else BASE
        table = catalog.create_table(f"db.{name}", schema, primary_keys=["id"], options={"bucket": "2"})
        source, checkpoint = tmp_path / f"in-{name}", tmp_path / f"checkpoint-{name}"
        for i, lines in enumerate(batches()):
            add_file(source, f"{i}.json", lines, i)
        sync(spark, table, fmt, source, checkpoint)
        added, rows = EXPECTED[fmt]
        # The new columns, nullable, after the table's own, in the order the source gave them.
        assert table.schema == pa.schema([*schema, *added]), fmt
        got = by_key(table)
        for row in got.values():
            row.pop("_cdc_ts_ms", None)
        assert got == rows, fmt
        # One schema change per batch that changed the schema (the Debezium rank widened in a
        # later one), each before the batch's rows.
        evolved = 2 if fmt == "debezium-json" else 1
        assert table.context.schema.id == evolved, fmt
        appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
        assert [s.commit_identifier for s in appends] == list(range(len(batches()))), fmt
        assert appends[-1].schema_id == evolved, fmt

        if fmt == "canal-json":
            # A restart from the checkpoint that replays the last batch (as after a crash between
            # the commit and Spark's commit log) changes nothing: no schema, no snapshot twice.
            last = str(len(batches()) - 1)
            for entry in (last, f".{last}.crc"):
                (checkpoint / "commits" / entry).unlink()
            before = table.latest_snapshot()
            sync(spark, table, fmt, source, checkpoint)
            assert (checkpoint / "commits" / last).exists()  # the batch ran again
            table.refresh()
            assert table.latest_snapshot() == before and table.context.schema.id == evolved


def test_a_type_change_that_is_not_a_widening_is_refused_and_writes_nothing(spark: SparkSession,
                                                                            tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    schema = BASE.append(pa.field("qty", pa.int64())).append(pa.field("price", pa.decimal128(10, 2)))
    table = catalog.create_table("db.t", schema, primary_keys=["id"], options={"bucket": "1"})
    mysql = {"id": "int(11)", "name": "varchar(20)", "qty": "bigint", "price": "decimal(10,2)"}
    sink = streaming.CdcSyncSink(table, "canal-json", commit_user="job", event_time_column=None)

    def batch(*events: str) -> Any:
        return spark.createDataFrame([(event,) for event in events], "value string")

    # A narrower type (int into the bigint qty, decimal(8,2) into decimal(10,2)) is held by the
    # table's: nothing changes (as in Paimon), the rows land.
    sink(batch(canal("INSERT", [{"id": "1", "name": "a", "qty": "5", "price": "1.25"}],
                     mysql | {"qty": "int(11)", "price": "decimal(8,2)"})), 0)
    assert table.context.schema.id == 0 and by_key(table) == {1: {"name": "a", "qty": 5, "price": Decimal("1.25")}}
    before = table.latest_snapshot()
    refused = [
        (mysql | {"qty": "varchar(10)", "extra": "int"}, "qty", "int64.*string"),  # another kind
        (mysql | {"price": "decimal(12,4)", "extra": "int"}, "price", "decimal128\\(10, 2\\).*decimal128\\(12, 4\\)"),
    ]
    for types, column, why in refused:
        event = canal("INSERT", [{"id": "2", "name": "b", "qty": "x", "price": "1", "extra": "1"}], types)
        with pytest.raises(CdcError, match=why) as failure:
            sink(batch(event), 1)
        assert failure.value.table == table.name and failure.value.column == column
        assert "not a widening" in str(failure.value)
    # Events of one batch declaring a column in two types neither of which holds the other.
    with pytest.raises(CdcError, match="declared both") as failure:
        sink(batch(canal("INSERT", [{"id": "2"}], mysql | {"extra": "int(11)"}),
                   canal("INSERT", [{"id": "3"}], mysql | {"extra": "date"})), 1)
    assert failure.value.column == "extra"
    # Nor does a DDL that retypes a key column: the schema change itself is refused.
    with pytest.raises(SchemaError, match="primary-key"):
        sink(batch(canal_ddl("ALTER TABLE t MODIFY COLUMN id bigint NOT NULL, ADD COLUMN extra int")), 1)
    # Nothing of the refused batches landed: not the new column extra, not a row.
    table.refresh()
    assert table.context.schema.id == 0 and table.latest_snapshot() == before
    # An event naming a MySQL type Paimon does not map fails clearly too.
    with pytest.raises(CdcError, match=r"'geo'.*MySQL type 'hyperloglog'"):
        sink(batch(canal("INSERT", [{"id": "2"}], mysql | {"geo": "hyperloglog"})), 1)


def test_source_types_map_as_paimon_maps_them(spark: SparkSession, tmp_path: Path) -> None:
    """MySQL types (Canal's mysqlType, an ALTER TABLE) and Debezium's Kafka Connect types map to
    the types Paimon's CDC actions give them; types the decoder does not read become STRING."""
    catalog = cl.Catalog(str(tmp_path))
    key = pa.schema([pa.field("id", pa.int32(), nullable=False)])
    mysql = {"id": "int(11)", "b": "tinyint(1)", "ti": "tinyint(4)", "tu": "tinyint unsigned", "si": "smallint(6)",
             "su": "smallint(5) unsigned", "mi": "mediumint", "iu": "int(10) unsigned zerofill", "bi": "bigint(20)",
             "bu": "bigint(20) unsigned", "f": "float", "d": "double", "dp": "double precision",
             "dec": "decimal(12,4)", "wide": "decimal(40,2)", "dt": "date", "ts0": "datetime",
             "ts6": "timestamp(6)", "tm": "time", "v": "varchar(255)", "txt": "longtext", "j": "json",
             "e": "enum('a','b)')", "st": "set('x','y')", "bin": "varbinary(16)", "blob": "blob", "bit1": "bit(1)",
             "bit8": "bit(8)", "yr": "year"}
    canal_types = [pa.bool_(), pa.int8(), pa.int16(), pa.int16(), pa.int32(), pa.int32(), pa.int64(), pa.int64(),
                   pa.decimal128(20, 0), pa.float32(), pa.float64(), pa.float64(), pa.decimal128(12, 4), pa.string(),
                   pa.date32(), pa.timestamp("s"), pa.timestamp("us"), pa.string(), pa.string(), pa.string(),
                   pa.string(), pa.string(), pa.string(), pa.string(), pa.string(), pa.bool_(), pa.string(),
                   pa.int32(), pa.int64(), pa.string()]
    table = catalog.create_table("db.canal", key, primary_keys=["id"], options={"bucket": "1"})
    events = [canal("INSERT", [{"id": "1", "dec": "12.3456", "tm": "12:34:56", "e": "b)", "bit1": "1"}], mysql),
              canal_ddl("/* by a tool */ ALTER TABLE `db`.`t` ADD COLUMN `odd-name` int unsigned FIRST, "
                        "ADD UNIQUE KEY u (v), DROP COLUMN gone, CHANGE COLUMN old renamed varchar(5);")]
    streaming.CdcSyncSink(table, "canal-json", commit_user="job")(
        spark.createDataFrame([(event,) for event in events], "value string"), 0)
    assert table.schema == pa.schema([*key, *zip([*list(mysql)[1:], "odd-name", "renamed"], canal_types, strict=True)])
    assert by_key(table)[1] == {name: None for name in table.schema.names[1:]} | {
        "dec": Decimal("12.3456"), "tm": "12:34:56", "e": "b)", "bit1": True}

    fields = [dbz_field("id", "int32"), dbz_field("i8", "int8"), dbz_field("i16", "int16"), dbz_field("i64", "int64"),
              dbz_field("fl", "float"), dbz_field("db", "double"), dbz_field("bo", "boolean"),
              dbz_field("by", "bytes"), dbz_field("s", "string"),
              dbz_field("huge", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2",
                        **{"connect.decimal.precision": "50"}),
              dbz_field("nop", "bytes", "org.apache.kafka.connect.data.Decimal", scale="0"),
              dbz_field("d", "int32", "io.debezium.time.Date"), dbz_field("ms", "int64", "io.debezium.time.Timestamp"),
              dbz_field("zts", "string", "io.debezium.time.ZonedTimestamp"),
              dbz_field("tm", "int64", "io.debezium.time.MicroTime"),
              dbz_field("bits", "bytes", "io.debezium.data.Bits", length="8")]
    dbz_types = [pa.int8(), pa.int16(), pa.int64(), pa.float32(), pa.float64(), pa.bool_(), pa.string(), pa.string(),
                 pa.string(), pa.decimal128(20, 0), pa.date32(), pa.int64(), pa.timestamp("us"), pa.string(),
                 pa.string()]
    table = catalog.create_table("db.debezium", key, primary_keys=["id"], options={"bucket": "1"})
    row = {"id": 1, "zts": "2024-01-02T03:04:05.123456Z", "ms": 1_700_000_000_000, "tm": 45_296_000_000, "nop": 7}
    streaming.CdcSyncSink(table, "debezium-json", commit_user="job")(
        spark.createDataFrame([(dbz("r", None, row, 1, fields),)], "value string"), 0)
    assert table.schema == pa.schema([*key, *((f["field"], t) for f, t in zip(fields[1:], dbz_types, strict=True))])
    assert by_key(table)[1] == {name: None for name in table.schema.names[1:]} | {
        "zts": dt.datetime(2024, 1, 2, 3, 4, 5, 123456), "ms": 1_700_000_000_000, "tm": "45296000000",
        "nop": Decimal(7)}


def test_a_connect_sync_follows_the_source_across_a_crash_after_a_schema_change(connect: SparkSession,
                                                                                tmp_path: Path) -> None:
    """Over Spark Connect (the query id read from the checkpoint): the batch that added the
    source's new column crashes right after its commit; the restarted query replays it, which
    changes and writes nothing, then goes on."""
    table = cl.Catalog(str(tmp_path / "warehouse")).create_table("db.t", BASE, primary_keys=["id"],
                                                                 options={"bucket": "1"})
    source, checkpoint, marker = tmp_path / "in", str(tmp_path / "checkpoint"), tmp_path / "crash-once"
    marker.touch()
    batches = [*maxwell_batches(), [maxwell("insert", {"id": 4, "name": "d", "weight": 4.5})]]
    for i, lines in enumerate(batches):
        add_file(source, f"{i}.json", lines, i)

    def run() -> Any:
        sink = streaming.CdcSyncSink(table, "maxwell-json", checkpoint_location=checkpoint)
        query = (connect.readStream.option("maxFilesPerTrigger", 1).text(str(source)).writeStream
                 .foreachBatch(CrashAfterCommit(sink, 1, str(marker))).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination()  # the crash fails the query
        return query

    crashed = run()
    assert not marker.exists() and crashed.exception() is not None
    assert by_key(table)[3]["weight"] == 1.5 and table.context.schema.id == 1
    restarted = run()
    assert restarted.id == crashed.id and restarted.exception() is None
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    assert [s.commit_identifier for s in appends] == [0, 1, 2] and {s.commit_user for s in appends} == {crashed.id}
    assert table.context.schema.id == 1 and table.schema == pa.schema([*BASE, *EXPECTED["maxwell-json"][0]])
    assert by_key(table) == EXPECTED["maxwell-json"][1] | {
        4: {"name": "d", "weight": 4.5, "size": None, "cost": None, "tag": None}}
