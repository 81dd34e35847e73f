"""A streaming write's writer kept in its Spark worker between micro-batches
(changelake.streaming.resident_writers), driven here as Spark drives it, in one process: the task
(``write_tasks.write_rows``, ``streaming=True``) prepares, the driver lands what it returns. The
compactions a batch starts land with a later batch; whatever happens between (a batch that never
landed and is replayed, a task that failed, another writer's commits, a schema change), every
batch's read equals the model and the changelog replayed gives the table."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.changelog import producers
from changelake.errors import NullKeyError
from changelake.streaming import resident_writers, write_tasks
from changelake.streaming.resident_writers import RESIDENT_WRITERS
from changelake.table.executor import compaction_executor
from changelake.table.format.snapshot import CommitKind
from changelake.table.write import landing

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string())])
USER = "query-1"
NO_WAIT = {"bucket": "2", "changelog-producer": "lookup", "lookup-wait": "false"}


@pytest.fixture(autouse=True)
def _no_writers_left() -> Iterator[None]:
    RESIDENT_WRITERS.clear()
    yield
    RESIDENT_WRITERS.clear()


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options=options)


def _batch(rng: random.Random, state: dict[int, str], n: int, tag: str) -> pa.Table:
    keys = [rng.randrange(60) for _ in range(n)]
    kinds = ["-D" if k in state and rng.random() < 0.2 else "+I" for k in keys]
    return pa.table({"k": keys, "v": [f"{tag}-{i}" for i in range(n)], "rowkind": kinds})


def _apply(state: dict[int, str], rows: pa.Table) -> None:
    for row in rows.to_pylist():
        if row["rowkind"] == "-D":
            state.pop(row["k"], None)
        else:
            state[row["k"]] = row["v"]


def _task(table: cl.Table, rows: pa.Table) -> list[write_tasks.TaskResult]:
    out = write_tasks.write_rows(table.context, USER, iter(rows.to_batches()), streaming=True)
    return [write_tasks.task_result(r[write_tasks.MESSAGE_COLUMN]) for b in out for r in b.to_pylist()]


def _land(table: cl.Table, results: list[write_tasks.TaskResult], identifier: int) -> list[cl.Snapshot]:
    messages = [m for r in results for m in r.messages]
    views = [r.view for r in results if r.view is not None]
    ctx = table.context
    return landing.land(ctx, producers.for_table(ctx), messages, USER, identifier,
                        view=min(views) if views else None) if messages else []


def _stream(table: cl.Table, rng: random.Random, state: dict[int, str], batch_id: int) -> list[cl.Snapshot]:
    """Micro-batch ``batch_id`` (40 random changes) written by a task and landed, and the model
    moved on by it: the snapshots that landed."""
    rows = _batch(rng, state, 40, f"b{batch_id}")
    landed = _land(table, _task(table, rows), batch_id)
    _apply(state, rows)
    return landed


def _read(table: cl.Table) -> dict[int, str]:
    table.refresh()
    return {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()}


def _replayed_changelog(table: cl.Table) -> dict[int, Any]:
    state: dict[int, Any] = {}
    latest = table.latest_snapshot()
    assert latest is not None
    for row in table.changes(0, latest.id).to_arrow().to_pylist():
        if row["rowkind"] in ("-U", "-D"):
            assert state.pop(row["k"]) == row["v"], f"retraction {row} does not match"
        else:
            assert row["k"] not in state, f"{row} over a live row"
            state[row["k"]] = row["v"]
    return state


def _background_done() -> None:
    compaction_executor().submit(lambda: None).result()  # the one compaction thread is idle


def test_compactions_a_batch_starts_land_with_a_later_batch(tmp_path: Path) -> None:
    table = _table(tmp_path, **NO_WAIT)
    assert resident_writers.lives_on(table.context, producers.for_table(table.context))
    rng, state = random.Random(1), {}
    for batch_id in range(12):
        landed = _stream(table, rng, state, batch_id)
        assert _read(table) == state
        assert landed[0].commit_kind is CommitKind.APPEND
        if batch_id:
            # the previous batch's compaction (level 0 up, with its changelog) finished in the
            # background and landed with this batch, as its COMPACT snapshot
            assert [s.commit_kind for s in landed] == [CommitKind.APPEND, CommitKind.COMPACT]
        _background_done()
    assert len(RESIDENT_WRITERS) == 1
    # the last batch's compaction was never handed over: its level 0 goes up with compact()
    table.compact()
    assert _replayed_changelog(table) == state == _read(table)


def test_a_deletion_vector_tables_reads_show_each_batch_once_the_next_lands(tmp_path: Path) -> None:
    """Readers skip level 0 of such tables: a batch's rows show once its compaction landed."""
    table = _table(tmp_path, bucket="2", **{"deletion-vectors.enabled": "true", "lookup-wait": "false"})
    assert resident_writers.lives_on(table.context, producers.for_table(table.context))
    rng, state = random.Random(7), {}
    for batch_id in range(8):
        before = dict(state)
        _stream(table, rng, state, batch_id)
        assert _read(table) == before
        _background_done()
    table.compact()
    assert _read(table) == state


