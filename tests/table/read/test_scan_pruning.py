"""Partition and key-range pruning: filters skip files without changing results."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

import changelake as cl

SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
    ]
)


def _table(tmp_path: object) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "1"}
    )
    for lo in (0, 100, 200):  # three files per partition with disjoint key ranges
        ids = list(range(lo, lo + 50))
        table.write(pa.table({"dt": ["a"] * 50 + ["b"] * 50, "id": ids + ids, "v": [f"v{i}" for i in ids + ids]}))
    return table


def _files(scan: cl.Scan) -> int:
    return sum(len(split.files) for split in scan.plan())


def test_partition_filter_prunes_other_partitions(tmp_path: object) -> None:
    table = _table(tmp_path)
    assert _files(table.scan()) == 6
    scan = table.scan(filter=pc.field("dt") == "a")
    assert _files(scan) == 3
    assert set(scan.to_arrow().column("dt").to_pylist()) == {"a"}


def test_key_range_filter_prunes_files_and_keeps_results(tmp_path: object) -> None:
    table = _table(tmp_path)
    scan = table.scan(filter=(pc.field("id") >= 120) & (pc.field("id") < 130))
    assert _files(scan) == 2  # the 100..149 file of each partition
    result = scan.to_arrow()
    assert sorted(result.column("id").to_pylist()) == sorted(list(range(120, 130)) * 2)


def test_value_filter_prunes_by_value_stats_not_key_stats(tmp_path: object) -> None:
    table = _table(tmp_path)
    scan = table.scan(filter=pc.field("v") == "v120", columns=["id"])
    # keys of the three files never overlap, so their value bounds (v0..v49, v100..v149,
    # v200..v249 as strings) skip the v200 files of both partitions
    assert _files(scan) == 4
    assert scan.to_arrow().to_pylist() == [{"id": 120}, {"id": 120}]


def test_pruned_file_does_not_resurrect_old_versions(tmp_path: object) -> None:
    table = _table(tmp_path)
    table.write(pa.table({"dt": ["a"], "id": [120], "v": ["new"], "rowkind": ["+U"]}))
    table.write(pa.table({"dt": ["a"], "id": [121], "v": [None], "rowkind": ["-D"]}))
    scan = table.scan(filter=(pc.field("dt") == "a") & (pc.field("id") >= 120) & (pc.field("id") <= 121))
    assert scan.to_arrow().to_pylist() == [{"dt": "a", "id": 120, "v": "new"}]
