"""CDC decoding: Debezium, Canal and Maxwell JSON events into row kinds and typed columns, in
batch and streaming, with malformed events failing the batch or skipped."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import changelake as cl
from changelake import streaming
from changelake.errors import CdcError
from changelake.streaming import cdc

SCHEMA = pa.schema([
    pa.field("id", pa.int32(), nullable=False), ("n", pa.int64()), ("x", pa.float64()),
    ("price", pa.decimal128(38, 10)), ("name", pa.string()), ("flag", pa.bool_()), ("day", pa.date32()),
])  # fmt: skip
Row = dict[str, Any]
Change = tuple[str, Row | None, Row | None]  # (op, before, after) of one source row


def _json(value: Any) -> str:
    """JSON text of ``value``: decimals as exact numbers (the json module writes none), dates
    as ISO strings."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.date):
        return json.dumps(value.isoformat())
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(key)}:{_json(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(_json, value)) + "]"
    return json.dumps(value)


def _decode(spark: SparkSession, events: list[str | None], fmt: str, schema: Any = SCHEMA, **kwargs: Any) -> DataFrame:
    return cdc.decode(spark.createDataFrame([(event,) for event in events], "value string"), fmt, schema, **kwargs)


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in df.collect()]


def _row(id: int, name: str | None = "a", **values: Any) -> Row:
    return {"id": id, "n": 10, "x": 1.5, "price": Decimal("12.34"), "name": name, "flag": True,
            "day": dt.date(2024, 1, 2)} | values


def _tuple(kind: str, row: Row, *ts: int) -> tuple[Any, ...]:
    """A decoded row: its kind, its values and, if given, its event time."""
    return (kind, *(row[name] for name in SCHEMA.names), *ts)


# -- each format -------------------------------------------------------------------------------


def _debezium_image(row: Row) -> Row:
    # Debezium writes a DATE as days since the epoch.
    return row | {"day": (row["day"] - dt.date(1970, 1, 1)).days}


def test_debezium_ops_with_and_without_the_envelope(spark: SparkSession) -> None:
    old, new = _row(1), _row(1, "b", x=2.0, flag=False, price=Decimal("12345678901234567890.1234567891"))
    envelope = {"schema": {"type": "struct", "fields": []}, "payload": None}
    events = [
        _json({"before": None, "after": _debezium_image(old), "op": "c", "ts_ms": 1005, "source": {"ts_ms": 1000}}),
        _json(envelope | {"payload": {"after": _debezium_image(_row(2)) | {"day": "2024-01-02"}, "op": "r",
                                      "ts_ms": 1100}}),
        # An update's before-image is its after-image with the "before" fields over it (Paimon).
        _json({"before": {"id": 1, "name": "a", "x": 1.5, "flag": True, "price": "12.34"},
               "after": _debezium_image(new), "op": "u", "ts_ms": 2005, "source": {"ts_ms": 2000}}),
        None,  # a Kafka tombstone
        _json(envelope | {"payload": {"before": _debezium_image(new), "after": None, "op": "d", "ts_ms": 3005,
                                      "source": {"ts_ms": 3000}}}),
        _json(envelope),  # a tombstone with the envelope
    ]
    decoded = _decode(spark, events, "debezium-json")
    assert decoded.columns == ["rowkind", *SCHEMA.names, "_cdc_ts_ms"]
    assert [field.dataType for field in decoded.schema.fields] == [
        T.StringType(), T.IntegerType(), T.LongType(), T.DoubleType(), T.DecimalType(38, 10), T.StringType(),
        T.BooleanType(), T.DateType(), T.LongType()]
    assert _rows(decoded) == [
        _tuple("+I", old, 1000), _tuple("+I", _row(2), 1100),
        _tuple("-U", new | {"name": "a", "x": 1.5, "flag": True, "price": Decimal("12.34")}, 2000),
        _tuple("+U", new, 2000), _tuple("-D", new, 3000),
    ]