def test_a_batch_that_never_landed_is_replayed_over_the_table_as_it_is(tmp_path: Path) -> None:
    table = _table(tmp_path, **NO_WAIT)
    rng, state = random.Random(2), {}
    for batch_id in range(10):
        rows = _batch(rng, state, 40, f"b{batch_id}")
        if batch_id in (3, 7):
            _task(table, rows)  # the driver died before landing it: Spark runs the batch again
            _background_done()
        kinds = [s.commit_kind for s in _land(table, _task(table, rows), batch_id)]
        _apply(state, rows)
        # the lost attempt's compaction is dropped with the buckets it built on, and the
        # compactions after a replay land again
        want = [CommitKind.APPEND] if batch_id in (0, 3, 7) else [CommitKind.APPEND, CommitKind.COMPACT]
        assert kinds == want, f"batch {batch_id}"
        assert _read(table) == state
        _background_done()
    table.compact()
    assert _replayed_changelog(table) == state == _read(table)


def test_a_failed_task_drops_its_writer_and_the_next_starts_afresh(tmp_path: Path) -> None:
    table = _table(tmp_path, **NO_WAIT)
    rng, state = random.Random(3), {}
    _stream(table, rng, state, 0)
    bad = pa.table({"k": [1, None], "v": ["x", "y"]})
    with pytest.raises(NullKeyError):
        _task(table, bad)
    assert len(RESIDENT_WRITERS) == 0
    _stream(table, rng, state, 1)
    table.compact()
    assert _replayed_changelog(table) == state == _read(table)


def test_another_writers_commits_between_batches_are_built_on(tmp_path: Path) -> None:
    table = _table(tmp_path, **NO_WAIT)
    rng, state = random.Random(4), {}
    for batch_id in range(10):
        _stream(table, rng, state, batch_id)
        _background_done()
        if batch_id % 3 == 1:
            other = _batch(rng, state, 15, f"other{batch_id}")
            table.write(other)  # a one-shot writer: it compacts the buckets it wrote
            _apply(state, other)
        if batch_id == 5:
            table.compact(full=True)
        assert _read(table) == state
    table.compact()
    assert _replayed_changelog(table) == state == _read(table)


def test_a_schema_change_between_batches_starts_a_new_writer(tmp_path: Path) -> None:
    table = _table(tmp_path, **NO_WAIT)
    rng, state = random.Random(5), {}
    _stream(table, rng, state, 0)
    kept = RESIDENT_WRITERS.take(table.context, USER)
    assert kept is not None
    RESIDENT_WRITERS.keep(kept)
    table.update_schema().add_column("w", pa.int32()).commit()
    table.refresh()
    assert RESIDENT_WRITERS.take(table.context, USER) is None  # the old schema's writer is closed
    _stream(table, rng, state, 1)
    assert _read(table) == state


@pytest.mark.parametrize("options", [
    {"bucket": "2", "changelog-producer": "lookup"},  # commits wait for the lookup compaction
    {"bucket": "2", "deletion-vectors.enabled": "true"},
    {"bucket": "2", "lookup-wait": "false"},  # nothing looks up: universal compaction, waited for
    {"bucket": "2", "changelog-producer": "input", "lookup-wait": "false"},
    {"bucket": "2", "changelog-producer": "full-compaction"},
    {"bucket": "-1"},
    {"bucket": "2", "write-only": "true"},
])
def test_writers_that_wait_or_route_keys_are_not_kept(tmp_path: Path, options: dict[str, str]) -> None:
    table = _table(tmp_path, **options)
    assert not resident_writers.lives_on(table.context, producers.for_table(table.context))
    rows = pa.table({"k": [1, 2], "v": ["a", "b"]})
    _land(table, _task(table, rows), 0)
    assert len(RESIDENT_WRITERS) == 0
    assert _read(table) == {1: "a", 2: "b"}


def test_evicted_writers_are_closed_beyond_the_capacity(tmp_path: Path) -> None:
    writers = resident_writers.ResidentWriters(capacity=1)
    first, second = _table(tmp_path / "a", **NO_WAIT), _table(tmp_path / "b", **NO_WAIT)
    ctx1, ctx2 = first.context, second.context
    w1 = resident_writers.TableWrite(ctx1, USER, changelog=producers.for_table(ctx1))
    writers.keep(w1)
    writers.keep(resident_writers.TableWrite(ctx2, USER, changelog=producers.for_table(ctx2)))
    assert len(writers) == 1 and writers.take(ctx1, USER) is None and writers.take(ctx2, USER) is not None
