"""The table types of the columns a CDC source declares, as Apache Paimon's CDC sync actions
map them (``MySqlTypeUtils``, ``DebeziumSchemaUtils``), kept to the types CDC decoding reads.

A source declares its columns' types in MySQL's words (Canal's ``mysqlType``, the columns of
Debezium's schema-change events, Maxwell's table definitions, ``ALTER TABLE`` statements) or
in Kafka Connect's (the schema in Debezium's envelope). Each maps to the Paimon type Paimon's
sync actions give it; a type :func:`changelake.streaming.cdc.decode` does not read (binary,
TIME, SET) becomes STRING, as Paimon's ``to-string`` type mapping makes it, and Debezium's
numeric timestamps (``io.debezium.time.Timestamp``, ``MicroTimestamp``, ``NanoTimestamp``)
stay the BIGINT counts they are, since the decoder reads timestamps from text only.
"""

from __future__ import annotations

import re

import pyarrow as pa

from changelake.errors import CdcError
from changelake.table.format import types

_STRING = "STRING"
_MAX_DECIMAL_PRECISION = 38
# JDBC's length of a DATETIME without fractions ("2023-03-23 17:20:00"): a length of at least
# this is a display length, not a precision (Paimon's MySqlTypeUtils reads it so).
_JDBC_TIMESTAMP_LENGTH = 19
# A name (DOUBLE PRECISION is two words), its length and scale, its attributes (UNSIGNED, ...).
_MYSQL_TYPE = re.compile(r"\s*([A-Za-z]+(?:\s+PRECISION)?)\s*(?:\((.*)\))?((?:\s+[A-Za-z]+)*)\s*", re.DOTALL)
_UNSIGNED = re.compile(r"\s+(?:UNSIGNED|SIGNED|ZEROFILL)\b", re.IGNORECASE)


def mysql_type(text: str, *, length: int | None = None, scale: int | None = None, column: str) -> pa.DataType:
    """The table type of a MySQL column type, e.g. ``int(11)``, ``bigint unsigned``,
    ``decimal(10,2)``, ``datetime(3)``, ``varchar(20)``. A length or scale in the text wins
    over ``length`` and ``scale`` (Debezium's schema-change events give them apart)."""
    match = _MYSQL_TYPE.fullmatch(text)
    if match is None:
        raise CdcError(f"has MySQL type {text!r}, which is not a type name", column=column)
    name = " ".join(f"{match.group(1)} {match.group(3)}".upper().split())
    if match.group(2) is not None and not name.startswith(("ENUM", "SET")):  # their values, not lengths
        numbers = [part.strip() for part in match.group(2).split(",")]
        if not all(number.isdigit() for number in numbers) or len(numbers) > 2:
            raise CdcError(f"has MySQL type {text!r}, whose length is not one or two numbers", column=column)
        length, scale = int(numbers[0]), int(numbers[1]) if len(numbers) > 1 else 0
    paimon = _mysql_paimon_type(name, length, scale)
    if paimon is None:
        raise CdcError(f"has MySQL type {text!r}, which Paimon's CDC type mapping does not know", column=column)
    return _readable(paimon)


