"""Values written before a type change, read after it: changelake casts them as Java Paimon
0.9's ``CastExecutors`` do, for the type changes Paimon's ``ALTER TABLE`` allows (one Java
write, one change of every column's type, one read by each engine)."""

from __future__ import annotations

import datetime as dt
import re
from datetime import datetime as ts
from decimal import Decimal
from typing import Any

from java_paimon import EPOCH, JavaPaimon

import changelake as cl

# (type written, type read, values): every rule of Paimon's CastExecutors that changelake's
# reads meet, with the values where Java's semantics differ from Arrow's casts
CASES: list[tuple[str, str, list[Any]]] = [
    ("BIGINT", "INT", [2**40 + 5, -(2**31) - 1, 7]),
    ("INT", "TINYINT", [300, -129, 5]),
    ("INT", "SMALLINT", [70000, -1]),
    ("DOUBLE", "INT", [1e20, -1e20, float("nan"), 2.9, -2.9]),
    ("DOUBLE", "TINYINT", [300.7, -1e10, 1.5]),
    ("DOUBLE", "BIGINT", [1e30, -2.5, 9.3e18]),
    ("DOUBLE", "FLOAT", [0.1, 1e300, -3.5]),
    ("FLOAT", "DOUBLE", [0.1, 3.5]),
    ("BIGINT", "DOUBLE", [2**53 + 1, -(2**62) + 1]),
    ("BIGINT", "FLOAT", [2**40 + 1, 16777217]),
    ("DOUBLE", "STRING", [1.0, 1e20, 0.1, 1e-5, 123456789.0, -0.0, float("nan"), float("inf"), 5e-324, 2.0**60 + 2**8,
                          0.001, 1e7, 9999999.0, 8.47e21, 1e23, 1.06624915963808e19, 3.14159e-200]),
    ("FLOAT", "STRING", [0.1, 1e10, 1.4e-45, 3.4e38, 16777217.0, -2.5]),
    ("DOUBLE", "DECIMAL(10, 2)", [0.125, -2.675, 1e20, 2.5, 1e-300, 99999999.995, 1.005]),
    ("FLOAT", "DECIMAL(10, 4)", [0.1, 1.5, -7.123456]),
    ("DOUBLE", "DECIMAL(38, 2)", [8.47e21, 1e23, 0.3]),
    ("BIGINT", "DECIMAL(5, 1)", [1234, 12345, -9999]),
    ("INT", "DECIMAL(20, 18)", [1, 99, 100]),
    ("DECIMAL(10, 4)", "DECIMAL(6, 1)", [Decimal("1.25"), Decimal("-1.25"), Decimal("12345.96"), Decimal("99999.95")]),
    ("DECIMAL(20, 4)", "DECIMAL(38, 2)", [Decimal("1234567890123456.1250"), Decimal("-0.0050")]),
    ("DECIMAL(10, 2)", "INT", [Decimal("-2.70"), Decimal("2.70"), Decimal("12345678.99")]),
    ("DECIMAL(10, 2)", "TINYINT", [Decimal("300.50"), Decimal("-129.99")]),
    ("DECIMAL(10, 3)", "DOUBLE", [Decimal("0.100"), Decimal("1234567.891"), Decimal("-0.003")]),
    ("DECIMAL(25, 3)", "DOUBLE", [Decimal("0.100"), Decimal("1234567890123456789.123")]),
    ("DECIMAL(10, 3)", "FLOAT", [Decimal("0.100"), Decimal("-7.125")]),
    ("DECIMAL(10, 2)", "STRING", [Decimal("1.50"), Decimal("-0.05"), Decimal("0.00")]),
    ("INT", "BOOLEAN", [0, 2, -1]),
    ("BIGINT", "BOOLEAN", [2**32, 1, 0]),
    ("BOOLEAN", "INT", [True, False]),
    ("BOOLEAN", "DOUBLE", [True, False]),
    ("BOOLEAN", "STRING", [True, False]),
    ("BOOLEAN", "DECIMAL(3, 1)", [True, False]),
    ("STRING", "INT", ["12", "-7.9", "+3", "007"]),
    ("STRING", "BIGINT", ["-9223372036854775808", "1.5"]),
    ("STRING", "TINYINT", ["127", "-128"]),
    ("STRING", "DOUBLE", [" 1.5 ", "1e3", "-Infinity", "2d", ".5", "NaN"]),
    ("STRING", "FLOAT", ["0.1", "3.4028235e38", "1.00000017881393421514957253748434595763683319091796875"]),
    ("STRING", "DECIMAL(5, 2)", ["1.005", "-1.005", "1e2", "12345", ".5", "+7"]),
    ("STRING", "BOOLEAN", ["yes", "F", "1", "TRUE", "n"]),
    ("STRING", "CHAR(3)", ["a", "abcdef", "ab"]),
    ("STRING", "VARCHAR(2)", ["a", "abc"]),
    ("INT", "STRING", [-12, 0]),
    ("INT", "CHAR(5)", [12, 1234567]),
    ("VARCHAR(10)", "STRING", ["x", "abcdefghij"]),
    ("TIMESTAMP(6)", "TIMESTAMP(0)", [ts(1969, 12, 31, 23, 59, 59, 500000), ts(2024, 1, 1, 12, 0, 0, 999999)]),
    ("TIMESTAMP(6)", "TIMESTAMP(3)", [ts(1969, 12, 31, 23, 59, 59, 999999), ts(2024, 1, 1, 0, 0, 0, 1)]),
    ("TIMESTAMP(3)", "TIMESTAMP(6)", [ts(1960, 1, 1, 0, 0, 0, 123000)]),
    ("TIMESTAMP(3)", "DATE", [ts(1969, 12, 31, 12, 0), ts(2024, 2, 29, 23, 0), ts(1969, 1, 1)]),
    ("DATE", "TIMESTAMP(3)", [dt.date(1969, 7, 20), dt.date(2024, 2, 29)]),
    ("TIMESTAMP(6)", "STRING", [ts(2024, 1, 1, 12, 30, 5, 120000), ts(1969, 12, 31, 23, 59, 59, 500000),
                                ts(2024, 1, 1)]),
    ("TIMESTAMP(3)", "STRING", [ts(2024, 1, 1, 12, 30, 5), ts(2024, 1, 1, 12, 30, 5, 100000)]),
    ("TIMESTAMP(0)", "STRING", [ts(2024, 1, 1, 12, 30, 5)]),
    ("DATE", "STRING", [dt.date(2024, 2, 29), dt.date(1900, 1, 1)]),
    ("TIMESTAMP(3)", "BIGINT", [ts(1969, 12, 31, 23, 59, 58, 500000), ts(2024, 1, 1)]),
    ("TIMESTAMP(3)", "INT", [ts(2024, 1, 1)]),
    ("INT", "TIMESTAMP(3)", [-1, 1700000000]),
    ("BIGINT", "TIMESTAMP(6)", [1700000000]),
    ("STRING", "DATE", ["2024-02-29", "19000", "2024-2-9", " 2024 - 3 - 4 ", "2024-02-29 12:00:00", "2024-3"]),
    ("STRING", "TIMESTAMP(3)", ["2024-01-01 12:00:00.1239", "2024-01-01", "2024-1-1 1:2:3.5", "2024-02-30 00:00:00",
                                "2024-01-01 24:00:00", "2024-01-01 12:00:00."]),
    ("TIME(3)", "STRING", [dt.time(12, 30, 5, 120000), dt.time(0, 0), dt.time(1, 2, 3, 5000)]),
    ("TIME(0)", "STRING", [dt.time(12, 30, 5)]),
    ("TIME(3)", "TIMESTAMP(3)", [dt.time(12, 30, 5, 120000)]),
    ("TIMESTAMP(6)", "TIME(3)", [ts(2024, 1, 1, 12, 30, 5, 123456)]),
    ("STRING", "BYTES", ["ab"]),
    ("STRING", "BINARY(4)", ["ab", "abcdef"]),
    ("BYTES", "STRING", [b"hi"]),
    ("BYTES", "VARBINARY(2)", [b"abc", b"a"]),
    ("VARBINARY(8)", "BINARY(3)", [b"a", b"abcd"]),
]


