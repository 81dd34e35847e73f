"""Merge-on-read merges only the keys that several rows of a split hold (table/read/merged_split.py):
its reads equal, row for row and in order, those of the common whole-split merge, for every
merge engine, with keys that are one integer or a string and an integer, with retractions,
projections, filters, partition columns, files of an older schema and change streams resumed
inside a full read; whether the files' order comes from their sequence ranges (the sequence
numbers not read) or from the sequence numbers.

Each case writes the same commits into three tables read three ways: as shipped, with the
files' sequence ranges taken as overlapping (sequence numbers read), and the common way."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.table.format import data_file
from changelake.table.read import merged_split, reader

ENGINES = {
    "deduplicate": {},
    "deduplicate-sequence-field": {"sequence.field": "g"},
    "deduplicate-ignore-delete": {"ignore-delete": "true"},
    "partial-update": {"merge-engine": "partial-update", "fields.g.sequence-group": "a,b"},
    "aggregation": {"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                    "fields.b.aggregate-function": "max", "fields.g.aggregate-function": "min"},
    "first-row": {"merge-engine": "first-row"},
}
RETRACTING = {"deduplicate", "deduplicate-sequence-field", "deduplicate-ignore-delete"}
NO_COMPACTION = {"bucket": "1", "write-only": "true"}


def _schema(*, composite: bool) -> pa.Schema:
    key = [pa.field("s", pa.string(), nullable=False)] if composite else []
    return pa.schema([pa.field("p", pa.string(), nullable=False), *key, pa.field("k", pa.int64(), nullable=False),
                      pa.field("a", pa.int64()), pa.field("b", pa.string()), pa.field("g", pa.int64())])


def _commits(*, composite: bool, deletes: bool, seed: int = 5, commits: int = 7) -> list[pa.Table]:
    """Overlapping upserts (and retractions) of 80 keys in two partitions, each key at most once a commit."""
    rng = random.Random(seed)
    out = []
    for commit in range(commits):
        keys = sorted(rng.sample(range(80), rng.choice([5, 30, 60])))
        data: dict[str, Any] = {
            "p": [f"day{k % 2}" for k in keys],
            "k": pa.array(keys, pa.int64()),
            "a": pa.array([rng.choice([None, commit, k]) for k in keys], pa.int64()),
            "b": [rng.choice([None, "x", "y", f"c{commit}"]) for _ in keys],
            "g": pa.array([rng.choice([None, commit, 5 - commit]) for _ in keys], pa.int64()),
        }
        if composite:
            data = {"s": [f"s{k % 3}" for k in keys], **data}
        if deletes:
            data["rowkind"] = [rng.choice(["+I", "+U", "-D", "-U"]) for _ in keys]
        out.append(pa.table(data))
    return out


def _table(root: Path, commits: list[pa.Table], options: dict[str, str], *, composite: bool) -> cl.Table:
    keys = ["p", "s", "k"] if composite else ["p", "k"]
    table = cl.Catalog(str(root)).create_table("db.t", _schema(composite=composite), primary_keys=keys,
                                               partition_keys=["p"], options=options)
    for data in commits:
        table.write(data)
    return table


def _rows(rows: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in rows.to_pylist()]


def _observe(table: cl.Table, text: str = "b") -> dict[str, Any]:
    """What readers see of the table, in the order they see it."""
    splits = table.scan().plan()
    seen: dict[str, Any] = {
        "merged splits": sum(not s.raw_convertible for s in splits),
        "scan": _rows(table.scan().to_arrow()),
        "split by split": [_rows(table.scan().read_split(s)) for s in splits],
        "projected": _rows(table.scan(columns=[text, "p"]).to_arrow()),
        "filtered": _rows(table.scan(columns=["k", text], filter=(pc.field("a") > 1) | (pc.field("p") == "day0"))
                          .to_arrow()),
        "keys only": _rows(table.scan(columns=["k"]).to_arrow()),
    }
    stream = list(table.stream(mode="latest-full", max_rows=9))
    seen["full read"] = [_rows(b.data) for b in stream]
    seen["resumed"] = [[_rows(b.data) for b in table.stream(offset=stream[stop].offset, max_rows=5)]
                       for stop in range(0, len(stream), 3)]
    return seen


def _three_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Callable[[Path], Any]) -> list[Any]:
    """``run`` as shipped, with sequence numbers read, and with the common whole-split merge."""
    seen = [run(tmp_path / "shipped")]
    with monkeypatch.context() as patched:
        patched.setattr(merged_split, "_oldest_first", lambda files: None)
        seen.append(run(tmp_path / "sequence-numbers"))
    with monkeypatch.context() as patched:
        patched.setattr(reader, "_merged_where_shared", lambda *args: None)
        seen.append(run(tmp_path / "common"))
    return seen


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("composite", [False, True])
def test_every_engine_reads_as_the_whole_split_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: str,
                                                     composite: bool) -> None:
    commits = _commits(composite=composite, deletes=engine in RETRACTING)
    options = {**NO_COMPACTION, **ENGINES[engine]}
    shipped, by_sequence, common = _three_ways(
        tmp_path, monkeypatch, lambda root: _observe(_table(root, commits, options, composite=composite)))
    # A batch scan of first-row skips level 0; its change stream's full read merges it.
    assert shipped["full read"] and (engine == "first-row" or shipped["merged splits"])
    assert shipped == by_sequence == common


def test_compacted_levels_under_new_files_read_as_the_whole_split_merge(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction leaves small files above level 0; new level-0 files overlap them."""
    commits = _commits(composite=False, deletes=True, commits=15)
    options = {"bucket": "1", "num-sorted-run.compaction-trigger": "4", "target-file-size": "2 kb"}
    shipped, by_sequence, common = _three_ways(
        tmp_path, monkeypatch, lambda root: _observe(_table(root, commits, options, composite=False)))
    assert shipped["merged splits"] and shipped == by_sequence == common


