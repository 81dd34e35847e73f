"""pypaimon-rust 0.4 reads tables changelake rescaled: every snapshot, the OVERWRITE ones and
those whose partitions hold different numbers of buckets, as changelake reads it. (pypaimon 2.1:
test_pypaimon_after_maintenance.py; Java Paimon 0.9: test_java_paimon_tables.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])


def _rows(got: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["dt"], r["k"], r["v"]) for r in got)


def test_pypaimon_rust_reads_every_snapshot_of_a_rescaled_table(tmp_path: Path) -> None:
    datafusion = pytest.importorskip("pypaimon_rust.datafusion")
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options={"bucket": "2"})
    table.write(pa.table({"dt": ["a"] * 30 + ["b"] * 30, "k": list(range(30)) * 2, "v": ["one"] * 60},
                         schema=SCHEMA))
    table.write(pa.table({"dt": ["a"] * 20, "k": list(range(20, 40)), "v": ["two"] * 20,
                          "rowkind": ["+U"] * 15 + ["-D"] * 5}))
    table.rescale(bucket=4, partitions=[{"dt": "a"}])  # a at 4, b still at 2
    table.write(pa.table({"dt": ["a"] * 5, "k": list(range(5)), "v": ["three"] * 5}, schema=SCHEMA))
    table.rescale(bucket=3)

    def rust(snapshot_id: int) -> list[tuple[Any, ...]]:
        builder = datafusion.PaimonCatalog({"warehouse": warehouse}).get_table("db.t").new_read_builder(
            {"scan.snapshot-id": str(snapshot_id)})
        return _rows([r for batch in builder.new_read().read(builder.new_scan().plan().splits())
                      for r in batch.to_pylist()])

    kinds = []
    for snapshot in table.snapshots():
        kinds.append(snapshot.commit_kind)
        assert rust(snapshot.id) == _rows(table.scan(snapshot.id).to_arrow().to_pylist()), snapshot.id
    assert kinds.count(cl.CommitKind.OVERWRITE) == 2