def test_canal_rows_updates_over_old_fields_and_ddl_skipped(spark: SparkSession) -> None:
    # A Spark schema works as well as an Arrow one; the event time goes into a column of the
    # schema that has its name; Canal writes every value as a string, booleans as 1 and 0.
    schema = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("name", T.StringType()),
                           T.StructField("flag", T.BooleanType()), T.StructField("seq", T.LongType()),
                           T.StructField("at", T.TimestampNTZType())])

    def event(kind: str, data: list[Row], **fields: Any) -> str:
        return _json({"data": data, "database": "db", "table": "t", "type": kind, "isDdl": False, "ts": 99,
                      "es": 90, "pkNames": ["id"]} | fields)

    a = {"id": "1", "name": "a", "flag": "1", "at": "2024-01-02 03:04:05.5"}
    b = {"id": "2", "name": None, "flag": "0", "at": None}
    events = [
        event("INSERT", [a, b]),
        # Canal's "old" holds the changed fields only, a null among them a value that was null.
        event("UPDATE", [a | {"name": "c"}, b | {"id": "3", "name": "d"}],
              old=[{"name": "a"}, {"id": "2", "name": None}], es=None),
        event("DELETE", [a | {"name": "c"}], ts=120, es=110),
        _json({"data": None, "database": "db", "table": "t", "type": "ALTER", "isDdl": True, "sql": "ALTER TABLE t"}),
    ]
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 500000)
    assert _rows(_decode(spark, events, "canal-json", schema, event_time_column="seq")) == [
        ("+I", 1, "a", True, 90, at), ("+I", 2, None, False, 90, None),
        ("-U", 1, "a", True, 99, at), ("+U", 1, "c", True, 99, at),
        ("-U", 2, None, False, 99, None), ("+U", 3, "d", False, 99, None),
        ("-D", 1, "c", True, 110, at),
    ]


def test_maxwell_rows_and_ts_in_seconds(spark: SparkSession) -> None:
    def event(kind: str, data: Row, **fields: Any) -> str:
        return _json({"database": "db", "table": "t", "type": kind, "ts": 1700000000, "xid": 7, "commit": True,
                      "data": data} | fields)

    old, new = _row(1), _row(1, "b", n=11)
    image = {**old, "day": "2024-01-02", "price": Decimal("12.34")}
    events = [
        event("insert", image),
        event("update", {**image, "name": "b", "n": 11}, old={"name": "a", "n": 10}, ts=1700000001),
        event("delete", {**image, "name": "b", "n": 11}, ts=1700000002),
        _json({"type": "table-create", "database": "db", "table": "t", "ts": 1700000003, "def": {}}),
    ]
    # As from Kafka: the events are bytes, in a column of any name.
    df = spark.createDataFrame([("k", event.encode()) for event in events], "key string, payload binary")
    decoded = cdc.decode(df, cdc.CdcFormat.MAXWELL_JSON, SCHEMA, column="payload", event_time_column=None)
    assert decoded.columns == ["rowkind", *SCHEMA.names]
    assert _rows(decoded) == [_tuple("+I", old), _tuple("-U", old), _tuple("+U", new), _tuple("-D", new)]


# -- a random history, in every format, folds back to the source's final state -------------------


def _history(rng: random.Random, steps: int) -> tuple[list[Change], dict[int, Row]]:
    """Random inserts, updates (some of the key) and deletes, and the state they end in."""
    state: dict[int, Row] = {}
    changes: list[Change] = []

    def random_row(key: int) -> Row:
        return {"id": key, "n": rng.randrange(-2**62, 2**62), "x": rng.uniform(-1e6, 1e6),
                "price": Decimal(rng.randrange(-10**27, 10**27)).scaleb(-10), "name": rng.choice(["a", "b", "é", None]),
                "flag": rng.random() < 0.5, "day": dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(20000))}

    for _ in range(steps):
        free = [key for key in range(30) if key not in state]
        op = rng.choice(["insert", "update", "delete"]) if state else "insert"
        if op == "insert" and free:
            row = random_row(rng.choice(free))
            changes.append(("insert", None, row))
            state[row["id"]] = row
        elif state:
            before = state.pop(rng.choice(sorted(state)))
            if op == "delete":
                changes.append(("delete", before, None))
                continue
            after = random_row(before["id"])
            changed = rng.sample(sorted(after), rng.randrange(1, len(after) + 1))
            after = before | {name: after[name] for name in changed}
            if "id" in changed and free:
                after["id"] = rng.choice(free)
            changes.append(("update", before, after))
            state[after["id"]] = after
    return changes, state


def _debezium_events(changes: list[Change]) -> Iterator[str]:
    ops = {"insert": "c", "update": "u", "delete": "d"}
    for ts, (op, before, after) in enumerate(changes):
        payload = {"before": before and _debezium_image(before), "after": after and _debezium_image(after),
                   "op": ops[op], "ts_ms": ts, "source": {"ts_ms": ts}}
        yield _json({"schema": {}, "payload": payload} if ts % 2 else payload)


def _text_image(row: Row) -> Row:
    """A row as Canal writes it: every value a string, booleans as 1 and 0."""
    texts = {True: "1", False: "0", None: None}
    return {name: texts[value] if value is None or isinstance(value, bool) else str(value)
            for name, value in row.items()}


