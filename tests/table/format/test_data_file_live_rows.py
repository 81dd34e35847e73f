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

from changelake.table.format import data_file, parquet_file
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
    with data_file.opened(file_io, path) as source:
        found = parquet_file.footer_of(parquet_file.opened(source, path))
        assert parquet_file.dictionary_only_columns(found, None) == ["few", "raw"]
        assert parquet_file.dictionary_only_columns(found, ["unique", "raw"]) == ["raw"]
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


@pytest.mark.parametrize(("kinds", "statistics", "read"), [
    ([0, 0, 0, 0], True, False),  # only +I: no retraction
    ([2, 2, 2, 2], True, False),  # only +U
    ([0, 2, 2, 0], True, True),  # min 0, max 2: a -U (1) may be among them
    ([0, 0, 3, 0], True, True),
    ([0, 0, 0, 0], False, True),  # no statistics tell nothing
])  # fmt: skip
def test_the_kinds_are_left_out_only_where_statistics_show_no_retraction(
        tmp_path: Path, kinds: list[int], statistics: bool, read: bool) -> None:
    """A merge-free read asks for ``_VALUE_KIND`` only to drop -U/-D rows: the column is read
    unless every row group's statistics show only +I or only +U rows."""
    schema = pa.schema([pa.field("_VALUE_KIND", pa.int8()), pa.field("v", pa.int64())])
    table = pa.table({"_VALUE_KIND": pa.array(kinds * 50, pa.int8()), "v": pa.array(range(200), pa.int64())})
    path = str(tmp_path / "f.parquet")
    pq.write_table(table, path, row_group_size=40, write_statistics=statistics)
    file_io, _ = FileIO.for_url(str(tmp_path))
    got = data_file.read(file_io, path, schema, ["_VALUE_KIND", "v"], kinds_for_retractions=True)
    batches = list(data_file.read_batches(file_io, path, schema, ["_VALUE_KIND", "v"], 64, kinds_for_retractions=True))
    for rows in (got, pa.concat_tables(batches)):
        assert rows.column_names == (["_VALUE_KIND", "v"] if read else ["v"])
        assert rows.column("v").to_pylist() == list(range(200))
    # the kinds stay when they are all that is read (a table without columns has no row count),
    # and without the flag
    assert data_file.read(file_io, path, schema, ["_VALUE_KIND"], kinds_for_retractions=True).num_rows == 200
    assert data_file.read(file_io, path, schema, ["_VALUE_KIND", "v"]).equals(table)
