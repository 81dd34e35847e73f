"""Reading a data file without the rows its deletion vector marks: string columns whose pages
hold only dictionary indices are filtered before they are decoded; the rows must be those a
plain read and filter gives, whatever the columns' encodings."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap

from changelake.table.format import data_file
from changelake.table.io.fileio import FileIO

ROWS = 20_000


def _table() -> pa.Table:
    rng = np.random.default_rng(3)
    ids = random.Random(3)
    return pa.table({
        "id": pa.array(np.arange(ROWS, dtype=np.int64)),
        "few": pa.array([None if i % 97 == 0 else f"name-{i % 300}" for i in range(ROWS)]),  # dictionary only
        "unique": pa.array([str(uuid.UUID(int=ids.getrandbits(128))) for _ in range(ROWS)]),  # falls back to plain
        "raw": pa.array([f"b{i % 5}".encode() for i in range(ROWS)], pa.binary()),
        "amount": pa.array(rng.random(ROWS)),
    })


@pytest.mark.parametrize("row_group_size", [ROWS, 6_000])
@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_live_rows_equal_a_plain_read_and_filter(tmp_path: Path, row_group_size: int, compression: str) -> None:
    table = _table()
    path = str(tmp_path / "f.parquet")
    # A small dictionary page limit makes "unique" fall back to plain pages early.
    pq.write_table(table, path, compression=compression, row_group_size=row_group_size,
                   dictionary_pagesize_limit=64 * 1024)
    file_io, _ = FileIO.for_url(str(tmp_path))
    with data_file._parquet_file(file_io, path) as parquet:
        assert data_file._dictionary_only_columns(parquet, None) == ["few", "raw"]
        assert data_file._dictionary_only_columns(parquet, ["unique", "raw"]) == ["raw"]
    rng = np.random.default_rng(5)
    deleted = BitMap(rng.choice(ROWS, size=ROWS // 3, replace=False).tolist())
    keep = np.ones(ROWS, dtype=bool)
    keep[list(deleted)] = False
    for columns in (["id", "few", "unique", "raw", "amount"], ["few"], ["amount", "raw"]):
        got = data_file.read(file_io, path, table.schema, columns, deleted=deleted)
        expected = table.select(columns).filter(keep)
        assert got.schema == expected.schema
        assert got.equals(expected)
    assert data_file.read(file_io, path, table.schema, ["few"], deleted=BitMap()).equals(table.select(["few"]))
