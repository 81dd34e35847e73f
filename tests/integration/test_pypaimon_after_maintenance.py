"""pypaimon reads a table changelake rolled back, wrote on and swept of orphans: every snapshot
and tag as changelake reads it."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl
from pypaimon_oracle import Pypaimon


def _paimon_rows(pypaimon: Pypaimon, warehouse: str, options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return sorted(pypaimon.read(warehouse, "db.t", options).to_pylist(), key=lambda r: r["k"])


def _ours(table: cl.Table, **at: Any) -> list[dict[str, Any]]:
    return sorted(table.scan(**at).to_arrow().to_pylist(), key=lambda r: r["k"])


def test_pypaimon_reads_a_rolled_back_and_swept_table(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=["k"],
                                               options={"bucket": "2", "num-sorted-run.compaction-trigger": "2"})
    for i in range(6):
        table.write(pa.table({"k": [i, i + 10], "v": [f"a{i}", f"b{i}"]}))
    table.create_tag("at3", 3)
    table.rollback_to(snapshot_id=4)
    table.write(pa.table({"k": [0, 99], "v": ["new", "new"]}))
    # what a crashed writer leaves: a copy of a data file under a name no snapshot knows
    live = next(Path(table.location).rglob("data-*.parquet"))
    stray = live.with_name("data-00000000-0000-0000-0000-000000000000-0.parquet")
    shutil.copyfile(live, stray)
    os.utime(stray, (1_000_000_000, 1_000_000_000))  # from long ago
    assert table.remove_orphan_files(older_than=dt.timedelta(hours=1)) == [str(stray)]
    assert _paimon_rows(pypaimon, warehouse) == _ours(table)
    for snapshot in table.snapshots():
        assert _paimon_rows(pypaimon, warehouse, {"scan.snapshot-id": str(snapshot.id)}) == \
            _ours(table, snapshot_id=snapshot.id)
    assert _paimon_rows(pypaimon, warehouse, {"scan.tag-name": "at3"}) == _ours(table, tag="at3")
