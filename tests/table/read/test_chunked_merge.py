"""A big split or compaction section is merged in key-bounded chunks, each file read a batch at
a time: the results equal the whole-section merge for every merge engine, and the rows buffered
at once stay within two batches per file.

Each case writes the same commits into two tables, one read and compacted with today's
whole-section merge and one with the chunked merge forced (threshold 0, batches of a few rows),
and compares scans, filtered projections, full compactions (and the top level they leave, read
without a merge), and change streams resumed inside a full read's split."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.table.lsm import compactor
from changelake.table.merge import chunked

ENGINES = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update", "fields.g.sequence-group": "a,b"},
    "aggregation": {"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                    "fields.b.aggregate-function": "max", "fields.g.aggregate-function": "min"},
    "first-row": {"merge-engine": "first-row"},
}
NO_COMPACTION = {"bucket": "1", "write-only": "true"}


def _schema(*, composite: bool) -> pa.Schema:
    key = [pa.field("s", pa.string(), nullable=False)] if composite else []
    return pa.schema([*key, pa.field("k", pa.int64(), nullable=False), pa.field("a", pa.int64()),
                      pa.field("b", pa.string()), pa.field("g", pa.int64())])


def _commits(*, composite: bool, deletes: bool, seed: int = 3, commits: int = 6) -> list[pa.Table]:
    """Overlapping upserts (and deletes) of 60 keys, a few rows of a key per commit at most once."""
    rng = random.Random(seed)
    out = []
    for commit in range(commits):
        keys = sorted(rng.sample(range(60), 25))
        data: dict[str, Any] = {
            "k": pa.array(keys, pa.int64()),
            "a": pa.array([rng.choice([None, commit, k]) for k in keys], pa.int64()),
            "b": [rng.choice([None, "x", "y", f"c{commit}"]) for _ in keys],
            "g": pa.array([rng.choice([None, commit, 5 - commit]) for _ in keys], pa.int64()),
        }
        if composite:
            data = {"s": [f"p{k % 3}" for k in keys], **data}
        if deletes:
            data["rowkind"] = [rng.choice(["+I", "+U", "-D"]) for _ in keys]
        out.append(pa.table(data))
    return out


def _table(root: Path, commits: list[pa.Table], options: dict[str, str], *, composite: bool) -> cl.Table:
    keys = ["s", "k"] if composite else ["k"]
    table = cl.Catalog(str(root)).create_table("db.t", _schema(composite=composite), primary_keys=keys,
                                               options=options)
    for data in commits:
        table.write(data)
    return table


def _sorted(rows: pa.Table) -> list[dict[str, Any]]:
    return sorted(rows.to_pylist(), key=lambda r: tuple((str(v) if v is not None else "") for v in r.values()))


def _observe(table: cl.Table) -> dict[str, Any]:
    """What a reader sees of the table, then of its full compaction."""
    # A change stream's full read merges level 0 too (a batch scan of first-row skips it).
    full = [b.data.drop_columns(["rowkind"]) for b in table.stream(mode="latest-full")]
    seen: dict[str, Any] = {
        "full read": _sorted(pa.concat_tables(full)),
        "scan": _sorted(table.scan().to_arrow()),
        "filtered": _sorted(table.scan(columns=["k", "b"], filter=pc.field("a") > 1).to_arrow()),
        "batches": sum(b.num_rows for b in table.scan().to_batches()),
    }
    table.compact(full=True)
    seen["compacted"] = _sorted(table.scan().to_arrow())
    seen["top level"] = _sorted(table.scan(read_optimized=True).to_arrow())
    return seen


def _both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Callable[[Path], Any]) -> tuple[Any, Any]:
    """``run`` on a fresh warehouse with the whole-section merge, then with the chunked one."""
    whole = run(tmp_path / "whole")
    with monkeypatch.context() as patched:
        patched.setattr(chunked, "CHUNKED_MERGE_BYTES", 0)
        patched.setattr(compactor, "CHUNKED_COMPACTION_BYTES", 0)  # its compactions too
        patched.setattr(chunked, "BATCH_ROWS", 4)
        parts = run(tmp_path / "chunked")
    return whole, parts


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("composite", [False, True])
def test_every_engine_merges_chunks_as_it_merges_the_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str, composite: bool) -> None:
    commits = _commits(composite=composite, deletes=engine == "deduplicate")
    options = {**NO_COMPACTION, **ENGINES[engine]}
    whole, parts = _both(tmp_path, monkeypatch,
                         lambda root: _observe(_table(root, commits, options, composite=composite)))
    assert whole["full read"] and whole == parts


def test_deletion_vectors_apply_by_position_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = _commits(composite=True, deletes=True, commits=10)
    options = {"bucket": "1", "deletion-vectors.enabled": "true", "num-sorted-run.compaction-trigger": "3"}
    whole, parts = _both(tmp_path, monkeypatch,
                         lambda root: _observe(_table(root, commits, options, composite=True)))
    assert whole["full read"] and whole == parts


def test_files_of_an_older_schema_are_read_in_the_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = _commits(composite=False, deletes=True)

    def run(root: Path) -> dict[str, Any]:
        table = _table(root, commits[:3], NO_COMPACTION, composite=False)
        with table.update_schema() as update:
            update.add_column("e", pa.int64())
        table = cl.Catalog(str(root)).get_table("db.t")
        for data in commits[3:]:
            table.write(data.append_column("e", pa.array(range(data.num_rows), pa.int64())))
        return _observe(table)

    whole, parts = _both(tmp_path, monkeypatch, run)
    assert any(r["e"] is None for r in whole["scan"]) and whole == parts


def test_change_streams_resume_inside_a_chunked_full_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = _commits(composite=True, deletes=True)

    def run(root: Path) -> list[list[tuple[Any, ...]]]:
        table = _table(root, commits, NO_COMPACTION, composite=True)
        whole = list(table.stream(mode="latest-full", max_rows=7))
        reads = [[tuple(r.values()) for b in whole for r in b.data.to_pylist()]]
        for stop in range(0, len(whole), 2):
            resumed = list(table.stream(offset=whole[stop].offset, max_rows=5))
            reads.append([tuple(r.values()) for b in resumed for r in b.data.to_pylist()])
        return reads

    whole, parts = _both(tmp_path, monkeypatch, run)
    assert len(whole[0]) > 14 and whole == parts


def _counted(batches: list[pa.Table], pulled: list[int]) -> Iterator[pa.Table]:
    for batch in batches:
        pulled[0] += batch.num_rows
        yield batch


@pytest.mark.parametrize("seed", range(5))
def test_rows_buffered_stay_within_two_batches_per_file(seed: int) -> None:
    rng = random.Random(seed)
    batch, files = 5, 4
    tables = []
    for _ in range(files):
        # A key may repeat (files not merged, such as changelog files) across batch ends.
        keys = sorted(rng.choices(range(200), k=rng.randint(0, 80)))
        tables.append(pa.table({"_KEY_s": [f"k{k // 10:03d}" for k in keys], "_KEY_k": pa.array(keys, pa.int64())}))
    pulled = [0]
    sources = [_counted([t.slice(i, batch) for i in range(0, t.num_rows, batch)], pulled) for t in tables]
    returned = 0
    chunks = []
    for chunk in chunked.key_bounded(sources, ["_KEY_s", "_KEY_k"]):
        assert pulled[0] - returned <= 2 * files * batch
        returned += chunk.num_rows
        chunks.append(chunk)
    every_key = sorted(k for t in tables for k in t.column("_KEY_k").to_pylist())
    assert sorted(pa.concat_tables(chunks).column("_KEY_k").to_pylist()) == every_key
    assert returned == sum(t.num_rows for t in tables)
    # All rows of a key are in one chunk, and chunks come in key order.
    spans = [(min(c.column("_KEY_k").to_pylist()), max(c.column("_KEY_k").to_pylist())) for c in chunks]
    assert all(high < low for (_, high), (low, _) in itertools.pairwise(spans))
