"""Avro data files, in Paimon's Avro layout (``AvroSchemaConverter``): one record named
``org.apache.paimon.avro.generated.record`` (a nested ROW named after it, ``<parent>_<field>``),
a nullable column as the union ``["null", T]`` with a null default, TIMESTAMP(0..3) as
``timestamp-millis`` and (4..6) ``timestamp-micros`` longs, TIMESTAMP_LTZ as
``local-timestamp-*``, DATE as ``date`` int, TIME(0..3) as ``time-millis`` int, DECIMAL as
``decimal`` bytes (big-endian two's complement), BINARY/VARBINARY as bytes, ARRAY as array, a
MAP with string keys as map and any other MAP as an array of ``key``/``value`` records (logical
type ``map``). Avro has no TIMESTAMP(7..9) or TIME(4..9): such columns are refused, as Paimon
refuses them.

fastavro encodes and decodes the records (Avro's blocks hold rows); everything around it is
whole-column Arrow. Writing hands fastavro plain values (longs for timestamps, two's complement
bytes for decimals, made with numpy); reading takes fastavro's values column by column into
Arrow (its logical types come as Python dates and decimals, which Arrow converts in bulk). Avro
files have no index, so a file is read whole (a reader slices it).
"""

from __future__ import annotations

import collections
import io
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from changelake.errors import CorruptMetadataError, SchemaError

RECORD_NAME = "org.apache.paimon.avro.generated.record"
# Java Avro's default block size, which Paimon keeps unless a block size is configured
_SYNC_INTERVAL = 64_000
_TIMESTAMPS = {"timestamp-millis": ("ms", None), "timestamp-micros": ("us", None),
               "local-timestamp-millis": ("ms", "UTC"), "local-timestamp-micros": ("us", "UTC")}


def schema(arrow: pa.Schema) -> dict[str, Any]:
    """The Avro schema Paimon writes rows of ``arrow`` with; SchemaError naming the column for
    a type Avro cannot hold."""
    return _record(RECORD_NAME, list(arrow))


def _record(name: str, fields: list[pa.Field]) -> dict[str, Any]:
    entries = []
    for field in fields:
        entry: dict[str, Any] = {"name": field.name, "type": _type(field, f"{name}_{field.name}")}
        if field.nullable:
            entry["default"] = None
        entries.append(entry)
    return {"type": "record", "name": name, "fields": entries}


def _type(field: pa.Field, name: str) -> Any:
    base = _base_type(field.type, name, field.name)
    return ["null", base] if field.nullable else base


def _base_type(t: pa.DataType, name: str, column: str) -> Any:
    types = pa.types
    if types.is_boolean(t):
        return "boolean"
    if types.is_int8(t) or types.is_int16(t) or types.is_int32(t):
        return "int"
    if types.is_int64(t):
        return "long"
    if types.is_float32(t) or types.is_float64(t):
        return "float" if types.is_float32(t) else "double"
    if types.is_string(t) or types.is_large_string(t):
        return "string"
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return "bytes"
    if types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if types.is_time32(t):
        return {"type": "int", "logicalType": "time-millis"}
    if types.is_timestamp(t) and t.unit != "ns":
        unit = "micros" if t.unit == "us" else "millis"
        return {"type": "long", "logicalType": f"{'local-' if t.tz else ''}timestamp-{unit}"}
    if types.is_decimal128(t):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    if types.is_struct(t):
        return _record(name, list(t))
    if types.is_list(t) or types.is_large_list(t):
        return {"type": "array", "items": _type(t.value_field, name)}
    if types.is_map(t):
        if types.is_string(t.key_type) or types.is_large_string(t.key_type):
            return {"type": "map", "values": _type(t.item_field, name)}
        entry = _record(name, [t.key_field.with_name("key"), t.item_field.with_name("value")])
        return {"type": "array", "logicalType": "map", "items": entry}
    raise SchemaError(f"Avro data files cannot hold {t} (Paimon's Avro holds TIMESTAMP up to precision 6 "
                      "and TIME up to 3); choose another file.format", column=column)


