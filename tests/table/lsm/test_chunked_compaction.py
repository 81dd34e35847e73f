"""Compactions that merge big sections in key-bounded chunks write the same files' rows and the
same changelog (``full-compaction`` and ``lookup`` producers) as a whole-section merge, and
writers that compact as they commit (also with deletion vectors) leave the same table."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.merge import chunked

SCHEMA = pa.schema([pa.field("s", pa.string(), nullable=False), pa.field("k", pa.int32(), nullable=False),
                    pa.field("v", pa.int64())])


def _history(root: Path, options: dict[str, str]) -> list[Any]:
    """Upserts and deletes of 50 keys over 10 commits, then a full compaction; returns the
    changes from the first snapshot on, the table, and its fully compacted top level."""
    rng = random.Random(11)
    table = cl.Catalog(str(root)).create_table("db.t", SCHEMA, primary_keys=["s", "k"],
                                               options={"bucket": "1", **options})
    for commit in range(10):
        keys = sorted(rng.sample(range(50), 20))
        table.write(pa.table({"s": [f"s{k % 4}" for k in keys], "k": pa.array(keys, pa.int32()),
                              "v": pa.array([commit * 100 + k for k in keys], pa.int64()),
                              "rowkind": [rng.choice(["+I", "+U", "-D"]) for _ in keys]}))
    table.compact(full=True)
    # Without snapshot ids: a writer's compaction may land in its own snapshot or the next commit's.
    changes = [tuple(r.values()) for b in table.stream(mode="from-snapshot", snapshot_id=1)
               for r in b.data.to_pylist()]
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["s"], r["k"]))
    top = sorted(table.scan(read_optimized=True).to_arrow().to_pylist(), key=lambda r: (r["s"], r["k"]))
    return [changes, rows, top]


@pytest.mark.parametrize("options", [
    {"changelog-producer": "full-compaction", "write-only": "true"},
    {"changelog-producer": "full-compaction"},
    {"changelog-producer": "lookup", "num-sorted-run.compaction-trigger": "3"},
    {"deletion-vectors.enabled": "true", "num-sorted-run.compaction-trigger": "2"},
    {"num-sorted-run.compaction-trigger": "2", "target-file-size": "1 kb"},
    {"deletion-vectors.enabled": "true", "num-sorted-run.compaction-trigger": "2", "target-file-size": "1 kb",
     "merge-engine": "partial-update", "ignore-delete": "true", "lookup.cache-max-memory-size": "1 kb"},
    {"merge-engine": "first-row", "ignore-delete": "true", "num-sorted-run.compaction-trigger": "2",
     "target-file-size": "1 kb"},
], ids=["full-compaction-producer", "full-compaction-producer-compacting", "lookup-producer",
        "deletion-vectors", "small-target-files", "deletion-vectors-partial-update", "first-row"])
def test_chunked_compactions_write_what_whole_ones_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, str]) -> None:
    whole = _history(tmp_path / "whole", options)
    with monkeypatch.context() as patched:
        patched.setattr(chunked, "CHUNKED_MERGE_BYTES", 0)
        patched.setattr(chunked, "BATCH_ROWS", 3)
        parts = _history(tmp_path / "chunked", options)
    assert whole[1] and whole == parts