def _mysql_paimon_type(name: str, length: int | None, scale: int | None) -> str | None:
    """Paimon's ``MySqlTypeUtils.toDataType`` (default type mapping) of a MySQL type name in
    upper case, with its attributes (``UNSIGNED``, ``ZEROFILL``) after it."""
    unsigned = bool(re.search(r"\b(UNSIGNED|ZEROFILL)\b", name))
    base = _UNSIGNED.sub("", f" {name}").strip()
    if base == "DOUBLE PRECISION":
        base = "DOUBLE"
    if base == "BIT":
        return "BOOLEAN" if length is None or length == 1 else "BYTES"
    if base in ("BOOLEAN", "BOOL"):
        return "BOOLEAN"
    if base == "TINYINT":
        # MySQL's booleans are tinyint(1), as JDBC drivers read them.
        return "SMALLINT" if unsigned else "BOOLEAN" if length == 1 else "TINYINT"
    integers = {"SMALLINT": ("SMALLINT", "INT"), "MEDIUMINT": ("INT", "BIGINT"), "INT": ("INT", "BIGINT"),
                "INTEGER": ("INT", "BIGINT"), "BIGINT": ("BIGINT", "DECIMAL(20, 0)"), "YEAR": ("INT", "INT"),
                "SERIAL": ("DECIMAL(20, 0)", "DECIMAL(20, 0)")}
    if base in integers:
        return integers[base][unsigned]
    if base == "FLOAT":
        return "FLOAT"
    if base in ("REAL", "DOUBLE"):
        return "DOUBLE"
    if base in ("NUMERIC", "FIXED", "DECIMAL"):
        if length is None:  # no precision given: Paimon reads the widest
            length, scale = _MAX_DECIMAL_PRECISION, 18
        return f"DECIMAL({length}, {max(scale or 0, 0)})" if length <= _MAX_DECIMAL_PRECISION else _STRING
    if base == "DATE":
        return "DATE"
    if base == "TIME":
        return "TIME"
    if base in ("DATETIME", "TIMESTAMP"):
        return f"TIMESTAMP({_timestamp_precision(length)})"
    if base in ("CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "JSON", "ENUM", "SET",
                "GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON",
                "GEOMETRYCOLLECTION", "STRING"):
        return _STRING
    if base in ("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"):
        return "BYTES"
    if base == "LONG":
        return "BIGINT"
    return None


def _timestamp_precision(length: int | None) -> int:
    if length is None or length <= 0 or length == _JDBC_TIMESTAMP_LENGTH:
        return 0
    if length > _JDBC_TIMESTAMP_LENGTH:  # "2023-03-23 17:20:00.01": the point, then the fraction
        return length - _JDBC_TIMESTAMP_LENGTH - 1
    return min(length, 9)


def maxwell_type(name: str, *, signed: bool | None, length: int | None, scale: int | None,
                 column: str) -> pa.DataType:
    """The table type of a column of Maxwell's table definition: ``{"type": "int", "signed":
    false}``, ``{"type": "decimal", "precision": 10, "scale": 2}`` (``length`` is the
    precision), ``{"type": "datetime", "column-length": 3}`` (``length`` is the column length)."""
    return mysql_type(f"{name} unsigned" if signed is False else name, length=length, scale=scale, column=column)


# Debezium's logical types (the "name" of a field of its schema): io.debezium.time.* counts.
_DEBEZIUM_COUNTS = ("io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp", "io.debezium.time.NanoTimestamp")
_DEBEZIUM_LOGICAL = {
    "io.debezium.time.Date": "DATE", "org.apache.kafka.connect.data.Date": "DATE",
    "io.debezium.time.ZonedTimestamp": "TIMESTAMP(6)",
    "io.debezium.time.Time": "TIME", "io.debezium.time.MicroTime": "TIME", "io.debezium.time.NanoTime": "TIME",
    "org.apache.kafka.connect.data.Time": "TIME",
}  # fmt: skip
_CONNECT_TYPES = {"int8": "TINYINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT", "float": "FLOAT",
                  "float32": "FLOAT", "float64": "DOUBLE", "double": "DOUBLE", "boolean": "BOOLEAN", "bytes": "BYTES"}


def debezium_type(connect_type: str | None, logical: str | None, *, length: int | None, scale: int | None,
                  column: str) -> pa.DataType:
    """The table type of a field of Debezium's schema envelope: its Kafka Connect type
    (``int32``, ``string``, ...) and logical name, with the decimal's precision and scale or
    the bit string's length (``length``) from its parameters."""
    if logical == "io.debezium.data.Bits":
        return _readable("BOOLEAN" if length in (None, 1) else "BYTES")
    if logical == "org.apache.kafka.connect.data.Decimal":
        if length is None:  # no connect.decimal.precision parameter: Paimon's default
            return _readable("DECIMAL(20, 0)")
        if length > _MAX_DECIMAL_PRECISION:
            return pa.string()
        if scale is None:
            raise CdcError("is a Debezium decimal without a scale parameter", column=column)
        return _readable(f"DECIMAL({length}, {scale})")
    if logical in _DEBEZIUM_COUNTS:
        return pa.int64()
    if logical in _DEBEZIUM_LOGICAL:
        return _readable(_DEBEZIUM_LOGICAL[logical])
    # Paimon reads "float64" as FLOAT; Kafka Connect's JSON never writes it ("double"), and a
    # 64-bit float is a DOUBLE.
    return _readable(_CONNECT_TYPES.get(connect_type or "", _STRING))


