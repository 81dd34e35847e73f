"""``lookup-compact``: tables that look keys up (deletion vectors, first-row, the ``lookup``
producer) force level 0 up in every commit (``radical``, the default) or, with ``gentle``, only
when universal compaction picks it or every ``lookup-compact.max-interval``-th commit of a writer
in which nothing was picked (Paimon's ForceUpLevel0Compaction with a max interval)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import OptionError
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])


def _levels(table: cl.Table) -> list[int]:
    latest = table.latest_snapshot()
    assert latest is not None
    return sorted(e.file.level for e in live_files.live_entries(table.context, latest))


def _rows(table: cl.Table) -> dict[int, Any]:
    return {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()}


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "1", "num-sorted-run.compaction-trigger": "3", **options})


def test_gentle_deletion_vectors_leave_level0_until_picked_or_the_interval(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"deletion-vectors.enabled": "true", "lookup-compact": "gentle",
                                "lookup-compact.max-interval": "3"})
    expected: dict[int, Any] = {}
    seen: list[tuple[list[int], dict[int, Any]]] = []
    with table.writer(commit_user="job") as writer:
        for i in range(8):
            batch = {"k": [i, 100], "v": [f"v{i}", f"x{i}"]}
            writer.write(pa.table(batch))
            writer.commit(i)
            expected.update(zip(batch["k"], batch["v"], strict=True))
            seen.append((_levels(table), _rows(table)))
    # 1-2: one and two level-0 runs, nothing picked (trigger 3), readers skip level 0: no rows
    assert seen[0] == ([0], {}) and seen[1] == ([0, 0], {})
    # 3: three runs, universal compaction picks them all into the top level
    assert seen[2] == ([3], {0: "v0", 1: "v1", 2: "v2", 100: "x2"})
    # 4: the third commit in which nothing was picked (1, 2, 4): level 0 is forced up
    assert 0 not in seen[3][0] and seen[3][1] == {**seen[2][1], 3: "v3", 100: "x3"}
    # 6 and 8 leave their level-0 file behind (a commit in which nothing was picked, not the third)
    assert seen[5][0][0] == 0 and seen[5][1] == seen[4][1]
    assert seen[7][0][0] == 0 and 7 not in seen[7][1]
    # an explicit compaction moves level 0 up whatever lookup-compact says
    assert table.compact() is not None and 0 not in _levels(table)
    assert _rows(table) == expected


def test_radical_deletion_vectors_move_level0_up_in_every_commit(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"deletion-vectors.enabled": "true"})
    assert table.context.options.lookup_compact is cl.LookupCompactMode.RADICAL
    expected: dict[int, Any] = {}
    with table.writer(commit_user="job") as writer:
        for i in range(5):
            writer.write(pa.table({"k": [i, 100], "v": [f"v{i}", f"x{i}"]}))
            writer.commit(i)
            expected.update({i: f"v{i}", 100: f"x{i}"})
            assert 0 not in _levels(table) and _rows(table) == expected


def test_the_interval_is_at_least_the_compaction_trigger(tmp_path: Path) -> None:
    # max-interval 1 is raised to the trigger (3), as Paimon bounds it: commits 1 and 2 keep
    # level 0, the third in which nothing is picked forces it up
    table = _table(tmp_path, **{"merge-engine": "first-row", "lookup-compact": "gentle",
                                "lookup-compact.max-interval": "1", "num-sorted-run.compaction-trigger": "5"})
    assert table.context.options.lookup_compact_max_interval == 1
    with table.writer(commit_user="job") as writer:
        levels = []
        for i in range(5):
            writer.write(pa.table({"k": [i], "v": [f"v{i}"]}))
            writer.commit(i)
            levels.append(_levels(table))
    assert [0 in lv for lv in levels] == [True, True, True, True, False]
    assert _rows(table) == {i: f"v{i}" for i in range(5)}


def test_the_default_interval_is_twice_the_trigger(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"deletion-vectors.enabled": "true", "lookup-compact": "GENTLE"})
    assert table.context.options.lookup_compact is cl.LookupCompactMode.GENTLE
    assert table.context.options.lookup_compact_max_interval == 6


def test_one_shot_writes_count_from_zero_each_time(tmp_path: Path) -> None:
    # Table.write is a new writer per commit (as a Paimon batch job): only universal compaction
    # moves level 0 up, once three runs are there
    table = _table(tmp_path, **{"deletion-vectors.enabled": "true", "lookup-compact": "gentle"})
    levels = []
    for i in range(3):
        table.write(pa.table({"k": [i], "v": [f"v{i}"]}))
        levels.append(_levels(table))
    assert levels == [[0], [0, 0], [3]]


def test_gentle_lookup_producer_still_writes_every_change(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"changelog-producer": "lookup", "lookup-compact": "gentle"})
    with table.writer(commit_user="job") as writer:
        for i in range(7):
            writer.write(pa.table({"k": [i % 3, 9], "v": [f"v{i}", f"w{i}"]}))
            writer.commit(i)
    table.compact()
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.changes(0, latest.id).to_arrow().to_pylist()
    state: dict[int, Any] = {}
    for row in changes:
        if row["rowkind"] in ("+I", "+U"):
            state[row["k"]] = row["v"]
        else:
            assert state.pop(row["k"]) == row["v"]
    assert state == _rows(table) == {0: "v6", 1: "v4", 2: "v5", 9: "w6"}


@pytest.mark.parametrize(("key", "value"), [("lookup-compact", "lazy"), ("lookup-compact.max-interval", "0")])
def test_bad_lookup_compact_options_are_refused(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(OptionError, match=key):
        _table(tmp_path, **{"deletion-vectors.enabled": "true", key: value})
    assert not (tmp_path / "db.db" / "t").exists()
