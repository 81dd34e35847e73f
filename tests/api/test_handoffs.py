"""Scans, change reads and change-stream batches handed to pandas, polars and DuckDB."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import MissingExtraError

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string()), ("n", pa.float64())])


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    table.write(pa.table({"k": [1, 2, 3, 4], "v": ["a", "b", None, "d"], "n": [1.5, 2.5, 3.5, None]}, schema=SCHEMA))
    table.write(pa.table({"k": [2, 5], "v": ["B", "e"], "n": [20.0, 5.0]}, schema=SCHEMA))
    return table


def test_scan_hand_offs_hold_the_same_rows_as_arrow(table: cl.Table) -> None:
    scan = table.scan()
    arrow = scan.to_arrow().sort_by("k")
    assert arrow.num_rows == 5
    assert scan.to_pandas().sort_values("k").reset_index(drop=True).equals(arrow.to_pandas())
    frame = scan.to_polars()
    assert isinstance(frame, pl.DataFrame) and frame.sort("k").to_dicts() == arrow.to_pylist()
    selected = table.scan(columns=["k", "v"], filter=pa.compute.field("k") > 1).to_polars()
    assert selected.columns == ["k", "v"] and sorted(selected["k"].to_list()) == [2, 3, 4, 5]


def test_scan_to_duckdb_registers_a_view_that_can_be_queried_again(table: cl.Table) -> None:
    con = table.scan().to_duckdb("t")
    assert con.sql("SELECT count(*), sum(n) FROM t").fetchall() == [(5, 30.0)]
    assert con.sql("SELECT v FROM t WHERE k = 2").fetchall() == [("B",)]  # a second query of the view
    own = duckdb.connect()
    assert table.scan(snapshot_id=1).to_duckdb("first", own) is own
    assert own.sql("SELECT k, v FROM first ORDER BY k").fetchall() == [(1, "a"), (2, "b"), (3, None), (4, "d")]
    assert own.sql("SELECT * FROM first").arrow().schema == SCHEMA


def test_changes_and_stream_batches_hand_off(table: cl.Table) -> None:
    changes = table.changes(1, 2)
    arrow = changes.to_arrow().sort_by("k")
    assert arrow.column("rowkind").to_pylist() == ["+I", "+I"]
    assert changes.to_pandas().sort_values("k").reset_index(drop=True).equals(arrow.to_pandas())
    assert changes.to_polars().sort("k").to_dicts() == arrow.to_pylist()
    con = changes.to_duckdb("changes")
    assert con.sql("SELECT k, rowkind FROM changes ORDER BY k").fetchall() == [(2, "+I"), (5, "+I")]

    batches = list(table.stream(mode="from-snapshot", snapshot_id=1))
    assert batches
    for batch in batches:
        assert batch.to_polars().to_dicts() == batch.data.to_pylist()
        assert batch.to_pandas().equals(batch.data.to_pandas())
    assert sum(len(b.to_pandas()) for b in batches) == sum(b.data.num_rows for b in batches) == 6


@pytest.mark.parametrize(("module", "call"), [
    ("polars", lambda t: t.scan().to_polars()),
    ("duckdb", lambda t: t.scan().to_duckdb("t")),
    ("pandas", lambda t: t.changes(0, 1).to_pandas()),
])  # fmt: skip
def test_a_missing_library_names_its_extra(table: cl.Table, monkeypatch: pytest.MonkeyPatch, module: str,
                                           call: object) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=rf"pip install 'changelake\[{module}\]'"):
        call(table)  # type: ignore[operator]
