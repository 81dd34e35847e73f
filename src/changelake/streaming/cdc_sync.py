"""A CDC pipeline into a table that follows its source's schema: each micro-batch of raw change
events first adds the columns the source gained (and widens the ones it widened) as one schema
change, then is decoded against the table's new schema and committed exactly once.

As Apache Paimon's CDC sync actions (``kafka_sync_table``), the source's schema is read from the
events: Debezium's schema envelope and its schema-change events (``tableChanges``), Canal's
``mysqlType`` and DDL events (``ALTER TABLE ... ADD COLUMN``), Maxwell's table definitions
(``table-alter``, ``table-create``); a field the events carry without a type (Maxwell's rows,
Debezium without the envelope, Canal without ``mysqlType``) is added as STRING, as Paimon adds
untyped fields. A column the source narrows keeps the table's wider type (Paimon ignores such
changes too); a column the source changes to a type the table's cannot hold and cannot be
widened to is a :class:`~changelake.errors.CdcError` before anything of the batch is written.
A column the source drops stays in the table, null in the rows written after (as in Paimon).

The declarations are gathered by one Spark aggregation per batch (distinct declarations, a few
rows, to the driver); the rows themselves are decoded and written by Spark as
:func:`changelake.streaming.cdc.decode` and the sink do.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from changelake.api.table import Table
from changelake.changelog import producers
from changelake.errors import CdcError
from changelake.streaming import cdc, cdc_types
from changelake.streaming.cdc import DEFAULT_EVENT_TIME_COLUMN, CdcFormat, CdcMalformed
from changelake.streaming.sink import ForeachBatchSink, commit_batch, query_id, start_query
from changelake.table.schema_update import widens
from changelake.table.write import landing
from changelake.table.write.conform import ROWKIND_COLUMN


class _Typing(enum.StrEnum):
    """How a declaration gives its column's type."""

    MYSQL = "mysql"  # a MySQL type name (Canal's mysqlType, Debezium's tableChanges)
    DEBEZIUM = "debezium"  # a Kafka Connect type and logical name (Debezium's envelope)
    MAXWELL = "maxwell"  # a column of Maxwell's table definition
    UNTYPED = "untyped"  # a field of a row image, no type
    DDL = "ddl"  # an ALTER TABLE statement, to be read on the driver


# One declaration: a column and its type as its event gives it (or a DDL statement).
_DECLARATION = ("struct<typing:string,name:string,type:string,logical:string,length:int,scale:int,"
                "signed:boolean,position:int,sql:string>")
_OBJECT = "map<string,variant>"
_DEBEZIUM_SCHEMA = "array<struct<field:string,fields:array<struct<field:string,type:string,name:string," \
                   "parameters:map<string,string>>>>>"
_DEBEZIUM_TABLE_CHANGES = "array<struct<type:string,table:struct<columns:array<struct<name:string," \
                          "typeName:string,typeExpression:string,length:int,scale:int,position:int>>>>>"
_MAXWELL_COLUMNS = "array<struct<name:string,type:string,signed:boolean,precision:int,scale:int," \
                   "`column-length`:int>>"
# DDL statements add their columns after those whose position the source gives.
_DDL_POSITION = 1 << 20


@dataclass(frozen=True, kw_only=True)
class _Declared:
    """A column of the source: its table type, whether the source typed it, its position."""

    type: pa.DataType
    typed: bool
    position: int


