"""Decoding JSON change events (Debezium, Canal, Maxwell) into changelake rows, in Spark.

:func:`decode` turns a DataFrame of change events, one JSON text per row (a Kafka ``value``, a
line of a text file; batch or streaming), into rows of ``rowkind`` then the columns of a table
schema, then the event time, ready for a table writer: an insert is a ``+I`` of the new row, a
delete a ``-D`` of the old row, and an update a ``-U`` of the before-image (the new row with
the event's old fields over it, as Apache Paimon's CDC parsers build it) then a ``+U`` of the
new row, as Flink's ``debezium-json`` format emits it (Paimon's ``paimon-flink-cdc`` sync
actions emit ``-D``/``+I`` instead; the merge is the same, but an ``input`` changelog and
partial-update or aggregation tables see an update as an update).

Decoding is Spark expressions only: events are parsed as VARIANT (which keeps JSON decimals
exact and tells an absent field from a null one), then every value is cast from its JSON text.
There are no Python UDFs and no actions, so it runs in the executors and on streaming
DataFrames. A malformed event fails the Spark task that meets it (``raise_error``), so a
foreachBatch sink commits nothing of its batch; with ``malformed="skip"`` it is dropped instead.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from changelake.errors import CdcError
from changelake.table.format.kv import RowKind
from changelake.table.write.conform import ROWKIND_COLUMN


class CdcFormat(enum.StrEnum):
    """The change-event formats :func:`decode` reads."""

    DEBEZIUM_JSON = "debezium-json"
    CANAL_JSON = "canal-json"
    MAXWELL_JSON = "maxwell-json"


class CdcMalformed(enum.StrEnum):
    """What :func:`decode` does with a malformed event."""

    FAIL = "fail"
    SKIP = "skip"


# The column decode() puts the event time in unless told otherwise.
DEFAULT_EVENT_TIME_COLUMN = "_cdc_ts_ms"

_INSERT = RowKind.INSERT.symbol
_DELETE = RowKind.DELETE.symbol
_UPDATE_BEFORE = RowKind.UPDATE_BEFORE.symbol
_UPDATE_AFTER = RowKind.UPDATE_AFTER.symbol
# How much of a malformed event its error quotes: enough to find it, not a whole row image.
_QUOTED_CHARS = 200
# A JSON object whose field values are still JSON, so that an absent field can be told from a
# null one (Canal's and Maxwell's "old" hold only the fields an update changed).
_OBJECT = "map<string,variant>"
# What one event turns into: rows of a kind and an image (``base`` with the fields ``overlay``
# holds put over it), each with what is wrong with it, if anything.
_CHANGES = "array<struct<kind:string,base:map<string,variant>,overlay:map<string,variant>,problem:string>>"
# The types whose values decode() casts from JSON text; nested and binary columns have no one
# JSON encoding the three formats share.
_READABLE = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
             T.DecimalType, T.StringType, T.DateType, T.TimestampType, T.TimestampNTZType)
_MAX_DECIMAL_PRECISION = 38  # Spark's
_INTEGER = r"^-?[0-9]+$"
_ARROW_TYPES: dict[pa.DataType, T.DataType] = {
    pa.bool_(): T.BooleanType(), pa.int8(): T.ByteType(), pa.int16(): T.ShortType(),
    pa.int32(): T.IntegerType(), pa.int64(): T.LongType(), pa.float32(): T.FloatType(),
    pa.float64(): T.DoubleType(), pa.string(): T.StringType(), pa.large_string(): T.StringType(),
    pa.date32(): T.DateType(),
}  # fmt: skip
# Internal columns between the steps of decode(); none is in its result.
_TEXT, _EVENT, _TIME, _ROWS, _PROBLEM, _ROW = (
    "__cdc_text", "__cdc_event", "__cdc_time", "__cdc_rows", "__cdc_problem", "__cdc_row")

_Choice = TypeVar("_Choice", bound=enum.StrEnum)


def decode(
    df: DataFrame,
    format: CdcFormat | str,
    schema: pa.Schema | T.StructType,
    *,
    column: str = "value",
    malformed: CdcMalformed | str = CdcMalformed.FAIL,
    event_time_column: str | None = DEFAULT_EVENT_TIME_COLUMN,
) -> DataFrame:
    """Decode the change events in ``df[column]`` (string or binary JSON) into ``rowkind``
    (``+I``, ``-U``, ``+U`` or ``-D``) then the columns of ``schema`` (a table's Arrow schema, or a Spark
    StructType), then ``event_time_column`` (a long: the event's time in epoch milliseconds,
    for a table's ``sequence.field``). If ``schema`` has a column of that name (a BIGINT), the
    event time fills it instead; None leaves the event time out.

    Events of ``format`` (a :class:`CdcFormat`):

    * ``debezium-json``, with or without the schema envelope: op ``c``/``r`` is a ``+I`` of
      ``after``, ``u`` a ``-U`` of ``after`` with ``before`` over it then a ``+U`` of ``after``,
      ``d`` a ``-D`` of ``before``; a null value or payload (a tombstone) and a schema-change
      event (``tableChanges``, no op) are skipped. Event time: ``source.ts_ms`` (when the
      database made the change), else ``ts_ms``.
    * ``canal-json``: each row of ``data``, by ``type``: ``INSERT`` (or ``ROW``) a ``+I``,
      ``UPDATE`` a ``-U`` of the row with its ``old`` entry over it then a ``+U``, ``DELETE``
      a ``-D``; DDL events are skipped. Event time: ``es``, else ``ts``.
    * ``maxwell-json``: ``insert``, ``update`` (``old`` over ``data``) and ``delete`` of
      ``data`` as for Canal; events without ``data`` (DDL) are skipped. Event time: ``ts``
      (seconds) in milliseconds.

    An event is malformed if it is not a JSON object, has an unknown op or type, lacks an
    image its op needs, or holds a value that does not cast to its column's type (a DATE may
    also be days since the epoch, as Debezium writes it). With ``malformed="fail"`` the Spark
    task that meets one fails with ``malformed <format> event (<why>): <event text>``; with
    ``"skip"`` it is dropped, all its rows together. Nothing runs until the result is used, and
    streaming DataFrames decode as batch ones do.

    Decoding keeps to ``schema``: event fields it lacks are dropped. To have the table follow
    its source's schema (columns the source gains or widens, from Debezium's envelope and
    schema-change events, Canal's ``mysqlType`` and DDL, Maxwell's table definitions), sync
    the raw events with :func:`changelake.streaming.sync_cdc_stream` instead, which applies
    each batch's schema changes, then decodes with this function.
    """
    fmt = choice(CdcFormat, format, "format")
    policy = choice(CdcMalformed, malformed, "malformed")
    fields = _spark_fields(schema)
    _check_columns(df, column, fields, event_time_column)
    # A null Kafka value is never an event (Debezium's tombstones are null values).
    events = df.select(df[column].cast(T.StringType()).alias(_TEXT)).filter(F.col(_TEXT).isNotNull())
    events = events.select(_TEXT, _object(F.try_parse_json(_TEXT)).alias(_EVENT))
    if fmt is CdcFormat.DEBEZIUM_JSON:
        events = _debezium_payloads(events)
    format_changes, event_time = _FORMATS[fmt](F.col(_EVENT))
    changes = F.when(F.col(_EVENT).isNull(), _malformed(F.lit("not a JSON object"))).otherwise(format_changes)
    image = [field for field in fields if field.name != event_time_column]
    # An event's rows stay together until it is judged, so that a malformed event is dropped
    # whole (never the -U of an update without its +U); each step is a select of its own, so
    # that no value is read or cast twice.
    events = events.select(_TEXT, event_time.alias(_TIME),
                           F.transform(changes, lambda change: _texts(change, image)).alias(_ROWS))
    events = events.select(_TEXT, _TIME, F.transform(_ROWS, lambda row: _cast(row, image)).alias(_ROWS))
    events = events.select(_TEXT, _TIME, _ROWS, _problem(F.col(_ROWS), image).alias(_PROBLEM))
    rows = events.filter(_accepted(fmt, policy)).select(_TIME, F.explode(_ROWS).alias(_ROW))
    values = {field.name: F.col(_ROW)[_value_field(i)] for i, field in enumerate(image)}
    names = [field.name for field in fields]
    if event_time_column is not None:
        values[event_time_column] = F.col(_TIME)
        if event_time_column not in names:
            names.append(event_time_column)
    return rows.select(F.col(_ROW)["kind"].alias(ROWKIND_COLUMN), *(values[name].alias(name) for name in names))


# Each row is a struct of its kind, its problem, and per image column (by position, so that no
# column name can clash with the others) its JSON text and its value.
def _text_field(i: int) -> str:
    return f"text{i}"


def _value_field(i: int) -> str:
    return f"value{i}"


def _texts(change: Column, fields: list[T.StructField]) -> Column:
    """A change as its kind, its problem and the JSON text of each column of its image."""
    return F.struct(change["kind"].alias("kind"), change["problem"].alias("problem"),
                    *(_value_text(change, field.name).alias(_text_field(i)) for i, field in enumerate(fields)))


def _cast(row: Column, fields: list[T.StructField]) -> Column:
    """A row with each column's value cast from its text (null where it does not cast)."""
    return F.struct(row["kind"].alias("kind"), row["problem"].alias("problem"),
                    *(row[_text_field(i)].alias(_text_field(i)) for i in range(len(fields))),
                    *(_typed(row[_text_field(i)], field.dataType).alias(_value_field(i))
                      for i, field in enumerate(fields)))


