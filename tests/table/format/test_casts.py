"""Paimon's cast rules for values of a file written before its column's type changed: each
rule with values whose results were read from Java Paimon 0.9 (tests/integration/
test_java_casts.py checks them all against Java in one run), and the values Java's read fails
on, refused with a DataError naming the column and file."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from changelake.errors import DataError
from changelake.table.format import casts, java_numbers, types

D = Decimal
T = dt.datetime
NAN, INF = float("nan"), float("inf")

CASES: list[tuple[str, str, list[Any], list[Any]]] = [
    # integers narrow by wrapping; floats truncate toward zero and saturate at int/long, NaN is 0
    ("BIGINT", "INT", [2**40 + 5, -(2**31) - 1, 7, None], [5, 2**31 - 1, 7, None]),
    ("INT", "TINYINT", [300, -129, 5], [44, 127, 5]),
    ("DOUBLE", "INT", [1e20, -1e20, NAN, 2.9, -2.9], [2**31 - 1, -(2**31), 0, 2, -2]),
    ("DOUBLE", "TINYINT", [300.7, -1e10, 1.5], [44, 0, 1]),
    ("DOUBLE", "BIGINT", [1e30, -2.5, 9.3e18], [2**63 - 1, -2, 2**63 - 1]),
    ("DOUBLE", "FLOAT", [1e300, -3.5], [INF, -3.5]),
    # Double.toString / Float.toString
    ("DOUBLE", "STRING", [1.0, 1e20, 0.1, 1e-5, 123456789.0, -0.0, NAN, INF, 5e-324, 2.0**60 + 2**8, 0.001, 1e7,
                          9999999.0, None],
     ["1.0", "1.0E20", "0.1", "1.0E-5", "1.23456789E8", "-0.0", "NaN", "Infinity", "4.9E-324",
      "1.15292150460684723E18", "0.001", "1.0E7", "9999999.0", None]),
    ("FLOAT", "STRING", [0.1, 1e10, 1.4e-45, 3.4e38, 16777217.0, -2.5],
     ["0.1", "1.0E10", "1.4E-45", "3.4E38", "1.6777216E7", "-2.5"]),
    # to DECIMAL: HALF_UP from the double's Java text, null past the precision
    ("DOUBLE", "DECIMAL(10, 2)", [0.125, -2.675, 1e20, 2.5, 1e-300, 99999999.995, 1.005],
     [D("0.13"), D("-2.68"), None, D("2.50"), D("0.00"), None, D("1.01")]),
    ("FLOAT", "DECIMAL(10, 4)", [0.1, 1.5, -7.123456], [D("0.1000"), D("1.5000"), D("-7.1235")]),
    ("BIGINT", "DECIMAL(5, 1)", [1234, 12345, -9999], [D("1234.0"), None, D("-9999.0")]),
    ("DECIMAL(10, 4)", "DECIMAL(6, 1)", [D("1.25"), D("-1.25"), D("12345.96"), D("99999.95")],
     [D("1.3"), D("-1.3"), D("12346.0"), None]),
    ("DECIMAL(10, 2)", "INT", [D("-2.70"), D("2.70"), D("12345678.99")], [-2, 2, 12345678]),
    ("DECIMAL(10, 2)", "TINYINT", [D("300.50"), D("-129.99")], [44, 127]),
    ("DECIMAL(10, 3)", "DOUBLE", [D("0.100"), D("1234567.891"), D("-0.003")], [0.1, 1234567.891, -0.003]),
    ("DECIMAL(10, 2)", "STRING", [D("1.50"), D("-0.05"), D("0.00")], ["1.50", "-0.05", "0.00"]),
    # booleans
    ("INT", "BOOLEAN", [0, 2, -1], [False, True, True]),
    ("BIGINT", "BOOLEAN", [2**32, 1, 0], [False, True, False]),
    ("BOOLEAN", "DECIMAL(3, 1)", [True, False], [D("1.0"), D("0.0")]),
    ("BOOLEAN", "STRING", [True, False], ["true", "false"]),
    # from text
    ("STRING", "INT", ["12", "-7.9", "+3", "007", None], [12, -7, 3, 7, None]),
    ("STRING", "DOUBLE", [" 1.5 ", "1e3", "-Infinity", "2d", ".5"], [1.5, 1000.0, -INF, 2.0, 0.5]),
    ("STRING", "DECIMAL(5, 2)", ["1.005", "-1.005", "1e2", "12345", ".5", "+7"],
     [D("1.01"), D("-1.01"), D("100.00"), None, D("0.50"), D("7.00")]),
    ("STRING", "BOOLEAN", ["yes", "F", "1", "TRUE", "n", None], [True, False, True, True, False, None]),
    ("STRING", "CHAR(3)", ["a", "abcdef", "ab"], ["a  ", "abc", "ab "]),
    ("STRING", "VARCHAR(2)", ["a", "abc"], ["a", "ab"]),
    ("INT", "CHAR(5)", [12, 1234567], ["12   ", "12345"]),
    ("STRING", "BINARY(4)", ["ab", "abcdef"], [b"ab\x00\x00", b"abcd"]),
    ("VARBINARY(8)", "BINARY(3)", [b"a", b"abcd"], [b"a\x00\x00", b"abc"]),
    ("BYTES", "VARBINARY(2)", [b"abc", b"a"], [b"ab", b"a"]),
    # dates and timestamps: Java's division toward zero before 1970
    ("TIMESTAMP(6)", "TIMESTAMP(0)", [T(1969, 12, 31, 23, 59, 59, 500000), T(2024, 1, 1, 12, 0, 0, 999999)],
     [T(1970, 1, 1), T(2024, 1, 1, 12)]),
    ("TIMESTAMP(6)", "TIMESTAMP(3)", [T(1969, 12, 31, 23, 59, 59, 999999), T(2024, 1, 1, 0, 0, 0, 1)],
     [T(1969, 12, 31, 23, 59, 59, 999000), T(2024, 1, 1)]),
    ("TIMESTAMP(3)", "DATE", [T(1969, 12, 31, 12), T(2024, 2, 29, 23), T(1969, 1, 1)],
     [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(1969, 1, 1)]),
    ("DATE", "TIMESTAMP(3)", [dt.date(1969, 7, 20)], [T(1969, 7, 20)]),
    ("TIMESTAMP(6)", "STRING", [T(2024, 1, 1, 12, 30, 5, 120000), T(1969, 12, 31, 23, 59, 59, 500000), T(2024, 1, 1)],
     ["2024-01-01 12:30:05.120000", "1969-12-31 23:59:59.500000", "2024-01-01 00:00:00.000000"]),
    ("TIMESTAMP(3)", "STRING", [T(2024, 1, 1, 12, 30, 5), T(2024, 1, 1, 12, 30, 5, 100000)],
     ["2024-01-01 12:30:05.000", "2024-01-01 12:30:05.100"]),
    ("TIMESTAMP(0)", "STRING", [T(2024, 1, 1, 12, 30, 5)], ["2024-01-01 12:30:05"]),
    ("DATE", "STRING", [dt.date(2024, 2, 29)], ["2024-02-29"]),
    ("TIMESTAMP(3)", "BIGINT", [T(1969, 12, 31, 23, 59, 58, 500000), T(2024, 1, 1)], [-1, 1704067200]),
    ("INT", "TIMESTAMP(3)", [-1, 1700000000], [T(1969, 12, 31, 23, 59, 59), T(2023, 11, 14, 22, 13, 20)]),
    ("TIME(3)", "STRING", [dt.time(12, 30, 5, 120000), dt.time(0, 0), dt.time(1, 2, 3, 5000)],
     ["12:30:05.12", "00:00:00.0", "01:02:03.005"]),
    ("TIME(0)", "STRING", [dt.time(12, 30, 5)], ["12:30:05"]),
    ("TIME(3)", "TIMESTAMP(3)", [dt.time(12, 30, 5, 120000)], [T(1970, 1, 1, 12, 30, 5, 120000)]),
    ("TIMESTAMP(6)", "TIME(3)", [T(2024, 1, 1, 12, 30, 5, 123456)], [dt.time(12, 30, 5, 123000)]),
    ("STRING", "DATE", ["2024-02-29", "19000"], [dt.date(2024, 2, 29), dt.date(2022, 1, 8)]),
    ("STRING", "TIMESTAMP(3)", ["2024-01-01 12:00:00.1239", "2024-01-01", "2024-1-1 1:2:3.5", "2024-02-30 00:00:00",
                                "2024-01-01 24:00:00", None],
     [T(2024, 1, 1, 12, 0, 0, 123000), T(2024, 1, 1), T(2024, 1, 1, 1, 2, 3, 500000), T(2024, 2, 29), T(2024, 1, 2),
      None]),
    ("STRING", "DATE", ["2024-2-9", " 2024 - 3 - 4 ", "2024-02-29 12:00:00", "2024", "2024-3", None],
     [dt.date(2024, 2, 9), dt.date(2024, 3, 4), dt.date(2024, 2, 29), dt.date(1975, 7, 18), dt.date(2024, 3, 1), None]),
]


def _cast(source: str, target: str, values: list[Any]) -> list[Any]:
    array = pa.array(values, types.to_arrow(source))
    return casts.cast(array, source, target, table="db.t", column="c", file="f.parquet").to_pylist()


def _same(got: Any, want: Any) -> bool:
    return got == want or (isinstance(got, float) and isinstance(want, float) and got != got and want != want)


@pytest.mark.parametrize(("source", "target", "values", "expected"), CASES, ids=[f"{c[0]}->{c[1]}" for c in CASES])
def test_casts_as_java_paimon(source: str, target: str, values: list[Any], expected: list[Any]) -> None:
    got = _cast(source, target, values)
    assert all(_same(g, w) for g, w in zip(got, expected, strict=True)), got
    assert casts.cast(pa.array(values, types.to_arrow(source)), source, target, table="db.t", column="c",
                      file="f").type == types.to_arrow(target)


@pytest.mark.parametrize(("source", "target", "value", "message"), [
    ("STRING", "INT", "abc", "'abc' is not a whole number"),
    ("STRING", "INT", "-", "lone sign"),
    ("STRING", "INT", "99999999999", "INT"),
    ("STRING", "TINYINT", "128", "TINYINT"),
    ("STRING", "BOOLEAN", "maybe", "'maybe' is not a boolean"),
    ("STRING", "DECIMAL(5, 2)", " 1", "is not a decimal number"),
    ("STRING", "DOUBLE", "1,5", "is not a number"),
    ("DOUBLE", "DECIMAL(5, 2)", NAN, "NaN"),
    ("STRING", "DATE", "2023-02-29", "'2023-02-29' is not a date"),
    ("STRING", "DATE", "2024-02-29T10:00", "is not a date"),
    ("STRING", "TIMESTAMP(6)", "2024-01-01T12:00:00", "is not a timestamp"),
    ("STRING", "TIMESTAMP(6)", "2024-01-01 12:60:00", "'2024-01-01 12:60:00' is not a timestamp"),
])
def test_values_java_cannot_cast_fail_the_read_naming_the_column(source: str, target: str, value: Any,
                                                                 message: str) -> None:
    with pytest.raises(DataError, match=message) as failed:
        good = "2024-01-01" if target.startswith(("DATE", "TIMESTAMP")) else "1"
        _cast(source, target, [good, value] if source == "STRING" else [1.0, value])
    assert (failed.value.table, failed.value.column, failed.value.file) == ("db.t", "c", "f.parquet")


def test_java_double_text_is_java_17s_not_always_the_shortest() -> None:
    """Whole numbers below 2**63 print their integer digits, rounding away only those the
    significand cannot hold; values whose digits Java generates in longs get its digits, which
    are not always the shortest (Java 17's FloatingDecimal; each verified against Java)."""
    values = pa.array([-8.073431937475847e18, -3.705988134436395e17, 2.0**53 + 2, 488115392.0, 8.47e21, 1e23,
                       1.06624915963808e19, 4e23, 8.1993e20, 0.1, 123.456, 1e-300])
    assert java_numbers.float_text(values).to_pylist() == [
        "-8.0734319374758472E18", "-3.7059881344363949E17", "9.007199254740994E15", "4.88115392E8",
        "8.470000000000001E21", "9.999999999999999E22", "1.0662491596380799E19", "3.9999999999999997E23",
        "8.199299999999999E20", "0.1", "123.456", "1.0E-300"]
