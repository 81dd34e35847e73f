"""pypaimon reads a table changelake expired: the latest snapshot, every retained one and a tag
whose snapshot expired, with the expired snapshots' files gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def _paimon_rows(pypaimon: Pypaimon, warehouse: str, options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return sorted(pypaimon.read(warehouse, "db.t", options).to_pylist(), key=lambda r: r["k"])


def _ours(table: cl.Table, **at: Any) -> list[dict[str, Any]]:
    return sorted(table.scan(**at).to_arrow().to_pylist(), key=lambda r: r["k"])


def test_pypaimon_reads_an_expired_table(tmp_path: Path, pypaimon: Pypaimon) -> None:
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
    assert _paimon_rows(pypaimon, warehouse) == _ours(table)
    for snap in snapshots:
        theirs = _paimon_rows(pypaimon, warehouse, {"scan.snapshot-id": str(snap.id)})
        assert theirs == _ours(table, snapshot_id=snap.id)
    assert _paimon_rows(pypaimon, warehouse, {"scan.tag-name": "early"}) == _ours(table, tag="early")