def _problem(rows: Column, fields: list[T.StructField]) -> Column:
    """What is wrong with an event: the first problem of its rows, a row's own or a value that
    does not cast; null for a well-formed event."""

    def problem(row: Column) -> Column:
        return F.coalesce(row["problem"], *(
            F.when(row[_text_field(i)].isNotNull() & row[_value_field(i)].isNull(),
                   F.lit(f"column {field.name!r} is not a valid {field.dataType.simpleString()}"))
            for i, field in enumerate(fields)))

    return F.get(F.filter(F.transform(rows, problem), lambda found: found.isNotNull()), 0)


def _accepted(fmt: CdcFormat, policy: CdcMalformed) -> Column:
    """The filter that keeps well-formed events and fails on (or drops) the others."""
    problem, text = F.col(_PROBLEM), F.col(_TEXT)
    if policy is CdcMalformed.SKIP:
        return problem.isNull()
    quoted = (F.when(F.length(text) > _QUOTED_CHARS, F.concat(F.substring(text, 1, _QUOTED_CHARS), F.lit("...")))
              .otherwise(text))
    # A filter, not a column: a column that raises would be pruned by any later select that
    # leaves it out, a filter runs on every event.
    message = F.concat(F.lit(f"malformed {fmt} event ("), problem, F.lit("): "), quoted)
    return F.when(problem.isNull(), F.lit(True)).otherwise(F.raise_error(message))


