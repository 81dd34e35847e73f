"""Raw splits (files read as they are: deletion-vector tables, compacted buckets) fill the
partition's columns from the split's partition instead of decoding them from the files; what a
scan returns must not change: values, types, projections and filters on partition columns."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.table.read import reader

SCHEMA = pa.schema([
    pa.field("day", pa.date32(), nullable=False),
    pa.field("region", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("v", pa.string()),
])
DAYS = [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 2, 29)]
REGIONS = ["eu", "us-east"]


def _batch(keys: range, tag: str) -> pa.Table:
    return pa.table({
        "day": [DAYS[k % 3] for k in keys],
        "region": [REGIONS[k % 2] for k in keys],
        "k": list(keys),
        "v": [f"{tag}{k}" for k in keys],
    }, schema=SCHEMA)


def _sorted(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda r: r["k"])


@pytest.mark.parametrize("options", [{"deletion-vectors.enabled": "true"}, {}], ids=["vectors", "compacted"])
def test_partition_columns_of_raw_splits(tmp_path: Any, options: dict[str, str]) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["day", "region", "k"], partition_keys=["day", "region"],
        options={"bucket": "2", **options})
    table.write(_batch(range(0, 60), "a"))
    table.write(_batch(range(30, 90), "b"))
    if not options:
        table.compact(full=True)
    splits = table.scan().plan()
    assert splits and all(s.raw_convertible for s in splits)  # the path under test
    expected = _batch(range(0, 30), "a").to_pylist() + _batch(range(30, 90), "b").to_pylist()
    expected.sort(key=lambda r: r["k"])

    whole = table.scan().to_arrow()
    assert whole.schema == SCHEMA
    assert _sorted(whole) == expected
    # partition columns alone, between others, or not at all
    for columns in (["region"], ["k", "day"], ["v", "region", "k", "day"], ["k", "v"]):
        got = table.scan(columns=columns).to_arrow()
        assert got.schema.names == columns
        assert got.schema == pa.schema([SCHEMA.field(c) for c in columns])
        assert sorted(map(str, got.to_pylist())) == sorted(map(str, whole.select(columns).to_pylist()))
    # filters on partition columns, with and without them in the projection
    on_day = table.scan(filter=pc.field("day") == dt.date(2024, 1, 2), columns=["k"]).to_arrow()
    assert sorted(on_day["k"].to_pylist()) == [r["k"] for r in expected if r["day"] == dt.date(2024, 1, 2)]
    leap = dt.date(2024, 2, 29)
    us_leap = table.scan(filter=(pc.field("region") == "us-east") & (pc.field("day") == leap)).to_arrow()
    assert _sorted(us_leap) == [r for r in expected if r["region"] == "us-east" and r["day"] == leap]
    assert us_leap.num_rows


@pytest.mark.parametrize("delete_count", [None, 1])
def test_raw_split_drops_retractions_unless_its_files_say_they_hold_none(tmp_path: Any,
                                                                          delete_count: int | None) -> None:
    """A raw split reads row kinds only from files whose delete count is unknown or not 0 (as
    Paimon's raw reads trust it), and then leaves their retractions out."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["day", "region", "k"], partition_keys=["day", "region"],
        options={"bucket": "1", "write-only": "true"})
    rows = _batch(range(0, 36, 6), "a")  # one partition
    table.write(rows.append_column("rowkind", pa.array(["+I", "+I", "-D", "+I", "-U", "+U"])))
    (split,) = [s for s in table.scan().plan() if s.row_count == 6]
    (meta,) = split.files
    assert meta.delete_row_count == 2
    forged = dataclasses.replace(split, files=(dataclasses.replace(meta, delete_row_count=delete_count),),
                                 raw_convertible=True)
    got = reader.read_split(table.context, forged, ["k", "v", "day"], None)
    assert sorted(got["k"].to_pylist()) == [0, 6, 18, 30]
    assert got["day"].to_pylist() == [DAYS[0]] * 4