class CdcSyncSink(ForeachBatchSink):
    """A ``foreachBatch`` function that syncs raw change events (JSON text in ``column``) of
    ``format`` into ``table`` following the source's schema: per micro-batch, the columns the
    source gained or widened land as one schema change, then the batch is decoded with
    :func:`~changelake.streaming.cdc.decode` against the new schema and committed exactly once
    as (query id, batch id), as :class:`~changelake.streaming.ForeachBatchSink` commits (a
    replayed batch changes and writes nothing). The event time fills ``event_time_column``
    when the table has that column. Use :func:`sync_cdc_stream` to start the query."""

    def __init__(self, table: Table | str, format: CdcFormat | str, *, column: str = "value",
                 malformed: CdcMalformed | str = CdcMalformed.FAIL,
                 event_time_column: str | None = DEFAULT_EVENT_TIME_COLUMN, commit_user: str | None = None,
                 checkpoint_location: str | None = None) -> None:
        super().__init__(table, commit_user=commit_user, checkpoint_location=checkpoint_location)
        self.format = cdc.choice(CdcFormat, format, "format")
        self.malformed = cdc.choice(CdcMalformed, malformed, "malformed")
        self.column = column
        self.event_time_column = event_time_column

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        user = self.commit_user or query_id(batch_df.sparkSession, self.table, self.checkpoint_location)
        table = self.table
        table.refresh()  # another writer, or this query before a restart, may have changed it
        if landing.replayed(table.context, producers.for_table(table.context), user, batch_id):
            return
        # Read twice (declarations, then rows): kept after the first read, as Spark's guide has
        # a foreachBatch function that uses its batch more than once do.
        batch_df.persist()
        try:
            follow_schema(batch_df, table, self.format, column=self.column, event_time_column=self.event_time_column)
            time_column = self.event_time_column if self.event_time_column in table.schema.names else None
            rows = cdc.decode(batch_df, self.format, table.schema, column=self.column, malformed=self.malformed,
                              event_time_column=time_column)
            commit_batch(rows, table, user, batch_id, streaming=True)
        finally:
            batch_df.unpersist()


def sync_cdc_stream(events: DataFrame, table: Table | str, format: CdcFormat | str, *, checkpoint_location: str,
                    column: str = "value", malformed: CdcMalformed | str = CdcMalformed.FAIL,
                    event_time_column: str | None = DEFAULT_EVENT_TIME_COLUMN,
                    trigger: Mapping[str, Any] | None = None, commit_user: str | None = None,
                    query_name: str | None = None) -> StreamingQuery:
    """Start a streaming query that syncs the raw change events of ``events`` (a Kafka topic's
    ``value``, lines of text files) into ``table`` through :class:`CdcSyncSink`, following the
    source's schema, on classic Spark or Spark Connect. ``trigger`` holds
    ``DataStreamWriter.trigger``'s keywords, e.g. ``{"availableNow": True}``."""
    sink = CdcSyncSink(table, format, column=column, malformed=malformed, event_time_column=event_time_column,
                       commit_user=commit_user, checkpoint_location=checkpoint_location)
    return start_query(events, sink, checkpoint_location=checkpoint_location, trigger=trigger, query_name=query_name)


def follow_schema(events: DataFrame, table: Table, format: CdcFormat | str, *, column: str = "value",
                  event_time_column: str | None = DEFAULT_EVENT_TIME_COLUMN) -> None:
    """Add to ``table`` the columns the change events of ``events`` declare that it lacks,
    and widen those they declare wider, as one schema change (one Spark job reads the
    declarations). A declared type the table's column can neither hold nor be widened to
    raises CdcError, changing nothing."""
    fmt = cdc.choice(CdcFormat, format, "format")
    if column not in events.columns:
        raise CdcError(f"is not a column of the input (it has {events.columns})", column=column)
    rows = events.select(F.explode(_DECLARATIONS[fmt](events[column])).alias("d")).select("d.*").distinct().collect()
    declared = _merged(table.name, rows)
    schema = table.schema
    added, widened = [], []
    for name, source in sorted(declared.items(), key=lambda item: (item[1].position, item[0])):
        if name == event_time_column:
            continue  # the event time fills it
        if name not in schema.names:
            if name == ROWKIND_COLUMN:
                raise CdcError("is a column of the source, and the name CDC rows give their kind: rename it at "
                               "the source", table=table.name, column=name)
            added.append((name, source.type))
            continue
        current = schema.field(name).type
        if source.typed and not _holds(current, source.type):
            if not widens(current, source.type):
                raise CdcError(f"is {current} in the table; the source changed it to {source.type}, which is not a "
                               "widening of it (int8 -> int16 -> int32 -> int64, float32 -> float64, a decimal's "
                               "precision up at the same scale); nothing of the batch was written",
                               table=table.name, column=name)
            widened.append((name, source.type))
    with table.update_schema() as update:  # lands nothing when there is no change
        for name, data_type in added:
            update.add_column(name, data_type)
        for name, data_type in widened:
            update.update_column(name, data_type)


