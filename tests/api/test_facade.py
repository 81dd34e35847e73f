"""The facade: Table pickles small, Scan is an immutable builder, readers hand off Arrow."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import ScanError


def _table(tmp_path: Path) -> cl.Table:
    catalog = cl.Catalog(str(tmp_path / "wh"))
    schema = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                        pa.field("v", pa.string())])
    table = catalog.create_table("db.t", schema, primary_keys=["p", "k"], partition_keys=["p"],
                                 options={"bucket": "2"})
    table.write(pa.table({"p": ["a", "a", "b"], "k": [1, 2, 3], "v": ["x", "y", "z"]}))
    table.write(pa.table({"p": ["a"], "k": [2], "v": ["y2"], "rowkind": ["+U"]}))
    return table


def test_table_pickles_small_and_reads_the_same(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.scan().to_arrow()  # fills every cache the context has
    data = pickle.dumps(table)
    assert len(data) < 4096
    copy = pickle.loads(data)
    assert copy.name == "db.t"
    assert copy.scan().to_arrow().sort_by("k").equals(table.scan().to_arrow().sort_by("k"))
    split = table.scan().plan()[0]
    assert len(pickle.dumps(split)) < 4096


def test_scan_is_an_immutable_builder(tmp_path: Path) -> None:
    table = _table(tmp_path)
    base = table.scan()
    narrowed = base.filter(pc.field("p") == "a").select("k", "v")
    assert base.columns is None and base.row_filter is None
    assert narrowed.to_arrow().sort_by("k").to_pydict() == {"k": [1, 2], "v": ["x", "y2"]}
    assert narrowed.filter(pc.field("k") > 1).to_arrow().to_pydict() == {"k": [2], "v": ["y2"]}
    assert base.at_snapshot(1).select("v").to_arrow().sort_by("v").column("v").to_pylist() == ["x", "y", "z"]
    assert base.at_tag("t").tag == "t" and base.at_tag("t").at_time(5).tag is None
    assert base.to_arrow().num_rows == 3


def test_scan_hands_off_a_record_batch_reader(tmp_path: Path) -> None:
    table = _table(tmp_path)
    reader = table.scan().select("k").to_arrow_batch_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == pa.schema([pa.field("k", pa.int64(), nullable=False)])
    assert sorted(reader.read_all().column("k").to_pylist()) == [1, 2, 3]


def test_scan_rejects_bad_selections_with_fields(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with pytest.raises(ScanError, match="nope") as info:
        table.scan().select("k", "nope")
    assert info.value.table == "db.t"
    with pytest.raises(ScanError):
        table.scan(snapshot_id=1, tag="t")
    with pytest.raises(ScanError):
        table.scan().filter(1)  # type: ignore[arg-type]
    with pytest.raises(ScanError, match="nope"):
        table.scan().filter("nope > 1")  # text is a filter too, checked against the columns


def test_enums_name_the_fixed_sets(tmp_path: Path) -> None:
    table = _table(tmp_path)
    kinds = [s.commit_kind for s in table.snapshots()]
    assert kinds[0] is cl.CommitKind.APPEND
    assert cl.RowKind.UPDATE_AFTER.symbol == "+U"
    assert cl.MergeEngineKind("first-row") is cl.MergeEngineKind.FIRST_ROW


def test_a_scan_of_no_columns_counts_the_rows(tmp_path: Path) -> None:
    table = _table(tmp_path)
    empty = table.scan(columns=[])
    assert empty.to_arrow().num_rows == 3 and empty.to_arrow().num_columns == 0
    assert sum(b.num_rows for b in empty.to_batches()) == 3
    assert table.scan().select().filter(pc.field("p") == "a").to_arrow().num_rows == 2
    assert table.scan(columns=[]).to_arrow_batch_reader().read_all().num_rows == 3
