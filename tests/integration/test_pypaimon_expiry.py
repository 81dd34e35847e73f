"""pypaimon reads a table changelake expired: the latest snapshot, every retained one and a tag
whose snapshot expired, with the expired snapshots' files gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pypaimon")

from paimon_oracle import paimon_table

import changelake as cl

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def _paimon_rows(warehouse: str, options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    builder = paimon_table(warehouse, "db.t", options).new_read_builder()
    splits = builder.new_scan().plan().splits()
    return sorted(builder.new_read().to_arrow(splits).to_pylist(), key=lambda r: r["k"])


def _ours(table: cl.Table, **at: Any) -> list[dict[str, Any]]:
    return sorted(table.scan(**at).to_arrow().to_pylist(), key=lambda r: r["k"])


def test_pypaimon_reads_an_expired_table(tmp_path: Path) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "2", "num-sorted-run.compaction-trigger": "2", "snapshot.num-retained.min": "3",
                 "snapshot.num-retained.max": "3"})
    for value in range(12):
        keys = list(range(value % 3, 30, 3))
        table.write(pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([value] * len(keys), pa.int64())}))
        if value == 4:
            table.create_tag("early")
    snapshots = table.snapshots()
    assert len(snapshots) == 3 and snapshots[0].id > table.tag("early").id
    parquet = list(Path(table.location).rglob("*.parquet"))
    assert len(parquet) < 12  # compacted-away files of expired snapshots are gone
    assert _paimon_rows(warehouse) == _ours(table)
    for snap in snapshots:
        assert _paimon_rows(warehouse, {"scan.snapshot-id": str(snap.id)}) == _ours(table, snapshot_id=snap.id)
    assert _paimon_rows(warehouse, {"scan.tag-name": "early"}) == _ours(table, tag="early")
