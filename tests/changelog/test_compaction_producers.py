"""Producers ``lookup`` and ``full-compaction`` against a model, for every merge engine.

Random commits (inserts, updates to equal and different values, deletes of present and absent
keys, re-inserts, several changes to one key in one commit) go to a table and to a dict model
of the merge engine. After every commit: the table reads as the model; the changelog folded
from the first snapshot reproduces the table; the commit's changelog lands in its own COMPACT
snapshot (same identifier) and equals the diff of the model's states, where a key the commit
wrote but did not change gives a -U/+U pair of equal rows unless
``changelog-producer.row-deduplicate``.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.changelog import producers
from changelake.table.commit import committer
from changelake.table.write.writer import TableWrite

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("a", pa.int64()), pa.field("b", pa.int64())])
KEYS = 12
ENGINES: dict[str, dict[str, str]] = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
    "aggregation": {"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                    "fields.b.aggregate-function": "max"},
    "first-row": {"merge-engine": "first-row", "ignore-delete": "true"},
}
State = dict[int, tuple[Any, Any]]


def apply(engine: str, state: State, rows: list[tuple[str, int, Any, Any]]) -> State:
    """The model: the engine's merge, one row at a time in input order."""
    state = dict(state)
    for kind, k, a, b in rows:
        retract = kind in ("-U", "-D")
        if engine == "deduplicate":
            state.pop(k, None) if retract else state.__setitem__(k, (a, b))
        elif engine == "partial-update":
            if retract:
                state.pop(k, None)
            else:
                old = state.get(k, (None, None))
                state[k] = (a if a is not None else old[0], b if b is not None else old[1])
        elif engine == "aggregation":
            old = state.get(k, (None, None))
            total = None if a is None and old[0] is None else (a or 0) + (old[0] or 0)
            state[k] = (total, b if old[1] is None else (old[1] if b is None else max(b, old[1])))
        elif not retract and k not in state:  # first-row: deletes are ignored
            state[k] = (a, b)
    return state


def random_commit(rng: random.Random, engine: str, state: State) -> list[tuple[str, int, Any, Any]]:
    rows: list[tuple[str, int, Any, Any]] = []
    for _ in range(rng.randint(1, 8)):
        k = rng.randrange(KEYS)
        op = rng.random()
        present = k in state
        if op < 0.2 and present and engine in ("deduplicate", "partial-update"):
            rows.append(("+U", k, *state[k]))  # an update to the equal value
        elif op < 0.35 and engine in ("deduplicate", "partial-update", "first-row"):
            # deletes of present and absent keys (partial-update: a delete with null values
            # resets the record, so later adds start afresh)
            rows.append(("-D", k, None, None) if engine != "deduplicate" or not present else ("-D", k, *state[k]))
        else:
            a = rng.choice([None, rng.randrange(5)]) if engine == "partial-update" else rng.randrange(5)
            rows.append(("+I" if not present else "+U", k, a, rng.randrange(5)))
        state = apply(engine, state, rows[-1:])
    return rows


def model_key(k: Any) -> int:
    """The model's key of a table key (string keys are ``key-NN``)."""
    return int(k.removeprefix("key-")) if isinstance(k, str) else int(k)


def fold(state: State, changes: pa.Table) -> State:
    state = dict(state)
    for row in changes.to_pylist():
        k, value = model_key(row["k"]), (row["a"], row["b"])
        if row["rowkind"] in ("-U", "-D"):
            assert state.pop(k) == value, f"retraction of {k} does not match {row}"
        else:
            assert row["rowkind"] == "+I" or k not in state
            assert k not in state
            state[k] = value
    return state


def expected_changes(before: State, after: State, touched: set[int], *, dedup: bool, engine: str) -> list[Any]:
    out: list[Any] = []
    for k in sorted(set(before) | set(after)):
        old, new = before.get(k), after.get(k)
        if old is None and new is not None:
            out.append(("+I", k, *new))
        elif old is not None and new is None:
            out.append(("-D", k, *old))
        elif (old is not None and new is not None and engine != "first-row" and k in touched
              and (old != new or not dedup)):
            out += [("-U", k, *old), ("+U", k, *new)]
    return out