def _changed(before: Row, after: Row) -> Row:
    return {name: value for name, value in before.items() if after[name] != value}


def _canal_events(changes: list[Change]) -> Iterator[str]:
    # Changes of one kind in a row, of different keys, share an event (as rows of one statement).
    index = 0
    while index < len(changes):
        op = changes[index][0]
        group = [changes[index]]
        while (index + len(group) < len(changes) and len(group) < 3 and changes[index + len(group)][0] == op
               and op != "update"):
            group.append(changes[index + len(group)])
        data = [_text_image(after or before) for _, before, after in group if (after or before)]
        event: Row = {"data": data, "type": op.upper(), "isDdl": False, "es": index, "ts": index + 5}
        if op == "update":
            event["old"] = [_text_image(_changed(before, after)) for _, before, after in group if before and after]
        yield _json(event)
        index += len(group)


def _maxwell_events(changes: list[Change]) -> Iterator[str]:
    for ts, (op, before, after) in enumerate(changes):
        image = after or before
        assert image is not None
        event: Row = {"database": "db", "table": "t", "type": op, "ts": ts, "data": image}
        if before and after:
            event["old"] = _changed(before, after)
        yield _json(event)


_RENDERERS: dict[str, Callable[[list[Change]], Iterator[str]]] = {
    "debezium-json": _debezium_events, "canal-json": _canal_events, "maxwell-json": _maxwell_events}


def test_a_random_history_folds_back_to_the_final_state_in_every_format(spark: SparkSession) -> None:
    changes, expected = _history(random.Random(20240917), 150)
    decoded = [_decode(spark, list(render(changes)), fmt).withColumn("format", F.lit(fmt))
               for fmt, render in _RENDERERS.items()]
    rows = decoded[0].unionByName(decoded[1]).unionByName(decoded[2]).collect()
    for fmt in _RENDERERS:
        state: dict[int, Row] = {}
        times = []
        for row in (row.asDict() for row in rows if row["format"] == fmt):
            kind, image = row.pop("rowkind"), {name: row[name] for name in SCHEMA.names}
            times.append(row["_cdc_ts_ms"])
            if kind in ("-U", "-D"):
                assert state.pop(image["id"]) == image, fmt  # a before-image is the row as it was
            else:
                assert kind in ("+I", "+U")
                state[image["id"]] = image
        assert state == expected, fmt
        assert times == sorted(times), fmt


def test_each_format_streams_through_a_table_and_its_changelog_folds_back(spark: SparkSession,
                                                                         tmp_path: Path) -> None:
    """Events -> decode -> the exactly-once sink (rows shuffled to their buckets; the event time
    is the table's sequence.field, so a key's changes keep their order across Spark partitions)
    -> a lookup table, whose changelog folds back into the source's final state."""
    changes, expected = _history(random.Random(7), 60)
    catalog = cl.Catalog(str(tmp_path))
    schema = SCHEMA.append(pa.field(cdc.DEFAULT_EVENT_TIME_COLUMN, pa.int64()))
    for fmt, render in _RENDERERS.items():
        table = catalog.create_table(f"db.{fmt.replace('-', '_')}", schema, primary_keys=["id"], options={
            "bucket": "2", "changelog-producer": "lookup", "sequence.field": cdc.DEFAULT_EVENT_TIME_COLUMN})
        events = spark.createDataFrame([(e,) for e in render(changes)], "value string").repartition(3)
        streaming.write(cdc.decode(events, fmt, table.schema), table)
        rows = {r["id"]: {k: r[k] for k in SCHEMA.names} for r in table.scan().to_arrow().to_pylist()}
        assert rows == expected, fmt
        state: dict[int, Row] = {}
        for change in table.changes(0, table.latest_snapshot().id).to_arrow().to_pylist():
            image = {k: change[k] for k in SCHEMA.names}
            if change["rowkind"] in ("-U", "-D"):
                assert state.pop(image["id"]) == image, fmt
            else:
                state[image["id"]] = image
        assert state == expected, fmt


# -- malformed events ---------------------------------------------------------------------------

LONG_NAME = "z" * 300
MALFORMED = [
    ("debezium-json", '{"op": "c", "after": {"id": 1', "not a JSON object"),
    ("debezium-json", '{"op": "t", "ts_ms": 1}', "unknown op 't'"),
    ("debezium-json", '{"op": "u", "before": null, "after": {"id": 1}}', "no 'before' object"),
    ("canal-json", '{"type": "UPDATE", "data": [{"id": "1"}], "isDdl": false}', "no 'old' object"),
    ("canal-json", '{"type": "INSERT", "isDdl": false}', "no 'data' array of objects"),
    ("maxwell-json", '{"data": {"id": 1}}', "no 'type'"),
    ("maxwell-json", '{"type": "insert", "data": {"id": "x"}}', "column 'id' is not a valid int"),
    ("maxwell-json", '{"type": "insert", "data": {"id": 1, "price": 1e40}}',
     "column 'price' is not a valid decimal(38,10)"),
    ("maxwell-json", f'{{"type": "insert", "data": {{"id": 1, "name": "{LONG_NAME}", "x": "abc"}}}}',
     "column 'x' is not a valid double"),
]