def _merged(table: str, rows: list[Row]) -> dict[str, _Declared]:
    """Each declared column once: the widest of its typed declarations (a source that widened
    it in the batch also declared its old type), else STRING for an untyped one."""
    declared: dict[str, _Declared] = {}
    try:
        found_columns = [found for row in rows for found in _declarations(row)]
    except CdcError as error:
        raise error.in_table(table) from None
    for name, found in found_columns:
        known = declared.get(name)
        # A typed declaration wins over untyped ones, whose positions (sorted field names) and
        # STRING type are only guesses.
        if known is None or (found.typed and not known.typed):
            declared[name] = found
        elif known.typed and not found.typed:
            continue
        elif found.typed and found.type != known.type:
            if _holds(found.type, known.type):
                known, found = found, known
            elif not _holds(known.type, found.type):
                raise CdcError(f"is declared both {known.type} and {found.type} by the batch's events, neither "
                               "of which holds the other", table=table, column=name)
            declared[name] = _Declared(type=known.type, typed=True, position=min(known.position, found.position))
        else:
            declared[name] = _Declared(type=known.type, typed=known.typed, position=min(known.position, found.position))
    return declared


def _declarations(row: Row) -> list[tuple[str, _Declared]]:
    """The columns one collected declaration gives (a DDL statement gives several or none)."""
    typing, name = _Typing(row["typing"]), row["name"]
    position = row["position"] if row["position"] is not None else _DDL_POSITION
    match typing:
        case _Typing.DDL:
            return [(column, _Declared(type=cdc_types.mysql_type(text, column=column), typed=True,
                                               position=_DDL_POSITION + i))
                    for i, (column, text) in enumerate(cdc_types.altered_columns(row["sql"] or ""))]
        case _Typing.MYSQL:
            data_type = cdc_types.mysql_type(row["type"] or "", length=row["length"], scale=row["scale"], column=name)
        case _Typing.DEBEZIUM:
            data_type = cdc_types.debezium_type(row["type"], row["logical"], length=row["length"],
                                                scale=row["scale"], column=name)
        case _Typing.MAXWELL:
            data_type = cdc_types.maxwell_type(row["type"] or "", signed=row["signed"], length=row["length"],
                                               scale=row["scale"], column=name)
        case _Typing.UNTYPED:
            return [(name, _Declared(type=pa.string(), typed=False, position=position))]
    return [(name, _Declared(type=data_type, typed=True, position=position))]


def _holds(table_type: pa.DataType, source_type: pa.DataType) -> bool:
    """Whether every value of ``source_type`` reads into a column of ``table_type`` as it is:
    the same type, a narrower one of its kind, or anything into a STRING (as its text)."""
    if table_type == source_type or widens(source_type, table_type) or pa.types.is_string(table_type):
        return True
    if pa.types.is_decimal(table_type) and pa.types.is_decimal(source_type):
        return bool(source_type.scale <= table_type.scale
                    and source_type.precision - source_type.scale <= table_type.precision - table_type.scale)
    if pa.types.is_timestamp(table_type) and pa.types.is_timestamp(source_type):
        units = ("s", "ms", "us", "ns")
        return units.index(source_type.unit) <= units.index(table_type.unit)
    return False


# -- the declarations of each format's events, as Spark expressions --------------------------


def _declaration(typing: _Typing, name: Column | None = None, *, type: Column | None = None,
                 logical: Column | None = None, length: Column | None = None, scale: Column | None = None,
                 signed: Column | None = None, position: Column | None = None, sql: Column | None = None) -> Column:
    def value(column: Column | None, spark_type: str) -> Column:
        return (F.lit(None) if column is None else column).cast(spark_type)

    return F.struct(F.lit(typing.value).alias("typing"), value(name, "string").alias("name"),
                    value(type, "string").alias("type"), value(logical, "string").alias("logical"),
                    value(length, "int").alias("length"), value(scale, "int").alias("scale"),
                    value(signed, "boolean").alias("signed"), value(position, "int").alias("position"),
                    value(sql, "string").alias("sql"))


