"""A flush sorts the batch once and merges it per (partition, bucket): the same key in two
partitions stays two rows, and each group's last row per key wins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])


@pytest.mark.parametrize("engine", ["deduplicate", "partial-update"])
@pytest.mark.parametrize("distinct_ids", [300, 1])
def test_one_batch_with_keys_repeated_within_and_across_partitions(tmp_path: Path, engine: str,
                                                                    distinct_ids: int) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "3", "merge-engine": engine})
    rng = np.random.default_rng(5)
    n = 5000
    dt = rng.choice(["a", "b", "c"], n)
    # every id in several partitions, most several times in each; with one id, every group
    # holds only that key, so neighbouring groups in the sorted flush end and start with it
    ids = rng.integers(0, distinct_ids, n)
    table.write(pa.table({"dt": dt, "id": ids, "v": np.arange(n)}, schema=SCHEMA))
    expected: dict[tuple[str, int], int] = {}
    for i in range(n):  # the last row of each (dt, id) in input order
        expected[(str(dt[i]), int(ids[i]))] = i
    got = table.scan().to_arrow()
    assert {(r["dt"], r["id"]): r["v"] for r in got.to_pylist()} == expected
    assert got.num_rows == len(expected)
