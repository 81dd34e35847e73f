"""Which Parquet columns a table's data files store dictionary-encoded (``parquet.enable.dictionary``):
as Paimon's writer leaves them, strings and integers of few values get dictionaries, columns of
distinct values are plain; without the option none do. The rows read back the same either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.table.format import parquet_file

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                    pa.field("amount", pa.float64()), pa.field("qty", pa.int32()), pa.field("day", pa.date32())])


def _rows(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table({"id": np.arange(n, dtype=np.int64) * 7, "name": [f"name-{i % 50}" for i in range(n)],
                     "amount": rng.random(n), "qty": rng.integers(0, 1000, n, dtype=np.int32),
                     "day": pa.array(rng.integers(19_000, 19_030, n).astype(np.int32)).cast(pa.date32())},
                    schema=SCHEMA)


def _encoded_columns(location: str) -> dict[str, set[str]]:
    """Per data file: its columns that have a dictionary page."""
    found = {}
    for path in Path(location).rglob("data-*.parquet"):
        group = pq.ParquetFile(path).metadata.row_group(0)
        found[path.name] = {group.column(i).path_in_schema for i in range(group.num_columns)
                            if group.column(i).has_dictionary_page}
    return found


@pytest.mark.parametrize("primary_key", [True, False])
def test_columns_of_few_values_are_dictionary_encoded(tmp_path: Path, primary_key: bool) -> None:
    keys = {"primary_keys": ["id"], "options": {"bucket": "1"}} if primary_key else {}
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, **keys)  # type: ignore[arg-type]
    rows = _rows(20_000)
    table.write(rows)
    assert table.scan().to_arrow().sort_by("id").equals(rows)
    files = _encoded_columns(table.location)
    assert files
    for encoded in files.values():
        # id, _KEY_id and _SEQUENCE_NUMBER are distinct in every row, amount nearly so
        assert {"name", "qty", "day"} <= encoded
        assert not encoded & {"id", "_KEY_id", "_SEQUENCE_NUMBER", "amount"}


def test_without_the_option_no_column_is_dictionary_encoded(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"],
                                                    options={"bucket": "1", "parquet.enable.dictionary": "false"})
    rows = _rows(5_000)
    table.write(rows)
    assert table.scan().to_arrow().sort_by("id").equals(rows)
    assert all(not encoded for encoded in _encoded_columns(table.location).values())


@pytest.mark.parametrize(("values", "pays"), [
    (pa.array(range(10_000), pa.int64()), False),  # distinct: the indices would add to the values
    (pa.array([i % 300 for i in range(10_000)], pa.int32()), True),
    (pa.array([i % 2 * 10**12 for i in range(10_000)], pa.int64()), False),  # two values, too wide a range to tell
    (pa.array([None] * 100, pa.int32()), False),
])
def test_a_dictionary_is_kept_where_its_values_range_shows_it_pays(values: pa.Array, pays: bool) -> None:
    schema = pa.schema([pa.field("v", values.type)])
    assert ("v" in parquet_file.dictionary_columns(schema, pa.table({"v": values}, schema=schema))) is pays
