"""Reading a row range of a data file decodes only the row groups that hold it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.table.format import data_file, kv
from changelake.table.io.fileio import FileIO

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.mark.parametrize("thin", [False, True])
@pytest.mark.parametrize("rows", [(0, 100), (0, 1), (15, 37), (20, 30), (99, 100), (95, 200), (100, 120), (7, 7)])
def test_a_row_range_reads_those_rows(tmp_path: Path, thin: bool, rows: tuple[int, int]) -> None:
    file_schema = kv.file_schema(SCHEMA, ["k"])
    keys = pa.array(range(100), pa.int64())
    table = pa.table({"_KEY_k": keys, kv.SEQUENCE: keys, kv.VALUE_KIND: pa.array([0] * 100, pa.int8()), "k": keys,
                      "v": [f"v{i}" for i in range(100)]}, schema=file_schema)
    path = str(tmp_path / "f.parquet")
    pq.write_table(table.drop_columns(["_KEY_k"]) if thin else table, path, row_group_size=10)
    file_io, _ = FileIO.for_url(str(tmp_path))
    columns = [kv.VALUE_KIND, "_KEY_k", "v"]
    got = data_file.read(file_io, path, file_schema, columns, rows)
    assert got.equals(table.select(columns).slice(rows[0], max(0, rows[1] - rows[0])))
    assert data_file.read(file_io, path, file_schema, None, rows).equals(
        table.slice(rows[0], max(0, rows[1] - rows[0])))
