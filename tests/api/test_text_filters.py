"""Filters as SQL-like text wherever the API takes a filter: a scan (and ``Scan.filter``), a
change stream and ``changes``; each selects what the same pyarrow expression selects, prunes
partitions the same way, compares decimals and dates exactly, and a bad one is an error naming
the table that reads nothing."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import FilterError, ScanError

SCHEMA = pa.schema([
    pa.field("dt", pa.date32(), nullable=False),
    pa.field("id", pa.int64(), nullable=False),
    pa.field("amount", pa.decimal128(12, 2)),
    pa.field("name", pa.string()),
])


def rows(ids: list[int], day: int) -> pa.Table:
    return pa.table({
        "dt": [dt.date(2024, 1, day)] * len(ids),
        "id": ids,
        "amount": [decimal.Decimal(i) / 4 for i in ids],
        "name": [f"n{i}" if i % 3 else None for i in ids],
    }, schema=SCHEMA)


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                                   options={"bucket": "2", "changelog-producer": "input"})
    table.write(rows(list(range(10)), 1))
    table.write(rows(list(range(5, 15)), 2))
    return table


def ids(data: pa.Table) -> list[tuple[str, int]]:
    return sorted((str(d), i) for d, i in zip(data["dt"].to_pylist(), data["id"].to_pylist(), strict=True))


@pytest.mark.parametrize(("text", "expression"), [
    ("amount > 2.5", pc.field("amount") > pc.scalar(decimal.Decimal("2.50")).cast(pa.decimal128(12, 2))),
    ("dt = '2024-01-02' AND id < 8", (pc.field("dt") == pc.scalar(dt.date(2024, 1, 2))) & (pc.field("id") < 8)),
    ("name IS NULL OR id IN (1, 2)", pc.field("name").is_null() | pc.field("id").isin([1, 2])),
    ("NOT name LIKE 'n1%'", ~pc.match_like(pc.field("name"), "n1%")),
    # numbers the column's type cannot hold compare exactly
    ("id > 7.5 AND amount < 3.001", (pc.field("id") >= 8)
     & (pc.field("amount") <= pc.scalar(decimal.Decimal("3.00")).cast(pa.decimal128(12, 2)))),
])
def test_a_text_filter_selects_what_its_expression_does(table: cl.Table, text: str,
                                                        expression: pc.Expression) -> None:
    got = table.scan(filter=text).to_arrow()
    assert got.num_rows > 0
    assert ids(got) == ids(table.scan(filter=expression).to_arrow())
    assert ids(table.scan().filter(text).to_arrow()) == ids(got)
    # a filter given twice is the AND of both
    assert ids(table.scan(filter=text).filter("id >= 7").to_arrow()) == [k for k in ids(got) if k[1] >= 7]


def test_a_partition_filter_in_text_prunes_the_other_partitions(table: cl.Table) -> None:
    splits = table.scan(filter="dt = '2024-01-01'").plan()
    assert splits and {s.partition for s in splits} == {s.partition for s in
                                                       table.scan(filter=pc.field("dt") == dt.date(2024, 1, 1)).plan()}
    assert len({s.partition for s in table.scan().plan()}) == 2


def test_streams_and_changes_take_text_filters(table: cl.Table) -> None:
    batches = list(table.stream(mode="from-snapshot", snapshot_id=1, filter="id >= 12"))
    streamed = pa.concat_tables([b.data for b in batches])
    assert sorted(streamed["id"].to_pylist()) == [12, 13, 14]
    changed = table.changes(1, 2, filter="amount >= 3.25").to_arrow()
    assert sorted(changed["id"].to_pylist()) == [13, 14] and set(changed["rowkind"].to_pylist()) == {"+I"}


@pytest.mark.parametrize(("text", "message"), [
    ("nope = 1", "nope"),
    ("id = = 3", "expected a column or a value at character 6"),
    ("amount > 'lots'", "'lots' is not a value of column 'amount'"),
])
def test_a_bad_text_filter_names_the_table_and_reads_nothing(table: cl.Table, text: str, message: str) -> None:
    reads = (lambda: table.scan(filter=text), lambda: table.stream(filter=text),
             lambda: table.changes(0, 2, filter=text))
    for read in reads:
        with pytest.raises(FilterError, match=message) as info:
            read()
        assert info.value.table == "db.t" and "table db.t" in str(info.value)
    with pytest.raises(ScanError, match="SQL-like string"):
        table.scan(filter=42)  # type: ignore[arg-type]


def test_pyarrow_expressions_compare_decimal_columns_with_plain_numbers(table: cl.Table) -> None:
    """pyarrow 26 cannot bind ``pc.field("amount") > 1`` on a DECIMAL(12, 2) column; such a
    filter is read from its text, which gives the number the column's type."""
    got = table.scan(filter=(pc.field("amount") > 2) & (pc.field("name") != "n9")).to_arrow()
    assert ids(got) == ids(table.scan(filter="amount > 2 AND name <> 'n9'").to_arrow()) and got.num_rows > 0
    assert ids(table.scan(filter=~(pc.field("amount") <= 3)).to_arrow()) == ids(
        table.scan(filter="amount > 3").to_arrow())
    deleted = table.delete(pc.field("amount") >= 3)
    assert deleted is not None and table.scan(filter="amount >= 3").to_arrow().num_rows == 0
    # what the text form cannot say stays an error, naming the table and what to write instead
    with pytest.raises(FilterError, match=r"give the number as a decimal") as info:
        table.scan(filter=pc.field("amount").isin([1, 2]) | (pc.field("amount") > 1))
    assert info.value.table == "db.t"


def test_an_isin_of_integers_on_a_decimal_column_is_refused_before_reading(table: cl.Table) -> None:
    """pyarrow binds ``isin([1, 2])`` on a DECIMAL(12, 2) column but fails on the first value
    with a fraction it meets; the filter is refused up front, naming the fix, whatever the rows."""
    with pytest.raises(FilterError, match=r"give the number as a decimal") as info:
        table.scan(filter=pc.field("amount").isin([1, 2]))
    assert info.value.table == "db.t"
    with pytest.raises(FilterError, match=r"give the number as a decimal"):
        table.delete(pc.field("amount").isin([1]))
    assert ids(table.scan(filter=pc.field("amount").isin([decimal.Decimal("0.25"), decimal.Decimal("2")])).to_arrow()) \
        == ids(table.scan(filter="amount IN (0.25, 2)").to_arrow()) != []