def _none() -> Column:
    return F.array().cast(f"array<{_DECLARATION}>")


def _untyped(image: Column) -> Column:
    """The fields of a row image (a JSON object), without types."""
    return F.transform(F.map_keys(image), lambda key, i: _declaration(_Typing.UNTYPED, key, position=i))


def _object(value: Column) -> Column:
    return F.try_variant_get(value, "$", _OBJECT)


def _parsed(text: Column) -> Column:
    return _object(F.try_parse_json(text.cast("string")))


def _debezium(text: Column) -> Column:
    event = _parsed(text)
    enveloped = F.coalesce(F.map_contains_key(event, "schema"), F.lit(False))
    payload = F.when(enveloped, _object(event["payload"])).otherwise(event)
    # As Paimon: the fields of "after" in the envelope's schema, else those of "before".
    parts = F.try_variant_get(event["schema"], "$.fields", _DEBEZIUM_SCHEMA)
    image = F.coalesce(F.get(F.filter(parts, lambda part: part["field"] == "after"), 0),
                       F.get(F.filter(parts, lambda part: part["field"] == "before"), 0))["fields"]
    typed = F.transform(image, lambda field, i: _declaration(
        _Typing.DEBEZIUM, field["field"], type=field["type"], logical=field["name"],
        length=F.coalesce(field["parameters"]["connect.decimal.precision"], field["parameters"]["length"]),
        scale=field["parameters"]["scale"], position=i))
    untyped = _untyped(F.coalesce(_object(payload["after"]), _object(payload["before"]), F.create_map().cast(_OBJECT)))
    changes = F.try_variant_get(payload["tableChanges"], "$", _DEBEZIUM_TABLE_CHANGES)
    altered = F.flatten(F.transform(changes, lambda change: F.when(
        change["type"].isin("CREATE", "ALTER"),
        F.transform(change["table"]["columns"], lambda c, i: _declaration(
            _Typing.MYSQL, c["name"], type=F.coalesce(c["typeExpression"], c["typeName"]), length=c["length"],
            scale=c["scale"], position=F.coalesce(c["position"], i)))).otherwise(_none())))
    return F.concat(F.coalesce(typed, untyped), F.coalesce(altered, _none()))


def _canal(text: Column) -> Column:
    event = _parsed(text)
    # Read from the text, not the VARIANT, whose objects keep their fields sorted, not in order.
    mysql_types = F.from_json(F.get_json_object(text.cast("string"), "$.mysqlType"), "map<string,string>")
    typed = F.transform(F.map_entries(mysql_types), lambda entry, i: _declaration(
        _Typing.MYSQL, entry["key"], type=entry["value"], position=i))
    rows = F.try_variant_get(event["data"], "$", f"array<{_OBJECT}>")
    untyped = F.flatten(F.transform(rows, _untyped))
    ddl = F.array(_declaration(_Typing.DDL, sql=F.try_variant_get(event["sql"], "$", "string")))
    is_ddl = F.coalesce(F.try_variant_get(event["isDdl"], "$", "boolean"), F.lit(False))
    return F.when(is_ddl, ddl).otherwise(F.coalesce(typed, untyped, _none()))


def _maxwell(text: Column) -> Column:
    event = _parsed(text)
    kind = F.try_variant_get(event["type"], "$", "string")
    columns = F.try_variant_get(event["def"], "$.columns", _MAXWELL_COLUMNS)
    defined = F.transform(columns, lambda c, i: _declaration(
        _Typing.MAXWELL, c["name"], type=c["type"], length=F.coalesce(c["precision"], c["column-length"]),
        scale=c["scale"], signed=c["signed"], position=i))
    return (F.when(kind.isin("table-alter", "table-create"), F.coalesce(defined, _none()))
            .otherwise(F.coalesce(_untyped(_object(event["data"])), _none())))


_DECLARATIONS: dict[CdcFormat, Callable[[Column], Column]] = {
    CdcFormat.DEBEZIUM_JSON: _debezium,
    CdcFormat.CANAL_JSON: _canal,
    CdcFormat.MAXWELL_JSON: _maxwell,
}