def _readable(paimon: str) -> pa.DataType:
    """The Arrow type of a Paimon type, STRING where CDC decoding does not read it."""
    arrow = types.to_arrow(paimon)
    if pa.types.is_binary(arrow) or pa.types.is_fixed_size_binary(arrow) or pa.types.is_time(arrow):
        return pa.string()
    return arrow


# -- ALTER TABLE statements ------------------------------------------------------------------

_ALTER = re.compile(r"\s*ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:`[^`]+`|[\w$]+)(?:\s*\.\s*(?:`[^`]+`|[\w$]+))?"
                    r"\s+(.*)", re.IGNORECASE | re.DOTALL)
_IDENTIFIER = r"(`(?:[^`]|``)+`|[\w$]+)"
_TYPE = r"([A-Za-z]+(?:\s+PRECISION)?(?:\s*\([^)]*\))?(?:\s+(?:UNSIGNED|SIGNED|ZEROFILL)\b)*)"
_ADD = re.compile(r"ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(.*)", re.IGNORECASE | re.DOTALL)
_NOT_COLUMNS = re.compile(r"(INDEX|KEY|CONSTRAINT|PRIMARY|UNIQUE|FULLTEXT|SPATIAL|FOREIGN|PARTITION|CHECK)\b",
                          re.IGNORECASE)
_MODIFY = re.compile(r"MODIFY\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?(.*)", re.IGNORECASE | re.DOTALL)
_CHANGE = re.compile(rf"CHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_IDENTIFIER}\s+(.*)", re.IGNORECASE | re.DOTALL)
_DEFINITION = re.compile(rf"{_IDENTIFIER}\s+{_TYPE}", re.IGNORECASE | re.DOTALL)


def altered_columns(sql: str) -> list[tuple[str, str]]:
    """The columns (name, MySQL type) an ``ALTER TABLE`` statement adds (``ADD [COLUMN]``, one
    or a parenthesized list) or gives a type (``MODIFY``, ``CHANGE``: under the new name);
    [] for any other statement. Other clauses (drops, renames, indexes) change no column the
    table keeps: a column the source drops stays in the table, as in Paimon."""
    statement = _ALTER.fullmatch(_without_comments(sql).strip().rstrip(";"))
    if statement is None:
        return []
    columns = []
    for clause in _split(statement.group(1)):
        definitions: list[str] = []
        if (added := _ADD.fullmatch(clause)) is not None:
            body = added.group(1).strip()
            if body.startswith("("):
                definitions = _split(body[1:body.rfind(")")])
            elif not _NOT_COLUMNS.match(body) or re.match(r"COLUMN\s", clause[3:].strip(), re.IGNORECASE):
                definitions = [body]
        elif (modified := _MODIFY.fullmatch(clause)) is not None:
            definitions = [modified.group(1)]
        elif (changed := _CHANGE.fullmatch(clause)) is not None:
            definitions = [changed.group(2)]
        for definition in definitions:
            match = _DEFINITION.match(definition.strip())
            if match is None:
                raise CdcError(f"cannot read the column definition {definition.strip()!r} of the DDL statement "
                               f"{sql!r}")
            name = match.group(1)
            if name.startswith("`"):
                name = name[1:-1].replace("``", "`")
            columns.append((name, match.group(2)))
    return columns


def _without_comments(sql: str) -> str:
    return re.sub(r"/\*.*?\*/|--[^\n]*|#[^\n]*", " ", sql, flags=re.DOTALL)


def _split(text: str) -> list[str]:
    """``text`` split at its commas outside parentheses, quotes and backquotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"`":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part]