class AvroWriter:
    """An Avro data file being written to ``target``, rows of ``arrow``'s schema."""

    def __init__(self, target: pa.NativeFile, arrow: pa.Schema, *, codec: str, zstd_level: int) -> None:
        self.target = target
        self.writer = fastavro.write.Writer(target, fastavro.parse_schema(schema(arrow)), codec=codec,
                                            sync_interval=_SYNC_INTERVAL,
                                            compression_level=zstd_level if codec == "zstandard" else None)

    def write(self, table: pa.Table) -> None:
        plain = pa.Table.from_arrays([_plain(c.combine_chunks()) for c in table.columns], names=table.column_names)
        # fastavro takes rows as dicts; deque runs its writer over them without a Python loop
        collections.deque(map(self.writer.write, plain.to_pylist(maps_as_pydicts="strict")), maxlen=0)

    def tell(self) -> int:
        return int(self.target.tell())

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> int:
        self.writer.flush()
        return int(self.target.tell())

    def abandon(self) -> None:
        """Nothing to release: the writer holds only its pending block."""


def _plain(array: pa.Array) -> pa.Array:
    """``array`` as the plain Avro values of its type (longs for timestamps, ints for dates and
    times, bytes for decimals, key/value lists for maps with other than string keys)."""
    t = array.type
    types = pa.types
    if types.is_timestamp(t):
        return array.cast(pa.timestamp("ms" if t.unit == "s" else t.unit)).cast(pa.int64())
    if types.is_date32(t):
        return array.cast(pa.int32())
    if types.is_time32(t):
        return array.cast(pa.time32("ms")).cast(pa.int32())
    if types.is_decimal128(t):
        return _decimal_bytes(array)
    mask = array.is_null() if array.null_count else None
    if types.is_struct(t):
        children = [_plain(array.field(i)) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=mask)
    if types.is_map(t):
        keys, items = _plain(array.keys), _plain(array.items)
        offsets = _offsets(array, mask)
        if types.is_string(t.key_type) or types.is_large_string(t.key_type):
            return pa.MapArray.from_arrays(offsets, keys, items, mask=mask)
        entries = pa.StructArray.from_arrays([keys, items], names=["key", "value"])
        return pa.ListArray.from_arrays(offsets, entries, mask=mask)
    if types.is_list(t) or types.is_large_list(t):
        values = _plain(array.values)
        return pa.ListArray.from_arrays(_offsets(array, mask), values, mask=mask)
    return array


def _offsets(array: pa.Array, mask: pa.Array | None) -> pa.Array:
    # With a mask Arrow takes only offsets of their own buffer, so a slice's are copied.
    offsets: pa.Array = array.offsets
    return offsets if mask is None or not array.offset else pa.array(offsets.to_numpy())


def _decimal_bytes(array: pa.Array) -> pa.Array:
    """Decimals as Avro's bytes: the unscaled value, big-endian two's complement, shortest
    (as Java's ``BigInteger.toByteArray``)."""
    n = len(array)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * 16:(array.offset + n) * 16]
    big = raw.reshape(n, 16)[:, ::-1]
    sign = np.where(big[:, :1] & 0x80, 0xFF, 0).astype(np.uint8)
    # a leading byte is redundant while it is the sign byte and the next byte keeps the sign bit
    redundant = (big[:, :15] == sign) & ((big[:, 1:] & 0x80) == (sign & 0x80))
    skip = np.cumprod(redundant, axis=1).sum(axis=1)
    keep = np.arange(16)[None, :] >= skip[:, None]
    offsets = np.concatenate([[0], np.cumsum(16 - skip)]).astype(np.int32)
    data = pa.py_buffer(np.ascontiguousarray(big)[keep].tobytes())
    validity = array.is_valid().buffers()[1] if array.null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.tobytes()), data],
                                 null_count=array.null_count)