@pytest.mark.parametrize(("fmt", "event", "why"), [MALFORMED[0], MALFORMED[-1]])
def test_a_malformed_event_fails_the_batch_naming_it(spark: SparkSession, fmt: str, event: str, why: str) -> None:
    good = next(_RENDERERS[fmt]([("insert", None, _row(7))]))
    with pytest.raises(Exception, match=r"malformed \S+ event") as failure:
        _decode(spark, [good, event, good], fmt).collect()
    quoted = event if len(event) <= 200 else event[:200] + "..."
    assert f"malformed {fmt} event ({why}): {quoted} " in str(failure.value)


def test_malformed_events_are_skipped_on_request(spark: SparkSession) -> None:
    decoded = []
    for fmt in ("debezium-json", "canal-json", "maxwell-json"):
        events = [event for event_format, event, _ in MALFORMED if event_format == fmt]
        good = list(_RENDERERS[fmt]([("insert", None, _row(1))]))
        decoded.append(_decode(spark, [*events, *good, *events], fmt, malformed=cdc.CdcMalformed.SKIP,
                               event_time_column=None))
    rows = decoded[0].unionByName(decoded[1]).unionByName(decoded[2]).collect()
    assert [tuple(row) for row in rows] == 3 * [_tuple("+I", _row(1))]


def test_a_stream_of_event_files_decodes_and_a_malformed_one_fails_its_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    changes = [("insert", None, _row(1)), ("insert", None, _row(2)), ("update", _row(1), _row(1, "b")),
               ("delete", _row(2), None)]
    events = list(_debezium_events(changes))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text("\n".join(events[:2]) + "\n")
    (tmp_path / "in" / "b.json").write_text("\n".join(events[2:]) + "\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "a.json").write_text(events[0] + "\n" + MALFORMED[1][1] + "\n")

    def run(source: str, seen: list[tuple[Any, ...]]) -> None:
        decoded = cdc.decode(spark.readStream.text(str(tmp_path / source)), "debezium-json", SCHEMA)
        query = (decoded.writeStream.foreachBatch(lambda batch, _: seen.extend(_rows(batch)))
                 .option("checkpointLocation", str(tmp_path / f"checkpoint-{source}"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        finally:
            query.stop()

    seen: list[tuple[Any, ...]] = []
    run("in", seen)
    assert sorted(seen, key=lambda row: row[-1]) == [
        _tuple("+I", _row(1), 0), _tuple("+I", _row(2), 1), _tuple("-U", _row(1), 2), _tuple("+U", _row(1, "b"), 2),
        _tuple("-D", _row(2), 3)]
    seen.clear()
    with pytest.raises(Exception, match="malformed debezium-json event \\(unknown op 't'\\)"):
        run("bad", seen)
    assert seen == []  # the good event of the failed batch reached no sink


# -- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "field", "value"), [
    ({"format": "avro"}, "option", "format"),
    ({"malformed": "ignore"}, "option", "malformed"),
    ({"schema": pa.schema([("id", pa.int32()), ("tags", pa.list_(pa.string()))])}, "column", "tags"),
    ({"schema": T.StructType([T.StructField("b", T.BinaryType())])}, "column", "b"),
    ({"column": "payload"}, "column", "payload"),
    ({"schema": pa.schema([("id", pa.int32()), ("_cdc_ts_ms", pa.int32())])}, "column", "_cdc_ts_ms"),
    ({"schema": pa.schema([("rowkind", pa.string())])}, "column", "rowkind"),
    ({"schema": pa.schema([("t", pa.string())]), "event_time_column": "t"}, "column", "t"),
])  # fmt: skip
def test_requests_that_cannot_be_served_raise_cdc_errors(
    spark: SparkSession, kwargs: dict[str, Any], field: str, value: str | None
) -> None:
    arguments = {"format": "debezium-json", "schema": SCHEMA} | kwargs
    df = spark.createDataFrame([("{}",)], "value string")
    with pytest.raises(CdcError) as failure:
        cdc.decode(df, **arguments)
    assert getattr(failure.value, field) == value