# -- the formats: an event (a JSON object) to its changes and its event time -----------------


def _debezium_payloads(events: DataFrame) -> DataFrame:
    """Events with Debezium's schema envelope unwrapped (as in Paimon: when the JSON has a
    "schema", its "payload" is the event), less tombstones (a null payload)."""
    event, payload = F.col(_EVENT), F.col(_EVENT)["payload"]
    enveloped = F.map_contains_key(event, "schema")
    tombstone = F.coalesce(enveloped & _is_null(payload), F.lit(False))
    # A select of its own, so that the payload is read into an object once, not once per use.
    return events.filter(~tombstone).select(_TEXT, F.when(enveloped, _object(payload)).otherwise(event).alias(_EVENT))


def _debezium(event: Column) -> tuple[Column, Column]:
    op = _text(event["op"])
    before, after = _object(event["before"]), _object(event["after"])
    changes = (
        # A schema-change event (Debezium's schema-history topic) carries no row: it is what
        # cdc_sync reads the source's new columns from.
        F.when(op.isNull() & (F.map_contains_key(event, "tableChanges") | F.map_contains_key(event, "ddl")),
               _nothing())
        .when(op.isin("c", "r"), F.array(_change(_INSERT, after, "after")))
        .when(op == "u", F.array(_change(_UPDATE_BEFORE, after, "after", overlay=(before, "before")),
                                 _change(_UPDATE_AFTER, after, "after")))
        .when(op == "d", F.array(_change(_DELETE, before, "before")))
        .otherwise(_unknown("op", op))
    )
    # The database's time of the change, not Debezium's (ts_ms): it stays the same when a
    # connector re-reads the log after a restart, so replayed events do not win over newer ones.
    event_time = F.coalesce(F.try_variant_get(event["source"], "$.ts_ms", "bigint"), _long(event["ts_ms"]))
    return changes, event_time