def _java_type(paimon: Any, sql: str) -> Any:
    name, _, args = re.match(r"(\w+)(\((.*)\))?", sql).groups()  # type: ignore[union-attr]
    return getattr(paimon.types.DataTypes, name)(*(int(a) for a in args.split(",")) if args else ())


def _plain(value: Any) -> Any:
    """A value as the Java bridge decodes it (micros since the epoch, days, text, bytes)."""
    if isinstance(value, dt.datetime):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - EPOCH.date()).days
    if isinstance(value, dt.time):  # milliseconds of the day
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def test_values_written_before_a_type_change_read_as_java_reads_them(tmp_path: Any, java: JavaPaimon) -> None:
    warehouse = str(tmp_path)
    paimon = java.jvm.org.apache.paimon
    builder = paimon.schema.Schema.newBuilder().column("id", paimon.types.DataTypes.INT().notNull())
    for i, (old, _, _) in enumerate(CASES):
        builder.column(f"c{i}", _java_type(paimon, old))
    catalog = java.catalog(warehouse)
    catalog.createDatabase("db", True)
    identifier = paimon.catalog.Identifier.create("db", "t")
    catalog.createTable(identifier, builder.primaryKey(["id"]).option("bucket", "1").build(), False)
    rows = max(len(values) for _, _, values in CASES)
    java.write(warehouse, "db.t", [("+I", {"id": r, **{f"c{i}": values[r] for i, (_, _, values) in enumerate(CASES)
                                                       if r < len(values)}}) for r in range(rows)])
    change = paimon.schema.SchemaChange
    catalog.alterTable(identifier, [change.updateColumnType(f"c{i}", _java_type(paimon, new))
                                    for i, (_, new, _) in enumerate(CASES)], False)
    theirs = sorted(java.read(warehouse, "db.t"), key=lambda row: row["id"])
    ours = sorted(cl.open_table(f"{warehouse}/db.db/t").scan().to_arrow().to_pylist(), key=lambda row: row["id"])
    differences = [(f"c{i}", f"{old} -> {new}", r, _plain(ours[r][f"c{i}"]), _plain(theirs[r][f"c{i}"]))
                   for i, (old, new, values) in enumerate(CASES) for r in range(len(values))
                   if _plain(ours[r][f"c{i}"]) != _plain(theirs[r][f"c{i}"])]
    assert differences == []
