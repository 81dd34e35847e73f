"""The ``--where`` language, in process: what each construct selects, literal typing, and
errors that point at the bad token."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import re

import pyarrow as pa
import pytest

from changelake.errors import FilterError
from changelake.table.read.sql_filter import parse

ROWS = pa.table({
    "id": pa.array([1, 2, 3, 4], pa.int64()),
    "name": pa.array(["a", "b", None, "it's"]),
    "d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 2, 1), None, dt.date(2024, 3, 1)], pa.date32()),
    "price": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("3.00"), decimal.Decimal("0.25")],
                      pa.decimal128(10, 2)),
    "flag": pa.array([True, False, None, True]),
    "my col": pa.array([10.0, 20.0, 30.0, 40.0]),
    "tiny": pa.array([1, -5, None, 100], pa.int8()),
})


def ids(where: str) -> list[int]:
    return ROWS.filter(parse(where, ROWS.schema))["id"].to_pylist()


@pytest.mark.parametrize(("where", "expected"), [
    ("id = 2", [2]),
    ("id == 2", [2]),
    ("id != 2", [1, 3, 4]),
    ("id <> 2", [1, 3, 4]),
    ("id < 2", [1]),
    ("id <= 2", [1, 2]),
    ("id > 2", [3, 4]),
    ("id >= 2", [2, 3, 4]),
    ("2 < id", [3, 4]),
    ("id > -1 and id < 3", [1, 2]),
    ("id > 3 or -2 > id or not +1 < id", [1, 4]),
    ("id = 1 OR id = 4", [1, 4]),
    ("NOT id = 1", [2, 3, 4]),
    ("not (id = 1 or id = 2) and id != 4", [3]),
    ("id = 1 or id = 2 and id = 3", [1]),  # AND binds tighter than OR
    ("(id = 1 or id = 2) and id = 2", [2]),
    ("id IN (1, 3, 9)", [1, 3]),
    ("id not in (1, 3)", [2, 4]),
    ("name IS NULL", [3]),
    ("name is not null", [1, 2, 4]),
    ("name = 'it''s'", [4]),
    ("name in ('a', 'b')", [1, 2]),
    ("d >= '2024-02-01'", [2, 4]),
    ("d = '2024-01-01' or d is null", [1, 3]),
    ("price > 1", [1, 3]),
    ("price = 0.25", [4]),
    ("flag", [1, 4]),
    ("flag = false", [2]),
    ("flag = TRUE", [1, 4]),
    ('"my col" >= 30', [3, 4]),
    ("id < price", [1]),
    ("price in (3, 0.25)", [3, 4]),
    ("name like 'a%'", [1]),
    ("name like '%''%'", [4]),
    ("name like '_'", [1, 2]),
    ("id between 2 and 3", [2, 3]),
    ("id BETWEEN 2 AND 3 AND id != 3", [2]),  # BETWEEN's AND binds first
    ("id not between 2 and 3", [1, 4]),
    ("not id between 2 and 3 or id = 2", [1, 2, 4]),
    ("d between '2024-01-15' and '2024-03-01'", [2, 4]),
    ("price between 0.25 and 1.5", [1, 4]),
    ("id between 1 and price", [1, 3]),
])
def test_selects(where: str, expected: list[int]) -> None:
    assert ids(where) == expected


# SQL's three-valued logic: a NULL operand makes a comparison, IN or LIKE unknown, NOT keeps it
# unknown, and a row is kept only where the filter is true (names: a, b, NULL, it's; flags: true,
# false, NULL, true; prices: 1.50, NULL, 3.00, 0.25).
@pytest.mark.parametrize(("where", "expected"), [
    ("name not in ('a')", [2, 4]),
    ("not name in ('a')", [2, 4]),
    ("not (name not in ('a'))", [1]),
    ("name in ('a') or name not in ('a')", [1, 2, 4]),
    ("not (name in ('a') or name is null)", [2, 4]),
    ("price not in (3)", [1, 4]),
    ("d not in ('2024-01-01')", [2, 4]),
    ("name <> 'a'", [2, 4]),
    ("name != 'a'", [2, 4]),
    ("not name = 'a'", [2, 4]),
    ("not (price > 1)", [4]),
    ("not flag", [2]),
    ("not (flag and id > 1)", [1, 2]),
    ("not (flag or id > 3)", [2]),
    ("name not like 'a%'", [2, 4]),
    ("not name like '_'", [4]),
    ("not (name is null)", [1, 2, 4]),
    ("price not between 1 and 3", [4]),
    ("not (price between 0 and 1)", [1, 3]),
])
def test_negations_drop_nulls_as_sql(where: str, expected: list[int]) -> None:
    assert ids(where) == expected


@pytest.mark.parametrize(("where", "expected"), [
    ("id > 1.5", [2, 3, 4]),
    ("id >= 1.5", [2, 3, 4]),
    ("id < 2.5", [1, 2]),
    ("id <= 2.5", [1, 2]),
    ("2.5 > id", [1, 2]),
    ("id = 1.5", []),
    ("id != 1.5", [1, 2, 3, 4]),
    ("id in (1.5, 3)", [3]),
    ("id not in (1.5)", [1, 2, 3, 4]),
    ("id between 1.5 and 3.5", [2, 3]),
    ("id > -0.5 and id < 1e30", [1, 2, 3, 4]),
    ("id < -1e30 or id > 1e30", []),
    ("tiny < 1000", [1, 2, 4]),
    ("tiny > 1000 or tiny < -1000", []),
    ("not tiny < 1000", []),
    ("tiny <> 1.5", [1, 2, 4]),
    ("not tiny = 1.5", [1, 2, 4]),
    ("tiny in (1, 1000, 2.5)", [1]),
    ("tiny not in (1000)", [1, 2, 4]),
    ("price = 1.005", []),
    ("price <> 1.005", [1, 3, 4]),
    ("not price = 1.005", [1, 3, 4]),
    ("price > 1.005", [1, 3]),
    ("price < 0.251", [4]),
    ("price <= 0.249", []),
    ("price > 99999999.995", []),
    ("price < 1e9", [1, 3, 4]),
    ("price between 0.001 and 2.999", [1, 4]),
])
def test_numbers_a_column_cannot_hold_compare_exactly(where: str, expected: list[int]) -> None:
    assert ids(where) == expected


def test_numbers_compare_with_integer_and_decimal_columns_as_exact_numbers() -> None:
    """Every comparison of a number with an integer or decimal column selects what comparing
    exact numbers (SQL's numeric semantics: NULL unknown) selects, on and off the column's grid
    and past the ends of its type."""
    rng = random.Random(7)
    types = [pa.int8(), pa.uint8(), pa.int32(), pa.decimal128(4, 2), pa.decimal128(6, 0)]
    for type_ in types:
        step = decimal.Decimal(1).scaleb(-type_.scale) if pa.types.is_decimal(type_) else decimal.Decimal(1)
        low, high = (decimal.Decimal(0), decimal.Decimal(255)) if type_ == pa.uint8() else (
            decimal.Decimal(-99), decimal.Decimal(99))
        values = [None, *(low + step * rng.randrange(int((high - low) / step) + 1) for _ in range(30))]
        column = pa.array([v if v is None or pa.types.is_decimal(type_) else int(v) for v in values], type_)
        rows = pa.table({"v": column})
        for _ in range(60):
            literal = rng.choice([
                str(rng.randint(-300, 300)), f"{rng.uniform(-300, 300):.3f}", "1e30", "-1e30",
                str(rng.choice(values[1:])),
            ])
            number = decimal.Decimal(literal)
            for operator, holds in OPERATORS.items():
                expected = [v is not None and holds(v, number) for v in values]
                for where in (f"v {operator} {literal}", f"{literal} {FLIPPED[operator]} v"):
                    got = rows.filter(parse(where, rows.schema)).num_rows
                    assert got == sum(expected), (type_, where)
                    negated = rows.filter(parse(f"not ({where})", rows.schema)).num_rows
                    assert negated == sum(v is not None and not holds(v, number) for v in values), (type_, where)


OPERATORS = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
             "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@pytest.mark.parametrize(("where", "message", "position"), [
    ("", "empty expression", 1),
    ("id = = 3", "expected a column or a value", 6),
    ("id = 3 and", "expected a column or a value", 11),
    ("nope = 3", "unknown column 'nope'", 1),
    ("id = 'x'", "'x' is not a value of column 'id' (int64)", 6),
    ("d > 'tomorrow'", "is not a value of column 'd' (date32[day])", 5),
    ("(id = 3", "expected ')'", 8),
    ("id = 3)", "expected AND, OR or the end", 7),
    ("id 3", "expected a comparison", 4),
    ("id = 3 # 4", "unexpected character '#'", 8),
    ("id is 3", "expected NULL after IS", 7),
    ("id not 3", "expected IN, BETWEEN or LIKE after NOT", 8),
    ("id between 1 3", "expected AND between the bounds of BETWEEN", 14),
    ("id between 1 and 'x'", "'x' is not a value of column 'id' (int64)", 18),
    ("1 between 0 and 2", "a comparison needs a column on one side", 11),
    ("1 = 2", "a comparison needs a column on one side", 3),
    ("id = null", "use IS NULL", 6),
    ("3 in (1)", "IN needs a column on its left", 1),
    ("id -1 = 0", "arithmetic is not supported", 4),
    ("(id) -1 = 0", "arithmetic is not supported", 6),
    ("name = 'open", "unexpected character", 8),
    ("price = 'cheap'", "'cheap' is not a value of column 'price'", 9),
    ("id like 'a'", "LIKE needs a text column; 'id' is int64", 1),
    ("name like 3", "expected a 'pattern' after LIKE", 11),
    ("name < id", "< does not apply to column 'name' (string) and column 'id' (int64)", 6),
])
def test_errors_point_at_the_token(where: str, message: str, position: int) -> None:
    with pytest.raises(FilterError, match=re.escape(message)) as raised:
        parse(where, ROWS.schema)
    assert raised.value.position == position - 1
    assert f"at character {position} " in str(raised.value)
    assert "\n" not in str(raised.value)