def table_state(table: cl.Table, snapshot_id: int) -> State:
    rows = table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()
    return {model_key(r["k"]): (r["a"], r["b"]) for r in rows}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize(("producer", "dedup"), [("lookup", False), ("lookup", True), ("full-compaction", True)])
def test_changelog_is_the_diff_of_states(tmp_path: Path, producer: str, engine: str, dedup: bool) -> None:
    check_against_model(tmp_path, producer, engine, dedup=dedup, string_keys=False)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("producer", ["lookup", "full-compaction"])
def test_changelog_of_string_keys_is_the_diff_of_states(tmp_path: Path, producer: str, engine: str) -> None:
    # Integer keys are looked up by binary search; other keys by a hash join.
    check_against_model(tmp_path, producer, engine, dedup=False, string_keys=True)


# Paimon pairs deletion vectors with the lookup producer, not full-compaction, and not first-row
@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "first-row"])
def test_changelog_of_tables_with_deletion_vectors_is_the_diff_of_states(tmp_path: Path, engine: str) -> None:
    # The state before a compaction is its files minus the rows their deletion vectors mark.
    check_against_model(tmp_path, "lookup", engine, dedup=False, string_keys=False,
                        extra={"deletion-vectors.enabled": "true"})


def check_against_model(tmp_path: Path, producer: str, engine: str, *, dedup: bool, string_keys: bool,
                        extra: dict[str, str] | None = None) -> None:
    options = {"bucket": "2", "changelog-producer": producer,
               "changelog-producer.row-deduplicate": str(dedup).lower(), **ENGINES[engine], **(extra or {})}
    schema = SCHEMA.set(0, pa.field("k", pa.string(), nullable=False)) if string_keys else SCHEMA
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"], options=options)
    rng = random.Random(f"{producer}-{engine}-{dedup}")
    model: State = {}
    folded: State = {}
    with table.writer(commit_user="job") as writer:
        for identifier in range(1, 13):
            rows = random_commit(rng, engine, model)
            after = apply(engine, model, rows)
            keys = [f"key-{r[1]:02d}" if string_keys else r[1] for r in rows]
            writer.write(pa.table({"rowkind": [r[0] for r in rows], "k": keys,
                                   "a": [r[2] for r in rows], "b": [r[3] for r in rows]}))
            landed = writer.commit(identifier)
            if not landed:  # first-row: only ignored deletes, nothing to commit
                assert engine == "first-row" and after == model
                continue
            assert all(s.commit_identifier == identifier for s in landed)
            assert table_state(table, landed[-1].id) == after
            carrying = [s for s in landed if s.changelog_manifest_list is not None]
            assert all(s.commit_kind is cl.CommitKind.COMPACT for s in carrying)
            changes = table.changes(landed[0].id - 1, landed[-1].id).to_arrow()
            # buckets come one after another; within a key the order is the changelog's
            got = sorted(((r["rowkind"], model_key(r["k"]), r["a"], r["b"]) for r in changes.to_pylist()),
                         key=lambda r: r[1])
            want = expected_changes(model, after, {r[1] for r in rows}, dedup=dedup, engine=engine)
            assert got == want, f"commit {identifier}: {rows}"
            folded = fold(folded, changes)
            assert folded == after
            model = after
    cache = producers.lookup_cache(table.context)
    assert cache is not None and cache.hits > 0


def test_write_only_writers_leave_the_changelog_to_compact(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"changelog-producer": "lookup", "write-only": "true"})
    table.write(pa.table({"k": [1, 2], "a": [1, 2], "b": [1, 2]}))
    table.write(pa.table({"k": [1], "a": [5], "b": [1]}))
    assert all(s.changelog_manifest_list is None for s in table.snapshots())
    compacted = table.compact()
    assert compacted is not None and compacted.changelog_record_count == 2
    got = table.changes(0, compacted.id).to_arrow().to_pylist()
    assert [(r["rowkind"], r["k"], r["a"]) for r in got] == [("+I", 1, 5), ("+I", 2, 2)]


