"""The Parquet layout of data-file columns, as Apache Paimon's writers lay them out
(``ParquetSchemaConverter``, ``ParquetRowDataWriter``).

Two table types are stored otherwise than pyarrow would store their Arrow types, because
Paimon's Parquet reader takes nothing else for them (``ParquetSplitReaderUtil``):

* ``BINARY(n)`` (Arrow ``fixed_size_binary``) as BYTE_ARRAY, as Paimon and pypaimon write
  it, not as FIXED_LEN_BYTE_ARRAY;
* ``TIMESTAMP(7..9)`` and ``TIMESTAMP_LTZ(7..9)`` (Arrow ``timestamp("ns")``) as INT96
  (Julian day and nanosecond of the day, Impala's layout), not as INT64 nanoseconds; a
  precision of 0..3 stays INT64 millis and 4..6 INT64 micros, as pyarrow writes them. pyarrow
  writes INT96 for every timestamp of a file or none, so these columns are handed to it as
  FIXED_LEN_BYTE_ARRAY(12) holding INT96's bytes and ``parquet_footer`` retypes them.

Inside ARRAY, MAP and ROW columns too. Reading needs none of this: the columns of a file are
cast to the table's types, and pyarrow reads INT96 as nanoseconds, so files of either layout
(Paimon's, and changelake's from before, with INT64 nanoseconds and FIXED_LEN_BYTE_ARRAY)
read alike. Conversions are whole-column (numpy and Arrow casts).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

INT96 = pa.binary(12)  # what an INT96 column is handed to pyarrow as
_NANOS_PER_DAY = 86_400_000_000_000
_JULIAN_DAY_OF_EPOCH = 2_440_588
_INT96_VALUE = np.dtype([("nanos_of_day", "<i8"), ("julian_day", "<i4")])  # 12 bytes, little-endian


def _is_int96(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(data_type) and data_type.unit == "ns")


def _children(data_type: pa.DataType) -> list[pa.Field]:
    """The child fields of a nested type, in Parquet's leaf order (a map: keys, then items)."""
    if pa.types.is_struct(data_type):
        return [data_type.field(i) for i in range(data_type.num_fields)]
    if pa.types.is_map(data_type):
        return [data_type.key_field, data_type.item_field]
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return [data_type.value_field]
    return []


def stored_type(data_type: pa.DataType) -> pa.DataType:
    """The Arrow type a column of ``data_type`` is handed to pyarrow's Parquet writer as."""
    if _is_int96(data_type):
        return INT96
    if pa.types.is_fixed_size_binary(data_type):
        return pa.binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(stored_type(f.type)) for f in _children(data_type)])
    if pa.types.is_map(data_type):
        key, item = _children(data_type)
        return pa.map_(key.with_type(stored_type(key.type)), item.with_type(stored_type(item.type)))
    if pa.types.is_list(data_type):
        return pa.list_(data_type.value_field.with_type(stored_type(data_type.value_type)))
    if pa.types.is_large_list(data_type):
        return pa.large_list(data_type.value_field.with_type(stored_type(data_type.value_type)))
    return data_type


def stored_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each column's :func:`stored_type`."""
    return pa.schema([f.with_type(stored_type(f.type)) for f in schema], metadata=schema.metadata)


def int96_leaves(schema: pa.Schema) -> list[int]:
    """The leaf columns (in Parquet's depth-first order) of ``schema`` stored as INT96."""
    leaves: list[int] = []

    def walk(data_type: pa.DataType, index: int) -> int:
        children = _children(data_type)
        if not children:
            if _is_int96(data_type):
                leaves.append(index)
            return index + 1
        for child in children:
            index = walk(child.type, index)
        return index

    position = 0
    for field in schema:
        position = walk(field.type, position)
    return leaves


def to_stored(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns as :func:`stored_schema` ``schema`` (``table`` itself when nothing
    changes)."""
    if table.schema.equals(schema):
        return table
    columns = [column if column.type == field.type
               else pa.chunked_array([_stored(chunk, field.type) for chunk in column.chunks], field.type)
               for column, field in zip(table.columns, schema, strict=True)]
    return pa.Table.from_arrays(columns, schema=schema)


def _has_int96(data_type: pa.DataType) -> bool:
    return _is_int96(data_type) or any(_has_int96(f.type) for f in _children(data_type))


def _stored(array: pa.Array, target: pa.DataType) -> pa.Array:
    if not _has_int96(array.type):
        return array.cast(target)  # BINARY(n) inside, or nothing
    if _is_int96(array.type):
        return _int96(array)
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(array.type):
        assert isinstance(array, pa.StructArray)
        fields = _children(target)
        return pa.StructArray.from_arrays([_stored(array.field(i), f.type) for i, f in enumerate(fields)],
                                          fields=fields, mask=mask)
    # The offsets of a sliced list or map point into its whole values, which are kept whole;
    # with a mask Arrow takes only offsets of their own buffer, so a slice's are copied.
    offsets = array.offsets if mask is None or not array.offset else pa.array(array.offsets.to_numpy())
    if pa.types.is_map(array.type):
        assert isinstance(array, pa.MapArray)
        key, item = _children(target)
        return pa.MapArray.from_arrays(offsets, _stored(array.keys, key.type), _stored(array.items, item.type),
                                       type=target, mask=mask)
    assert isinstance(array, pa.ListArray | pa.LargeListArray)
    return type(array).from_arrays(offsets, _stored(array.values, target.value_type), type=target, mask=mask)


def _int96(array: pa.Array) -> pa.Array:
    """Nanosecond timestamps as INT96 values: nanosecond of the day (8 bytes), then the
    Julian day (4 bytes), little-endian; the day is the floor, so the nanosecond of the day
    is never negative (Paimon's ``TimestampColumnReader`` reads it so)."""
    nanos = np.asarray(array.cast(pa.int64()).fill_null(0).to_numpy())
    days = np.floor_divide(nanos, _NANOS_PER_DAY)
    values = np.empty(len(nanos), dtype=_INT96_VALUE)
    values["nanos_of_day"] = nanos - days * _NANOS_PER_DAY
    values["julian_day"] = days + _JULIAN_DAY_OF_EPOCH
    validity = array.is_valid().buffers()[1] if array.null_count else None
    return pa.FixedSizeBinaryArray.from_buffers(INT96, len(array), [validity, pa.py_buffer(values.view(np.uint8))],
                                               null_count=array.null_count)