def _canal(event: Column) -> tuple[Column, Column]:
    kind = _text(event["type"])
    rows = F.try_variant_get(event["data"], "$", f"array<{_OBJECT}>")
    old = F.try_variant_get(event["old"], "$", f"array<{_OBJECT}>")

    def each(change: Callable[[Column, Column], list[Column]]) -> Column:
        return F.flatten(F.transform(rows, lambda row, i: F.array(*change(row, i))))

    changes = (
        F.when(F.try_variant_get(event["isDdl"], "$", "boolean"), _nothing())
        .when(rows.isNull(), _malformed(F.lit("no 'data' array of objects")))
        # Paimon reads ROW (Canal's full-table sync) as an insert too.
        .when(kind.isin("INSERT", "ROW"), each(lambda row, _: [_change(_INSERT, row, "data")]))
        .when(kind == "UPDATE", each(lambda row, i: [
            _change(_UPDATE_BEFORE, row, "data", overlay=(F.get(old, i), "old")), _change(_UPDATE_AFTER, row, "data")]))
        .when(kind == "DELETE", each(lambda row, _: [_change(_DELETE, row, "data")]))
        .otherwise(_unknown("type", kind))
    )
    # es is when the database executed the change, ts when Canal read it (see _debezium).
    return changes, F.coalesce(_long(event["es"]), _long(event["ts"]))


def _maxwell(event: Column) -> tuple[Column, Column]:
    kind = _text(event["type"])
    data, old = _object(event["data"]), _object(event["old"])
    changes = (
        F.when(kind.isNull(), _unknown("type", kind))
        # DDL and bootstrap markers carry no row; Paimon skips them.
        .when(_is_null(event["data"]), _nothing())
        .when(kind == "insert", F.array(_change(_INSERT, data, "data")))
        .when(kind == "update", F.array(_change(_UPDATE_BEFORE, data, "data", overlay=(old, "old")),
                                        _change(_UPDATE_AFTER, data, "data")))
        .when(kind == "delete", F.array(_change(_DELETE, data, "data")))
        .otherwise(_unknown("type", kind))
    )
    return changes, F.try_multiply(_long(event["ts"]), F.lit(1000))


_FORMATS: dict[CdcFormat, Callable[[Column], tuple[Column, Column]]] = {
    CdcFormat.DEBEZIUM_JSON: _debezium,
    CdcFormat.CANAL_JSON: _canal,
    CdcFormat.MAXWELL_JSON: _maxwell,
}


# -- building blocks ---------------------------------------------------------------------------


def _object(value: Column) -> Column:
    """A JSON value (VARIANT) as an object, or null if it is null or not an object."""
    return F.try_variant_get(value, "$", _OBJECT)


def _text(value: Column) -> Column:
    """A JSON value as text: strings unquoted, numbers with their exact value, objects as JSON."""
    return F.try_variant_get(value, "$", "string")


def _long(value: Column) -> Column:
    """A JSON number (or numeric string) as a long, or null."""
    return F.try_variant_get(value, "$", "bigint")


def _is_null(value: Column) -> Column:
    """Whether a field of a JSON object is absent or null."""
    return value.isNull() | F.is_variant_null(value)


def _change(kind: str, base: Column, base_field: str, *, overlay: tuple[Column, str] | None = None) -> Column:
    """One row of ``kind`` whose image is ``base`` with ``overlay``'s fields over it, both named
    (by their field in the event) in the problem when they are missing."""
    problem = F.when(base.isNull(), F.lit(f"no {base_field!r} object"))
    over = F.lit(None).cast(_OBJECT)
    if overlay is not None:
        over, over_field = overlay
        problem = problem.when(over.isNull(), F.lit(f"no {over_field!r} object"))
    return F.struct(F.lit(kind).alias("kind"), base.alias("base"), over.alias("overlay"), problem.alias("problem"))


def _malformed(problem: Column) -> Column:
    """The changes of a malformed event: one row that carries only the problem."""
    return F.array(F.struct(F.lit(None).cast(T.StringType()).alias("kind"), F.lit(None).cast(_OBJECT).alias("base"),
                            F.lit(None).cast(_OBJECT).alias("overlay"), problem.alias("problem")))