def test_files_of_an_older_schema_read_as_the_whole_split_merge(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    commits = _commits(composite=False, deletes=True)

    def run(root: Path) -> dict[str, Any]:
        table = _table(root, commits[:4], NO_COMPACTION, composite=False)
        with table.update_schema() as update:
            update.add_column("e", pa.string())
            update.rename_column("b", "b2")
        table = cl.Catalog(str(root)).get_table("db.t")
        for data in commits[4:]:
            renamed = data.rename_columns(["b2" if n == "b" else n for n in data.column_names])
            table.write(renamed.append_column("e", pa.array([f"e{i % 3}" for i in range(data.num_rows)])))
        return _observe(table, "b2")

    shipped, by_sequence, common = _three_ways(tmp_path, monkeypatch, run)
    assert any(r[-1] is None for r in shipped["scan"]) and any(r[-1] is not None for r in shipped["scan"])
    assert shipped == by_sequence == common


def test_retractions_of_a_file_counted_wrong_are_dropped_after_it_moved_up(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """pypaimon 2.1 records a delete count of 0 for the files it writes, -D rows or not, and a
    compaction may move such a file up unchanged: its kinds are still read (only files a
    compaction wrote are trusted by their count)."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", _schema(composite=False), primary_keys=["p", "k"],
                                                   partition_keys=["p"], options={"bucket": "1", "write-only": "true"})
    close = data_file._OpenFile.close

    def miscounted(self: Any, *args: Any) -> Any:
        return dataclasses.replace(close(self, *args), delete_row_count=0)

    with monkeypatch.context() as patched:
        patched.setattr(data_file._OpenFile, "close", miscounted)
        table.write(pa.table({"p": ["day0"] * 4, "k": pa.array([1, 2, 3, 4], pa.int64()), "a": [1, 2, 3, 4],
                              "b": ["x"] * 4, "g": [0] * 4, "rowkind": ["+I", "-D", "+I", "-D"]}))
    table.compact(full=True)
    files = table.system("files")
    assert files.column("level").to_pylist() == [5] and files.column("file_source").to_pylist() == ["APPEND"]
    assert table.scan(columns=["k"]).to_arrow().column("k").to_pylist() == [1, 3]


def test_a_split_whose_oldest_file_has_no_live_row(tmp_path: Path) -> None:
    # A file its deletion vector marks whole reads as no rows; first in the split, its empty
    # run compared numeric[0:-1] (every row but the last) with nothing: a broadcast error where
    # a stream read the files an overwrite removed (test_stream_differential found it).
    table = cl.Catalog(str(tmp_path)).create_table("db.t", pa.schema([pa.field("k", pa.int64(), nullable=False)]),
                                                   primary_keys=["k"], options={"bucket": "1"})
    parts = [pa.table({"k": pa.array([], pa.int64())}), pa.table({"k": pa.array([1, 3], pa.int64())}),
             pa.table({"k": pa.array([2, 3], pa.int64())})]
    grouped = merged_split._grouped(table.context, parts, [0, 2, 2], ranked=True)
    assert grouped is not None
    order, ends, ranks = grouped
    assert order.tolist() == [0, 2, 1, 3]  # keys 1, 2, 3 (older file), 3 (newer file)
    assert ends.tolist() == [True, True, False, True]
    assert ranks().tolist() == [1, 1, 2, 2]
