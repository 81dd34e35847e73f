"""Without sequence.field, the commit that lands later wins, whoever wrote it: long-lived
writers, one-shot writes and compactions, in one process, in threads and in processes."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.read.live_files import live_entries

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
ENGINES = {
    "deduplicate": ({}, "w3"),
    "partial-update": ({}, "w3"),
    "aggregation": ({"fields.v.aggregate-function": "last_value"}, "w3"),
    "first-row": ({}, "w1"),  # the first row wins: the later commits lose by definition
}


def _create(tmp_path: Path, options: dict[str, str]) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options=options)


def _rows(keys: list[int], value: str) -> pa.Table:
    return pa.table({"k": keys, "v": [value] * len(keys)}, schema=SCHEMA)


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("race", [False, True], ids=["after", "racing"])
def test_long_lived_writer_wins_over_an_earlier_one_shot_write(
    tmp_path: Path, engine: str, race: bool, renumber_calls: list[bool]
) -> None:
    """The issue's repro. ``racing``: the writer's rows are numbered (a tiny buffer flushes
    them at write) before the one-shot write lands, so its commit must renumber them."""
    extra, expected = ENGINES[engine]
    options = {"merge-engine": engine, **extra, **({"write-buffer-size": "1 b"} if race else {})}
    table = _create(tmp_path, options)
    shifted = renumber_calls
    with table.writer(commit_user="job") as writer:
        writer.write(_rows([1], "w1"))
        writer.commit(identifier=1)
        # The one-shot write numbers key 1 second in its flush: above the racing writer's row.
        if race:
            writer.write(_rows([1], "w3"))
            table.write(_rows([0, 1], "tw2"))
        else:
            table.write(_rows([0, 1], "tw2"))
            writer.write(_rows([1], "w3"))
        landed = writer.commit(identifier=2)
    rows = table.scan().to_arrow().sort_by("k")
    assert rows.column("v").to_pylist()[-1] == expected
    assert any(shifted) is race
    assert landed[0].commit_kind is cl.CommitKind.APPEND
    # Nothing but what the snapshots reference is left in the bucket (copies replaced originals).
    referenced = {f.file_name for s in table.scan().plan() for f in s.files}
    on_disk = {p.name for p in Path(table.location).rglob("data-*.parquet")}
    assert referenced <= on_disk
    if race and engine == "deduplicate":
        assert table.scan(snapshot_id=landed[0].id).to_arrow().sort_by("k").column("v").to_pylist() == ["tw2", "w3"]


def test_sequence_field_still_decides(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string()),
                        pa.field("ts", pa.int64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"],
                                                   options={"sequence.field": "ts"})
    with table.writer(commit_user="job") as writer:
        writer.write(pa.table({"k": [1], "v": ["late-but-old"], "ts": [1]}, schema=schema))
        table.write(pa.table({"k": [1], "v": ["early-but-new"], "ts": [5]}, schema=schema))
        writer.commit(identifier=1)
    assert table.scan().to_arrow().column("v").to_pylist() == ["early-but-new"]


def _commit_many(table: cl.Table, who: str, rounds: int, keys: list[int], log: Any) -> None:
    """Long-lived writer (``who`` names it) or, for who == 'oneshot', one-shot writes; each
    commit writes every key with a value unique to the commit and logs (user, id) -> value."""
    if who == "oneshot":
        for i in range(rounds):
            value = f"{who}-{i}"
            snap = table.write(_rows(keys, value))
            assert snap is not None
            log.put((snap.commit_user, snap.commit_identifier, value))
        return
    with table.writer(commit_user=who) as writer:
        for i in range(1, rounds + 1):
            value = f"{who}-{i}"
            writer.write(_rows(keys, value))
            if writer.commit(identifier=i):
                log.put((who, i, value))


def _check_every_snapshot(table: cl.Table, log: list[tuple[str, int, str]], keys: list[int], *,
                          first_row: bool = False) -> None:
    values = {(user, ident): value for user, ident, value in log}
    model: dict[int, str] = {}
    appended = 0
    for snap in table.snapshots():
        if snap.commit_kind is cl.CommitKind.APPEND:
            value = values[(snap.commit_user, snap.commit_identifier)]
            for key in keys:
                model[key] = model.get(key, value) if first_row else value
            appended += 1
        rows = table.scan(snapshot_id=snap.id).to_arrow()
        if first_row and any(e.file.level == 0 for e in live_entries(table.context, snap)):
            # a batch scan skips level 0 of first-row tables (as Paimon's): a stream's full read
            # merges it
            stream = table.stream(mode="from-snapshot-full", snapshot_id=snap.id)
            rows = pa.concat_tables([b.data for b in stream if b.kind is cl.ChangeKind.FULL])
        assert dict(zip(rows.column("k").to_pylist(), rows.column("v").to_pylist(), strict=True)) == model, \
            f"snapshot {snap.id} is not the later-commit-wins model"
    assert appended == len(log), "a commit was lost"


@pytest.mark.parametrize("options", [{}, {"write-buffer-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}],
                         ids=["default", "tiny-buffer"])
def test_writers_in_threads_later_commit_wins(tmp_path: Path, options: dict[str, str]) -> None:
    table = _create(tmp_path, {"bucket": "2", **options})
    keys = list(range(40))
    log: Any = __import__("queue").Queue()
    threads = [threading.Thread(target=_commit_many, args=(table, who, 8, keys, log))
               for who in ("writer-a", "writer-b", "oneshot")]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        # A writer's compaction may remove our inputs first: ours is then void, nothing lost.
        with contextlib.suppress(cl.errors.CommitConflictError):
            table.compact()
    for t in threads:
        t.join()
    entries = []
    while not log.empty():
        entries.append(log.get())
    assert len(entries) == 24
    _check_every_snapshot(table, entries, keys)


def test_writers_in_processes_later_commit_wins(tmp_path: Path) -> None:
    table = _create(tmp_path, {"bucket": "2", "write-buffer-size": "4 kb"})
    keys = list(range(30))
    context = multiprocessing.get_context("spawn")
    log = context.Queue()
    procs = [context.Process(target=_commit_many, args=(table, who, 6, keys, log))
             for who in ("writer-a", "writer-b", "oneshot")]
    for p in procs:
        p.start()
    entries = [log.get(timeout=120) for _ in range(18)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    _check_every_snapshot(table, entries, keys)


def test_first_row_writers_in_threads_leave_no_level0(tmp_path: Path) -> None:
    """Concurrent first-row writers void each other's compactions; each then compacts the
    level-0 files it committed up again, so the table ends without level 0."""
    table = _create(tmp_path, {"bucket": "2", "merge-engine": "first-row"})
    keys = list(range(40))
    log: Any = __import__("queue").Queue()
    threads = [threading.Thread(target=_commit_many, args=(table, who, 6, keys, log))
               for who in ("writer-a", "writer-b", "oneshot")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = []
    while not log.empty():
        entries.append(log.get())
    assert len(entries) == 18
    final = table.latest_snapshot()
    assert final is not None
    assert 0 not in {e.file.level for e in live_entries(table.context, final)}
    _check_every_snapshot(table, entries, keys, first_row=True)


@pytest.mark.parametrize(("options", "expected_b1"), [
    ({"merge-engine": "first-row"}, "oneshot"),  # the first row wins: the earlier commit's
    ({"deletion-vectors.enabled": "true"}, "writer"),
], ids=["first-row", "deletion-vectors"])
def test_a_commit_renumbered_in_one_bucket_moves_that_bucket_level0_up_too(
        tmp_path: Path, options: dict[str, str], expected_b1: str, renumber_calls: list[bool]) -> None:
    """The writer's rows are numbered (a tiny buffer flushes them at write) before a one-shot
    write lands in partition b only: the commit renumbers its rows in b, which voids its
    compaction there, while its compaction of a lands. Level 0 of b goes up all the same:
    batch scans of such tables skip level 0, and would not show the writer's rows in b."""
    schema = pa.schema([pa.field("p", pa.string(), nullable=False), *SCHEMA])
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", schema, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "1", "write-buffer-size": "1 b", **options})

    def rows(partition: str, keys: list[int], value: str) -> pa.Table:
        return pa.table({"p": [partition] * len(keys), "k": keys, "v": [value] * len(keys)}, schema=schema)

    with table.writer(commit_user="job") as writer:
        writer.write(pa.concat_tables([rows("a", [1, 2], "writer"), rows("b", [1, 2], "writer")]))
        table.write(rows("b", [1], "oneshot"))
        landed = writer.commit(identifier=1)
    assert renumber_calls[-1], "the writer's commit did not renumber"
    assert [s.commit_kind for s in landed] == [cl.CommitKind.APPEND, cl.CommitKind.COMPACT]
    got = {(r["p"], r["k"]): r["v"] for r in table.scan().to_arrow().to_pylist()}
    assert got == {("a", 1): "writer", ("a", 2): "writer", ("b", 1): expected_b1, ("b", 2): "writer"}
    final = table.latest_snapshot()
    assert final is not None
    assert 0 not in {e.file.level for e in live_entries(table.context, final)}