def _unknown(field: str, value: Column) -> Column:
    """The changes of an event whose ``field`` (its op or type) is missing or unknown."""
    return _malformed(F.when(value.isNull(), F.lit(f"no {field!r}"))
                      .otherwise(F.concat(F.lit(f"unknown {field} '"), value, F.lit("'"))))


def _nothing() -> Column:
    """The changes of an event that is skipped."""
    return F.array().cast(_CHANGES)


def _value_text(change: Column, name: str) -> Column:
    """Column ``name`` of a change's image as JSON text: from its overlay if that has the field
    (even as null: a changed value that was null), else from its base."""
    base, overlay = change["base"], change["overlay"]
    return _text(F.when(F.map_contains_key(overlay, name), overlay[name]).otherwise(base[name]))


def _typed(text: Column, data_type: T.DataType) -> Column:
    """JSON text as ``data_type``, null where it does not cast."""
    if isinstance(data_type, T.DateType):
        # Debezium writes a DATE as days since the epoch; a cast would read the number as a year.
        return (F.when(text.rlike(_INTEGER), F.date_from_unix_date(text.try_cast(T.IntegerType())))
                .otherwise(text.try_cast(data_type)))
    if isinstance(data_type, (T.TimestampType, T.TimestampNTZType)):
        # A number (Debezium's milli- or microseconds: the event does not say which) would also
        # be read as a year; it counts as a value that does not cast.
        return F.when(~text.rlike(_INTEGER), text.try_cast(data_type))
    return text.try_cast(data_type)


# -- arguments ---------------------------------------------------------------------------------


def choice(kind: type[_Choice], value: _Choice | str, option: str) -> _Choice:
    """``value`` as a member of ``kind`` (a :class:`CdcFormat`, ...); a CdcError naming
    ``option`` if it is none."""
    try:
        return kind(value)
    except ValueError:
        raise CdcError(f"is {value!r}; expected one of {', '.join(kind)}", option=option) from None


def _spark_fields(schema: pa.Schema | T.StructType) -> list[T.StructField]:
    """The columns of ``schema`` as Spark fields, each of a type decode() can read."""
    named: list[tuple[str, T.DataType | None, str]]
    if isinstance(schema, T.StructType):
        named = [(field.name, field.dataType, field.dataType.simpleString()) for field in schema.fields]
    else:
        named = [(field.name, _spark_type(field.type), str(field.type)) for field in schema]
    fields = []
    for name, data_type, type_name in named:
        if not isinstance(data_type, _READABLE):
            raise CdcError(f"is of type {type_name}, which CDC decoding does not read "
                           "(it reads booleans, numbers, decimals, strings, dates and timestamps)", column=name)
        fields.append(T.StructField(name, data_type))
    return fields


def _spark_type(data_type: pa.DataType) -> T.DataType | None:
    """The Spark type of an Arrow type decode() reads, or None."""
    if pa.types.is_decimal(data_type) and data_type.precision <= _MAX_DECIMAL_PRECISION:
        return T.DecimalType(data_type.precision, data_type.scale)
    if pa.types.is_timestamp(data_type):
        return T.TimestampType() if data_type.tz is not None else T.TimestampNTZType()
    return _ARROW_TYPES.get(data_type)


def _check_columns(df: DataFrame, column: str, fields: list[T.StructField], event_time_column: str | None) -> None:
    """That the events are a text column of ``df`` and the output columns have distinct names."""
    if column not in df.columns:
        raise CdcError(f"is not a column of the input (it has {df.columns})", column=column)
    if not isinstance(df.schema[column].dataType, (T.StringType, T.BinaryType)):
        raise CdcError(f"holds {df.schema[column].dataType.simpleString()}; events are JSON text (string or binary)",
                       column=column)
    names = [ROWKIND_COLUMN, *(field.name for field in fields)]
    if event_time_column is not None:
        time_field = next((field for field in fields if field.name == event_time_column), None)
        if time_field is None:
            names.append(event_time_column)
        elif not isinstance(time_field.dataType, T.LongType):
            raise CdcError(f"is the event time column, which must be a bigint (epoch milliseconds), "
                           f"not {time_field.dataType.simpleString()}", column=event_time_column)
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise CdcError(f"output columns {clashes} appear more than once (rowkind, the schema's columns and the "
                       "event time column)", column=clashes[0])
