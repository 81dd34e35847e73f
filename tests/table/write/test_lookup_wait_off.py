"""``lookup-wait=false`` on tables whose readers skip level 0 (deletion vectors, first-row): a
long-lived writer's commits do not wait for level 0 to go up. The compaction runs in the
background (with deletion vectors, from the committed vectors) and lands with a later commit,
so reads lag behind the commits but always show a prefix of them, never a mix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.executor import compaction_executor
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
LOOKS_UP = {"deletion-vectors": {"deletion-vectors.enabled": "true"}, "first-row": {"merge-engine": "first-row"}}


def _has_level0(table: cl.Table) -> bool:
    latest = table.latest_snapshot()
    assert latest is not None
    return any(e.file.level == 0 for e in live_files.live_entries(table.context, latest))


def _commit_rows(engine: str, i: int) -> pa.Table:
    keys = [i % 5, 10 + i, 100]
    deletes = engine != "first-row" and i % 4 == 3  # first-row takes no retractions
    return pa.table({"k": keys, "v": [f"v{i}"] * len(keys), "rowkind": ["-D" if deletes else "+I", "+I", "+I"]})


def _state(engine: str, commits: int) -> dict[int, Any]:
    state: dict[int, Any] = {}
    for i in range(commits):
        for row in _commit_rows(engine, i).to_pylist():
            if row["rowkind"] == "-D":
                if engine != "first-row":
                    state.pop(row["k"], None)
            elif engine != "first-row" or row["k"] not in state:
                state[row["k"]] = row["v"]
    return state


@pytest.mark.parametrize("engine", sorted(LOOKS_UP))
@pytest.mark.parametrize("key", ["lookup-wait", "changelog-producer.lookup-wait"])
def test_commits_do_not_wait_and_reads_show_a_prefix_of_them(tmp_path: Path, engine: str, key: str) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "1", "num-sorted-run.compaction-trigger": "2", key: "false", **LOOKS_UP[engine]})
    assert table.context.options.lookup_wait is False
    shown = 0
    with table.writer(commit_user="job") as writer:
        for i in range(12):
            writer.write(_commit_rows(engine, i))
            writer.commit(i)
            if i == 0:
                # the first commit's compaction started in the background: its file stays at level 0
                assert _has_level0(table)
            got = {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
            prefix = next(n for n in range(i + 2) if _state(engine, n) == got)
            assert prefix >= shown, f"commit {i}: the read went back from {shown} commits to {prefix}"
            shown = prefix
    # level 0 goes up with an explicit compaction (or the next writer's commits)
    table.compact()
    assert not _has_level0(table)
    assert {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == _state(engine, 12)


def test_a_background_compaction_lands_with_the_next_commit(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "1", "deletion-vectors.enabled": "true", "lookup-wait": "false"})
    first = {k: "a" for k in range(200)}
    with table.writer(commit_user="job") as writer:
        writer.write(pa.table({"k": list(first), "v": list(first.values())}))
        assert [s.commit_kind for s in writer.commit(0)] == [cl.CommitKind.APPEND]
        assert table.scan().to_arrow().num_rows == 0  # readers skip level 0
        compaction_executor().submit(lambda: None).result()  # the one compaction thread is done
        writer.write(pa.table({"k": [2, 300], "v": ["b", "b"]}))
        # commit 0's file, compacted up in the background, lands with commit 1; commit 1's
        # file waits at level 0 for the next commit
        landed = writer.commit(1)
        assert [s.commit_kind for s in landed] == [cl.CommitKind.APPEND, cl.CommitKind.COMPACT]
        assert _rows(table) == first
        compaction_executor().submit(lambda: None).result()
        writer.write(pa.table({"k": [1], "v": ["c"]}))
        writer.commit(2)
        # commit 1's small file went up on its own: key 2 of commit 0's file is marked deleted
        assert _rows(table) == {**first, 2: "b", 300: "b"}
        latest = table.latest_snapshot()
        assert latest is not None and latest.index_manifest is not None
        compaction_executor().submit(lambda: None).result()
        writer.write(pa.table({"k": [2], "v": ["d"]}))
        writer.commit(3)  # from the vectors commit 2 left: commit 1's 2 is marked too
        assert _rows(table) == {**first, 1: "c", 2: "b", 300: "b"}
        compaction_executor().submit(lambda: None).result()
        writer.write(pa.table({"k": [4], "v": ["e"]}))
        writer.commit(4)
    assert _rows(table) == {**first, 1: "c", 2: "d", 300: "b"}
    table.compact()
    assert _rows(table) == {**first, 1: "c", 2: "d", 4: "e", 300: "b"}


def _rows(table: cl.Table) -> dict[int, Any]:
    return {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
