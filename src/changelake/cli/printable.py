"""Rows made printable for the text formats (CSV, JSON lines, a terminal table), whole columns
at a time in Arrow:

- binary (BYTES, VARBINARY, BINARY(n)) as lowercase hex, as ``--format json`` always had it:
  bytes need not be UTF-8, and hex reads back exactly (``bytes.fromhex``);
- dates, times, timestamps and decimals as Arrow's text (``2024-01-01 12:00:00.000000``, a ``Z``
  on a TIMESTAMP_LTZ, ``1.50``), as pyarrow's CSV writer writes them, nanoseconds included;
- ARRAY, MAP and ROW values as JSON text in CSV and on a terminal (an array, a list of
  ``[key, value]`` pairs since map keys need not be strings, an object), their leaves as above;
- in JSON, a NaN or infinite float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``
  (JSON has no such numbers; the strings are Java's ``Double.toString`` and protobuf's JSON
  mapping of them, and keep NaN apart from NULL).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Two hex digits per byte value, so a whole buffer converts with one numpy take.
_HEX_DIGITS = np.frombuffer(b"".join(f"{i:02x}".encode() for i in range(256)), np.uint8).reshape(256, 2)
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _is_nested(t: pa.DataType) -> bool:
    return bool(pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t))


def _hex(array: pa.Array) -> pa.Array:
    """Binary values as hex text (nulls stay null)."""
    wide = array.cast(pa.large_binary())  # one layout for binary, large and fixed-size binary
    offsets = np.frombuffer(wide.buffers()[1], np.int64, count=len(wide) + 1, offset=wide.offset * 8)
    data = wide.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    digits = _HEX_DIGITS[raw[offsets[0]:offsets[-1]]]
    text = pa.LargeStringArray.from_buffers(len(wide), pa.py_buffer((offsets - offsets[0]) * 2), pa.py_buffer(digits))
    if wide.null_count:
        text = pc.if_else(wide.is_valid(), text, pa.scalar(None, pa.large_string()))
    return text


def _rebased(array: pa.ListArray | pa.MapArray) -> tuple[pa.Array, int, int]:
    """The offsets of a (possibly sliced) list or map array starting at 0, and the range of
    its child values they cover."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, pa.scalar(start, offsets.type)), start, end - start


def _leaves_as_text(array: pa.Array) -> pa.Array:
    """``array`` with every binary, temporal and decimal value (at any depth) as text."""
    t = array.type
    if _is_binary(t):
        return _hex(array)
    if pa.types.is_temporal(t) or pa.types.is_decimal(t):
        return array.cast(pa.string())
    if pa.types.is_struct(t):
        children = [_leaves_as_text(array.field(i)) for i in range(t.num_fields)]
        fields = [pa.field(f.name, c.type, nullable=True) for f, c in zip(t, children, strict=True)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=array.is_null())
    if pa.types.is_map(t):
        offsets, start, length = _rebased(array)
        return pa.MapArray.from_arrays(offsets, _leaves_as_text(array.keys.slice(start, length)),
                                       _leaves_as_text(array.items.slice(start, length)), mask=array.is_null())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets, start, length = _rebased(array)
        kind = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return kind.from_arrays(offsets, _leaves_as_text(array.values.slice(start, length)), mask=array.is_null())
    return array


def _json_safe(value: object) -> object:
    """A Python value of a text-leaved column with NaN and infinities as their strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else _NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def json_text(value: object) -> str:
    """One value (or row dict) of a text-leaved table as JSON."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: rare, so only then walk the value
        return json.dumps(_json_safe(value), allow_nan=False)


def _nested_as_json(array: pa.Array) -> pa.Array:
    # Per value: JSON text has no Arrow kernel; only nested columns pay for it.
    return pa.array([None if v is None else json_text(v) for v in array.to_pylist()], pa.string())


def _map_columns(table: pa.Table, convert: Callable[[pa.Array], pa.Array]) -> pa.Table:
    columns = []
    for column in table.columns:
        chunks = column.chunks or [pa.array([], column.type)]
        columns.append(pa.chunked_array([convert(chunk) for chunk in chunks]))
    return pa.Table.from_arrays(columns, names=table.column_names)


def for_json(table: pa.Table) -> pa.Table:
    """``table`` with binary as hex and dates, times, timestamps and decimals as text, at any
    depth: the values of JSON lines (with :func:`json_text`)."""
    return _map_columns(table, _leaves_as_text)


def for_csv(table: pa.Table) -> pa.Table:
    """``table`` as pyarrow's CSV writer can write it: binary columns as hex, ARRAY, MAP and ROW
    columns as JSON text (of :func:`for_json`'s values); the rest as the writer writes them."""
    def convert(array: pa.Array) -> pa.Array:
        if _is_nested(array.type):
            return _nested_as_json(_leaves_as_text(array))
        return _leaves_as_text(array) if _is_binary(array.type) else array

    return _map_columns(table, convert)


def for_terminal(table: pa.Table) -> pa.Table:
    """``table`` as a terminal table shows it: :func:`for_json`'s values, ARRAY, MAP and ROW
    columns as JSON text."""
    def convert(array: pa.Array) -> pa.Array:
        printable = _leaves_as_text(array)
        return _nested_as_json(printable) if _is_nested(array.type) else printable

    return _map_columns(table, convert)
