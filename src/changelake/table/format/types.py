"""Mapping between Arrow types and Paimon's type strings (as stored in schema JSON).

Atomic types are SQL strings (``BIGINT NOT NULL``, ``DECIMAL(10, 2)``); ``ARRAY``, ``MAP``
and ``ROW`` are JSON objects, exactly as Apache Paimon's ``DataTypeJsonParser`` has them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from changelake.errors import SchemaError

PaimonType = str | dict[str, Any]

_NOT_NULL = " NOT NULL"
_TIMESTAMP_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_ATOMIC = re.compile(r"^\s*([A-Z_]+(?:\s+[A-Z_]+)*?)\s*(?:\((\s*\d+\s*(?:,\s*\d+\s*)?)\))?\s*(.*)$")


def root(paimon_type: PaimonType) -> tuple[str, list[int]]:
    """A type's root name (``DECIMAL``, ``INT``, ``TIMESTAMP_LTZ`` for either spelling of a
    local-time-zone timestamp; ``ARRAY``, ``MAP``, ``ROW`` for nested types) and its
    parameters (``[10, 2]``)."""
    if isinstance(paimon_type, dict):
        return paimon_type["type"].upper().removesuffix(_NOT_NULL).strip(), []
    upper = paimon_type.strip().upper().removesuffix(_NOT_NULL).rstrip()
    match = _ATOMIC.match(upper)
    if match is None:
        return upper, []
    name = match.group(1)
    if name == "TIMESTAMP" and "LOCAL TIME ZONE" in match.group(3):
        name = "TIMESTAMP_LTZ"
    params = [int(p) for p in match.group(2).split(",")] if match.group(2) else []
    return ("INT" if name == "INTEGER" else name), params


def _suffix(*, nullable: bool) -> str:
    return "" if nullable else _NOT_NULL


def to_paimon(data_type: pa.DataType, ids: Iterator[int], *, nullable: bool) -> PaimonType:
    """The Paimon type of an Arrow type; nested ROW fields draw their ids from ``ids``."""
    sfx = _suffix(nullable=nullable)
    atomic = _atomic_name(data_type)
    if atomic is not None:
        return atomic + sfx
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        elem = data_type.value_field
        return {"type": "ARRAY" + sfx, "element": to_paimon(elem.type, ids, nullable=elem.nullable)}
    if pa.types.is_map(data_type):
        return {
            "type": "MAP" + sfx,
            "key": to_paimon(data_type.key_type, ids, nullable=False),
            "value": to_paimon(data_type.item_type, ids, nullable=data_type.item_field.nullable),
        }
    if pa.types.is_struct(data_type):
        fields = []
        for child in data_type:
            child_id = next(ids)
            fields.append(
                {"id": child_id, "name": child.name, "type": to_paimon(child.type, ids, nullable=child.nullable)}
            )
        return {"type": "ROW" + sfx, "fields": fields}
    raise SchemaError(f"Arrow type {data_type} has no Paimon equivalent")


def _atomic_name(data_type: pa.DataType) -> str | None:
    t = pa.types
    simple: list[tuple[Any, str]] = [
        (t.is_boolean, "BOOLEAN"),
        (t.is_int8, "TINYINT"),
        (t.is_int16, "SMALLINT"),
        (t.is_int32, "INT"),
        (t.is_int64, "BIGINT"),
        (t.is_float32, "FLOAT"),
        (t.is_float64, "DOUBLE"),
        (t.is_string, "STRING"),
        (t.is_large_string, "STRING"),
        (t.is_binary, "BYTES"),
        (t.is_large_binary, "BYTES"),
        (t.is_date32, "DATE"),
    ]
    for check, name in simple:
        if check(data_type):
            return name
    if t.is_fixed_size_binary(data_type):
        return f"BINARY({data_type.byte_width})"
    if t.is_decimal128(data_type):
        return f"DECIMAL({data_type.precision}, {data_type.scale})"
    if t.is_timestamp(data_type):
        precision = _TIMESTAMP_PRECISION[data_type.unit]
        if data_type.tz is None:
            return f"TIMESTAMP({precision})"
        return f"TIMESTAMP({precision}) WITH LOCAL TIME ZONE"
    return None


def is_nullable(paimon_type: PaimonType) -> bool:
    """Whether a Paimon type admits nulls (no ``NOT NULL`` suffix)."""
    name = paimon_type if isinstance(paimon_type, str) else paimon_type["type"]
    return not name.rstrip().upper().endswith(_NOT_NULL)


def to_arrow(paimon_type: PaimonType) -> pa.DataType:
    """The Arrow type a Paimon type is read as."""
    if isinstance(paimon_type, dict):
        name = paimon_type["type"].upper()
        if name.startswith("ARRAY"):
            elem = paimon_type["element"]
            return pa.list_(pa.field("element", to_arrow(elem), nullable=is_nullable(elem)))
        if name.startswith("MAP"):
            value = paimon_type["value"]
            return pa.map_(
                to_arrow(paimon_type["key"]),
                pa.field("value", to_arrow(value), nullable=is_nullable(value)),
            )
        if name.startswith("ROW"):
            return pa.struct(
                [
                    pa.field(f["name"], to_arrow(f["type"]), nullable=is_nullable(f["type"]))
                    for f in paimon_type["fields"]
                ]
            )
        return to_arrow(paimon_type["type"])
    return _atomic_to_arrow(paimon_type)


def _atomic_to_arrow(text: str) -> pa.DataType:
    upper = text.strip().upper()
    if upper.endswith(_NOT_NULL):
        upper = upper[: -len(_NOT_NULL)].rstrip()
    match = _ATOMIC.match(upper)
    if match is None:
        raise SchemaError(f"unknown Paimon type {text!r}")
    name, params, rest = match.group(1), match.group(2), match.group(3).strip()
    args = [int(p) for p in params.split(",")] if params else []
    fixed: dict[str, pa.DataType] = {
        "BOOLEAN": pa.bool_(),
        "TINYINT": pa.int8(),
        "SMALLINT": pa.int16(),
        "INT": pa.int32(),
        "INTEGER": pa.int32(),
        "BIGINT": pa.int64(),
        "FLOAT": pa.float32(),
        "DOUBLE": pa.float64(),
        "STRING": pa.string(),
        "CHAR": pa.string(),
        "VARCHAR": pa.string(),
        "BYTES": pa.binary(),
        "VARBINARY": pa.binary(),
        "DATE": pa.date32(),
    }
    if name in fixed:
        return fixed[name]
    if name == "BINARY":
        return pa.binary(args[0]) if args else pa.binary()
    if name in ("DECIMAL", "NUMERIC", "DEC"):
        precision = args[0] if args else 10
        return pa.decimal128(precision, args[1] if len(args) > 1 else 0)
    if name in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        precision = args[0] if args else 6
        local_tz = name == "TIMESTAMP_LTZ" or "LOCAL TIME ZONE" in rest
        return pa.timestamp(_unit_of(precision), tz="UTC" if local_tz else None)
    if name == "TIME":
        precision = args[0] if args else 0
        return pa.time32("ms") if precision <= 3 else pa.time64("us")
    raise SchemaError(f"unknown Paimon type {text!r}")


def _unit_of(precision: int) -> str:
    if precision == 0:
        return "s"
    if precision <= 3:
        return "ms"
    if precision <= 6:
        return "us"
    return "ns"


def sql_string(paimon_type: PaimonType) -> str:
    """A Paimon type as SQL text, as Paimon's ``DataType.asSQLString`` prints it: atomic types
    as stored (``INT NOT NULL``), ``ARRAY<INT>``, ``MAP<STRING NOT NULL, INT>``,
    ``MULTISET<STRING>`` and ``ROW<`a` INT, `b` STRING 'its comment'>`` (``DataField``: the
    name in backticks, the description quoted), each with `` NOT NULL`` when it holds no nulls."""
    if isinstance(paimon_type, str):
        return paimon_type
    name = paimon_type["type"].strip()
    kind = name.upper().removesuffix(_NOT_NULL).strip()
    if kind == "ROW":
        inner = ", ".join(_field_sql(f) for f in paimon_type["fields"])
    elif kind == "MAP":
        inner = f"{sql_string(paimon_type['key'])}, {sql_string(paimon_type['value'])}"
    else:  # ARRAY, MULTISET
        inner = sql_string(paimon_type["element"])
    return f"{kind}<{inner}>{_suffix(nullable=is_nullable(paimon_type))}"


def _field_sql(field: dict[str, Any]) -> str:
    name: str = field["name"]
    description: str | None = field.get("description")
    text = "`" + name.replace("`", "``") + "` " + sql_string(field["type"])
    return text if description is None else text + " '" + description.replace("'", "''") + "'"
