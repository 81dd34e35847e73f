"""Read-optimized scans (Paimon's ``$ro`` table): only the top level's files, which need no
merge; rows written since the last full compaction are not seen until the next one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import changelake as cl

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_read_optimized_reads_the_top_level_only(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "num-sorted-run.compaction-trigger": "20"})
    table.write(pa.table({"p": ["a", "a", "b"], "k": [1, 2, 3], "v": [1, 1, 1]}, schema=SCHEMA))
    table.write(pa.table({"p": ["a", "b"], "k": [2, 4], "v": [2, 2]}, schema=SCHEMA))
    assert table.scan(read_optimized=True).to_arrow().num_rows == 0  # everything is in level 0
    assert table.scan(read_optimized=True).plan() == []

    compacted = table.compact(full=True)
    assert compacted is not None
    merged = table.scan().to_arrow()
    assert _rows(table.scan(read_optimized=True).to_arrow()) == _rows(merged)
    assert all(s.raw_convertible for s in table.scan(read_optimized=True).plan())  # read without merging

    # New writes (and deletes) land in level 0: the read-optimized view lags until compacted.
    table.write(pa.table({"p": ["a", "b"], "k": [1, 5], "v": [3, 3], "rowkind": ["-D", "+I"]}))
    assert _rows(table.scan(read_optimized=True).to_arrow()) == _rows(merged)
    assert _rows(table.scan().to_arrow()) != _rows(merged)
    assert table.system("ro").equals(table.scan(read_optimized=True).to_arrow())

    # Selections combine with it: filter, columns, time travel.
    ro = table.scan(read_optimized=True).filter(pc.field("p") == "b").select("k", "v")
    assert _rows(ro.to_arrow()) == [(3, 1), (4, 2)]
    assert ro.at_snapshot(compacted.id).read_optimized
    assert table.scan(snapshot_id=2, read_optimized=True).to_arrow().num_rows == 0
    table.compact(full=True)
    assert _rows(table.scan(read_optimized=True).to_arrow()) == _rows(table.scan().to_arrow())
