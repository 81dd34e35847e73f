"""Integer and date columns of few values, which changelake's data files store dictionary-encoded
(``parquet.enable.dictionary``, as Paimon's writer does), are read by Java Paimon 0.9, pypaimon
2.1 and pypaimon-rust 0.4 as changelake reads them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from java_paimon import JavaPaimon
from test_paimon_parquet_layout import pypaimon_rust_read

import changelake as cl
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), pa.field("qty", pa.int32()), pa.field("small", pa.int16()),
    pa.field("tiny", pa.int8()), pa.field("day", pa.date32()), pa.field("name", pa.string()),
    pa.field("amount", pa.float64()),
])
ENCODED = {"qty", "small", "tiny", "day", "name"}


def _rows(ids: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    qty = pa.array(rng.integers(-50, 50, n, dtype=np.int32), mask=rng.random(n) < 0.1)
    days = pa.array(rng.integers(-400, 400, n).astype(np.int32) + 19_000).cast(pa.date32())
    return pa.table({"id": ids, "qty": qty, "small": rng.integers(0, 10, n, dtype=np.int16),
                     "tiny": rng.integers(-3, 3, n, dtype=np.int8), "day": days,
                     "name": [f"n{i % 40}" for i in range(n)], "amount": rng.random(n)}, schema=SCHEMA)


def _table(warehouse: str) -> pa.Table:
    """The rows of a table ``db.t`` written whose compacted files hold dictionary-encoded
    integer and date columns."""
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(_rows(np.arange(5_000, dtype=np.int64), 1))
    table.write(_rows(np.arange(0, 5_000, 3, dtype=np.int64), 2))
    table.compact(full=True)
    files = list(Path(table.location).rglob("data-*.parquet"))
    for path in files:
        group = pq.ParquetFile(path).metadata.row_group(0)
        assert {group.column(i).path_in_schema for i in range(group.num_columns)
                if group.column(i).has_dictionary_page} >= ENCODED
    return table.scan().to_arrow().sort_by("id")


def _plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with dates as days since the epoch (as Java's rows hold them), by id."""
    epoch = dt.date(1970, 1, 1)
    return sorted(({k: (v - epoch).days if isinstance(v, dt.date) else v for k, v in row.items()} for row in rows),
                  key=lambda row: row["id"])


def test_java_paimon_reads_dictionary_encoded_integers(tmp_path: Path, java: JavaPaimon) -> None:
    ours = _table(str(tmp_path))
    assert _plain(java.read(str(tmp_path), "db.t")) == _plain(ours.to_pylist())


def test_pypaimon_reads_dictionary_encoded_integers(tmp_path: Path, pypaimon: Pypaimon) -> None:
    ours = _table(str(tmp_path))
    theirs = pypaimon.read(str(tmp_path), "db.t")
    assert theirs.select(SCHEMA.names).cast(SCHEMA).sort_by("id").equals(ours)


def test_pypaimon_rust_reads_dictionary_encoded_integers(tmp_path: Path) -> None:
    pytest.importorskip("pypaimon_rust.datafusion")
    ours = _table(str(tmp_path))
    theirs = pypaimon_rust_read(str(tmp_path), "db.t")
    assert theirs.select(SCHEMA.names).cast(SCHEMA).sort_by("id").equals(ours)