def test_lookup_wait_false_lands_the_changelog_later(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"changelog-producer": "lookup", "changelog-producer.lookup-wait": "false"})
    assert table.context.options.lookup_wait is False
    folded: State = {}
    with table.writer(commit_user="job") as writer:
        for i in range(1, 8):
            writer.write(pa.table({"k": [i % 3, 7], "a": [i, i], "b": [0, 0]}))
            writer.commit(i)
    table.compact()
    latest = table.latest_snapshot()
    assert latest is not None
    folded = fold(folded, table.changes(0, latest.id).to_arrow())
    assert folded == table_state(table, latest.id)


def test_lookup_cache_spills_and_clears(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"changelog-producer": "lookup", "lookup.cache-max-memory-size": "1 b"})
    cache = producers.lookup_cache(table.context)
    assert cache is not None
    cache.clear()
    for i in range(4):
        table.write(pa.table({"k": list(range(20)), "a": [i] * 20, "b": [i] * 20}))
    # every file is written or read through the store, and held on local disk (1 byte of memory)
    assert cache.hits > 0 and cache.hit_rate > 0 and cache.disk_bytes > 0 and cache.memory_bytes == 0
    latest = table.latest_snapshot()
    assert latest is not None and fold({}, table.changes(0, latest.id).to_arrow()) == table_state(table, latest.id)
    cache.clear()
    assert cache.hits == cache.misses == 0


def test_lookup_replay_after_a_crash_between_append_and_compact(tmp_path: Path) -> None:
    """A crash after a lookup commit's APPEND snapshot and before its COMPACT snapshot (which
    carries the changelog): the replayed identifier is skipped and moves level 0 up instead, so
    the changelog lands and still folds into the table, nothing twice, nothing lost."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"],
                                                   options={"bucket": "2", "changelog-producer": "lookup"})
    table.write(pa.table({"k": [1, 2], "a": [1, 2], "b": [1, 2]}, schema=SCHEMA))
    rows = pa.table({"k": [2, 3], "a": [20, 3], "b": [20, 3]}, schema=SCHEMA)
    lost = TableWrite(table.context, "job", changelog=producers.for_table(table.context))
    lost.write(rows)
    append_only = [dataclasses.replace(m, compact_before=(), compact_after=(), compact_changelog_files=())
                   for m in lost.prepare()]
    committer.commit(table.context, append_only, "job", 1)  # the process died before the COMPACT
    with table.writer(commit_user="job") as replay:
        replay.write(rows)
        assert replay.commit(identifier=1) == []
    latest = table.latest_snapshot()
    assert latest is not None and latest.changelog_manifest_list is not None
    changes = table.changes(0, latest.id).to_arrow()
    assert fold({}, changes) == table_state(table, latest.id) == {1: (1, 1), 2: (20, 20), 3: (3, 3)}


def test_first_row_changelog_keeps_the_kind_each_new_key_was_written_with(tmp_path: Path) -> None:
    """first-row's lookup changelog is each new key's kept row as written, +I or +U (Paimon's
    FirstRowMergeFunctionWrapper adds it as it is); later rows of a kept key are no change."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "changelog-producer": "lookup", **ENGINES["first-row"]})
    table.write(pa.table({"k": [1, 2, 2], "a": [10, 20, 21], "b": [0, 0, 0], "rowkind": ["+U", "+I", "+U"]}))
    table.write(pa.table({"k": [1, 3], "a": [11, 30], "b": [0, 0], "rowkind": ["+I", "+U"]}))
    changes = table.changes(0, table.latest_snapshot().id).to_arrow().to_pylist()
    assert [(row["rowkind"], row["k"], row["a"]) for row in changes] == [("+U", 1, 10), ("+I", 2, 20), ("+U", 3, 30)]