def read(data: bytes, path: str) -> pa.Table:
    """Every column of the Avro data file ``data`` (read from ``path``) in the Arrow types of
    its Avro types (the caller casts them to the table's)."""
    try:
        reader = fastavro.reader(io.BytesIO(data))
        # Java Paimon's top-level record is nullable: the union ["null", record]
        written: Any = _non_null(reader.writer_schema, path)
        if not isinstance(written, dict) or written.get("type") != "record":
            raise CorruptMetadataError("Avro data file does not hold records", file=path)
        fields = written["fields"]
        plain_types = [_plain_type(f["type"], path) for f in fields]
        names = [f["name"] for f in fields]
        rows: list[Any] = list(reader)
    except CorruptMetadataError:
        raise
    except Exception as exc:  # fastavro raises many types for garbage input
        raise CorruptMetadataError(f"data file is not Avro: {exc}", file=path) from None
    # Arrow builds the columns from the records in C++ (several times faster than gathering
    # each column's values in Python first)
    plain = pa.Table.from_pylist(rows, schema=pa.schema(list(zip(names, plain_types, strict=True))))
    arrays = [_typed(plain.column(i).combine_chunks(), f["type"]) for i, f in enumerate(fields)]
    return pa.Table.from_arrays(arrays, names=names)


def _non_null(avro_type: Any, path: str) -> Any:
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) != 1:
            raise CorruptMetadataError(f"Avro data file has a union {avro_type} (Paimon writes [null, T] only)",
                                       file=path)
        return branches[0]
    return avro_type


_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
               "double": pa.float64(), "string": pa.string(), "bytes": pa.binary(), "fixed": pa.binary(),
               "enum": pa.string()}


def _plain_type(avro_type: Any, path: str) -> pa.DataType:
    """The Arrow type of the values fastavro reads for ``avro_type`` (a map of other than
    string keys as its key/value records)."""
    t = _non_null(avro_type, path)
    name = t if isinstance(t, str) else t["type"]
    logical = _logical_type(t)
    if logical is not None:
        return logical
    if name in _PRIMITIVES:
        return _PRIMITIVES[name]
    if name == "record":
        return pa.struct([pa.field(f["name"], _plain_type(f["type"], path), nullable=_nullable(f["type"]))
                          for f in t["fields"]])
    if name == "array":
        return pa.list_(pa.field("element", _plain_type(t["items"], path), nullable=_nullable(t["items"])))
    if name == "map":
        return pa.map_(pa.string(), pa.field("value", _plain_type(t["values"], path), nullable=_nullable(t["values"])))
    raise CorruptMetadataError(f"Avro data file has a type {t!r} Paimon does not write", file=path)


def _logical_type(t: Any) -> pa.DataType | None:
    logical = t.get("logicalType") if isinstance(t, dict) else None
    if logical in _TIMESTAMPS:
        unit, tz = _TIMESTAMPS[logical]
        return pa.timestamp(unit, tz)
    if logical == "date":
        return pa.date32()
    if logical == "time-millis":
        return pa.time32("ms")
    if logical == "decimal":
        return pa.decimal128(int(t["precision"]), int(t.get("scale", 0)))
    return None


def _nullable(avro_type: Any) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def _typed(array: pa.Array, avro_type: Any) -> pa.Array:
    """Values read for ``avro_type`` with its maps of other than string keys (arrays of
    key/value records) as Arrow maps."""
    t = avro_type
    if isinstance(t, list):
        t = next(b for b in t if b != "null")
    if not isinstance(t, dict) or t.get("logicalType") not in ("map", None):
        return array
    mask = array.is_null() if array.null_count else None
    if t["type"] == "record":
        assert isinstance(array, pa.StructArray)
        children = [_typed(array.field(i), f["type"]) for i, f in enumerate(t["fields"])]
        return pa.StructArray.from_arrays(children, fields=[array.type.field(i).with_type(c.type)
                                                            for i, c in enumerate(children)], mask=mask)
    if t["type"] == "array":
        assert isinstance(array, pa.ListArray)
        values = _typed(array.values, t["items"])
        offsets = _offsets(array, mask)
        if t.get("logicalType") == "map":
            assert isinstance(values, pa.StructArray)
            return pa.MapArray.from_arrays(offsets, values.field("key"), values.field("value"), mask=mask)
        return pa.ListArray.from_arrays(offsets, values, mask=mask)
    if t["type"] == "map":
        assert isinstance(array, pa.MapArray)
        return pa.MapArray.from_arrays(_offsets(array, mask), array.keys, _typed(array.items, t["values"]), mask=mask)
    return array
