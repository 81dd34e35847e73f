"""Spark schemas of changelake reads and writes: the Spark type of each Arrow type a table holds,
the check of a schema a user gives, the Arrow schema Spark holds a Python data source's batches
to, and the timestamp flavour a written column takes."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from changelake.errors import SchemaError

_ATOMIC: tuple[tuple[str, type[DataType]], ...] = (
    ("is_boolean", BooleanType),
    ("is_int8", ByteType),
    ("is_int16", ShortType),
    ("is_int32", IntegerType),
    ("is_int64", LongType),
    ("is_float32", FloatType),
    ("is_float64", DoubleType),
    ("is_string", StringType),
    ("is_large_string", StringType),
    # Paimon's BINARY(n) reads as fixed-size binary; Spark has one binary type.
    ("is_binary", BinaryType),
    ("is_large_binary", BinaryType),
    ("is_fixed_size_binary", BinaryType),
    ("is_date32", DateType),
)


def spark_type(data_type: pa.DataType, *, table: str, column: str) -> DataType:
    """The Spark type of a column's Arrow type: Paimon's TIMESTAMP is Spark's TIMESTAMP_NTZ,
    TIMESTAMP WITH LOCAL TIME ZONE is Spark's TIMESTAMP; ARRAY, MAP and ROW nest."""
    for check, spark in _ATOMIC:
        if getattr(pa.types, check)(data_type):
            return spark()
    if pa.types.is_decimal(data_type):
        return DecimalType(data_type.precision, data_type.scale)
    if pa.types.is_timestamp(data_type):
        return TimestampNTZType() if data_type.tz is None else TimestampType()
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        element = data_type.value_field
        return ArrayType(spark_type(element.type, table=table, column=column), containsNull=element.nullable)
    if pa.types.is_map(data_type):
        return MapType(spark_type(data_type.key_type, table=table, column=column),
                       spark_type(data_type.item_type, table=table, column=column),
                       valueContainsNull=data_type.item_field.nullable)
    if pa.types.is_struct(data_type):
        return StructType([StructField(f.name, spark_type(f.type, table=table, column=column), f.nullable)
                           for f in data_type])
    raise SchemaError(f"type {data_type} has no Spark equivalent", table=table, column=column)


def struct_type(schema: pa.Schema, *, table: str) -> StructType:
    """The Spark schema of an Arrow schema (names, order and nullability kept)."""
    return StructType([StructField(f.name, spark_type(f.type, table=table, column=f.name), f.nullable)
                       for f in schema])


def check_requested(requested: StructType, offered: StructType, *, table: str) -> None:
    """SchemaError unless each field of ``requested`` (a schema the user gave) is a field of
    ``offered``: the same name and type, and nullable unless the offered field is not. The
    fields may be fewer and in another order (the read then carries those columns only)."""
    fields = {f.name: f for f in offered.fields}
    seen: set[str] = set()
    for field in requested.fields:
        known = fields.get(field.name)
        if known is None:
            raise SchemaError(f"the given schema has column {field.name!r}, the read has {offered.names}",
                              table=table, column=field.name)
        if field.name in seen:
            raise SchemaError("the given schema has this column twice", table=table, column=field.name)
        seen.add(field.name)
        # simpleString leaves nullability out, also inside nested types.
        if field.dataType.simpleString() != known.dataType.simpleString():
            raise SchemaError(f"the given schema has type {field.dataType.simpleString()}, the table has "
                              f"{known.dataType.simpleString()}", table=table, column=field.name)
        if known.nullable and not field.nullable:
            raise SchemaError("the given schema has NOT NULL, the table's column holds nulls", table=table,
                              column=field.name)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks a Python data source's record batches against (it reads
    TIMESTAMP values as UTC instants)."""
    return to_arrow_schema(schema, timezone="UTC")


def with_table_timestamps(data_type: DataType, table_type: pa.DataType) -> DataType:
    """``data_type`` (of a column Spark writes) with each timestamp turned into the flavour of
    the table's type in its place, nested ones included: TIMESTAMP into a zone-less (Paimon
    TIMESTAMP) column is TIMESTAMP_NTZ, TIMESTAMP_NTZ into a zoned (TIMESTAMP_LTZ) one is
    TIMESTAMP. Anything else is left as it is (the write checks it)."""
    if isinstance(data_type, (TimestampType, TimestampNTZType)) and pa.types.is_timestamp(table_type):
        return TimestampNTZType() if table_type.tz is None else TimestampType()
    if isinstance(data_type, ArrayType) and (pa.types.is_list(table_type) or pa.types.is_large_list(table_type)):
        return ArrayType(with_table_timestamps(data_type.elementType, table_type.value_type), data_type.containsNull)
    if isinstance(data_type, MapType) and pa.types.is_map(table_type):
        return MapType(with_table_timestamps(data_type.keyType, table_type.key_type),
                       with_table_timestamps(data_type.valueType, table_type.item_type), data_type.valueContainsNull)
    if isinstance(data_type, StructType) and pa.types.is_struct(table_type):
        return StructType([
            StructField(f.name, with_table_timestamps(f.dataType, table_type.field(f.name).type), f.nullable,
                        f.metadata) if table_type.get_field_index(f.name) >= 0 else f
            for f in data_type.fields])
    return data_type
