"""Compactions that merge big sections in key-bounded chunks write the same files' rows and the
same changelog (``full-compaction`` and ``lookup`` producers) as a whole-section merge, and
writers that compact as they commit (also with deletion vectors) leave the same table."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.lsm import compactor, lookup_files
from changelake.table.merge import chunked, engines

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
        patched.setattr(compactor, "CHUNKED_COMPACTION_BYTES", 0)
        patched.setattr(chunked, "BATCH_ROWS", 3)
        parts = _history(tmp_path / "chunked", options)
    assert whole[1] and whole == parts


def test_a_big_section_is_merged_in_chunks_and_its_outputs_are_not_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction section over ``CHUNKED_COMPACTION_BYTES`` (incompressible values: ~300k rows)
    never hands the merge engine more than two batches per input file at once, and the lookup
    files do not keep its outputs' rows: merged whole, the inputs decoded and the merged copy
    held until written took ~10x the section's Parquet bytes (the binary-counter merges of a
    100M-row deletion-vector ingest, several buckets at once, took 500-700 MB)."""
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.float64())])
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", schema, primary_keys=["k"], options={"bucket": "1", "deletion-vectors.enabled": "true"})
    rng = np.random.default_rng(3)
    want: dict[int, float] = {}
    for _ in range(2):
        keys = rng.choice(2**40, 160_000, replace=False)
        values = rng.random(keys.size)
        table.write(pa.table({"k": keys, "v": values}))
        want.update(zip(keys.tolist(), values.tolist(), strict=True))
    inputs = table.system("files").to_pylist()
    assert len(inputs) == 2 and sum(f["file_size_in_bytes"] for f in inputs) > compactor.CHUNKED_COMPACTION_BYTES
    merged_at_once: list[int] = []
    merge = engines.MergeEngine.merge

    def counted(self: engines.MergeEngine, rows: pa.Table, *args: Any, **kwargs: Any) -> pa.Table:
        merged_at_once.append(rows.num_rows)
        return merge(self, rows, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(chunked, "BATCH_ROWS", 4096)
        patched.setattr(engines.MergeEngine, "merge", counted)
        table.compact(full=True)
    assert merged_at_once and max(merged_at_once) <= 2 * 4096 * len(inputs)
    outputs = table.system("files").to_pylist()
    assert {f["file_path"] for f in outputs}.isdisjoint(f["file_path"] for f in inputs)
    store = lookup_files.store_for(table.context)
    assert store is not None
    assert all(store.find(f["file_path"]) is None for f in outputs)
    read = table.scan().to_arrow()
    assert dict(zip(read.column("k").to_pylist(), read.column("v").to_pylist(), strict=True)) == want
