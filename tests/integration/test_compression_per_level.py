"""``file.compression.per.level``: data files are compressed by their LSM level (changelog
files keep ``file.compression``), and pypaimon reads the table; malformed maps name the option
(per-level formats: tests/table/format/test_file_formats.py)."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.errors import OptionError
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _codecs(table_dir: Path, prefix: str) -> set[str]:
    files = glob.glob(f"{table_dir}/bucket-*/{prefix}-*.parquet")
    assert files
    return {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in files}


def _live_codecs(table: cl.Table, table_dir: Path) -> dict[int, set[str]]:
    by_level: dict[int, set[str]] = {}
    for row in table.system("files").to_pylist():
        path = glob.glob(f"{table_dir}/bucket-*/{row['file_path'].rsplit('/', 1)[-1]}")[0]
        by_level.setdefault(row["level"], set()).add(pq.ParquetFile(path).metadata.row_group(0).column(0).compression)
    return by_level


def _pypaimon_rows(pypaimon: Pypaimon, warehouse: str) -> list[dict[str, Any]]:
    return sorted(pypaimon.read(warehouse, "db.t").to_pylist(), key=lambda r: r["id"])


def test_data_files_are_compressed_by_level(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["id"],
        options={"bucket": "1", "file.compression.per.level": "0:lz4, 5:none", "changelog-producer": "input"})
    table_dir = tmp_path / "db.db" / "t"
    table.write(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=SCHEMA))
    table.write(pa.table({"id": [2, 4], "v": ["B", "d"]}, schema=SCHEMA))
    assert _live_codecs(table, table_dir) == {0: {"LZ4"}}
    assert _codecs(table_dir, "changelog") == {"ZSTD"}
    expected = [{"id": 1, "v": "a"}, {"id": 2, "v": "B"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    assert _pypaimon_rows(pypaimon, warehouse) == expected

    table.compact(full=True)
    assert _live_codecs(table, table_dir) == {5: {"UNCOMPRESSED"}}
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    assert _pypaimon_rows(pypaimon, warehouse) == expected


@pytest.mark.parametrize(("key", "value"), [("file.compression.per.level", "0-lz4"),
                                            ("file.compression.per.level", "x:lz4"),
                                            ("file.compression.per.level", "0:fast"),
                                            ("file.format.per.level", "0:csv")])
def test_malformed_per_level_maps_name_the_option(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(OptionError, match=rf"option '{key}'.*invalid value") as info:
        cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1", key: value})
    assert info.value.option == key
