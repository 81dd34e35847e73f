"""Cross-partition upsert: a primary key without every partition column (``bucket = -1``). A key
lives in one partition; a row of it in another partition moves it (deduplicate), goes to its
old partition (partial-update, aggregation) or is dropped (first-row), as Paimon's
``GlobalIndexAssigner``; new writers bootstrap the key index from the table; the index spills to
local disk; a writer whose index another writer's commit made stale lands nothing; bad
definitions and impossible moves are refused."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors
from changelake.api.writer import open_write
from changelake.changelog import producers
from changelake.table.context import TableContext
from changelake.table.format.manifest import ManifestEntry
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read.live_files import live_entries
from changelake.table.write import landing
from changelake.table.write.assigners import key_places
from changelake.table.write.assigners.key_index import KeyIndex, Run, fingerprints

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False),
                    pa.field("v", pa.int64())])
ENGINES: dict[str, dict[str, str]] = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
    "first-row": {"merge-engine": "first-row", "changelog-producer": "lookup"},
}
# Where the model is the same: other changelog producers and deletion vectors.
CASES = {**{name: (name, options) for name, options in ENGINES.items()},
         "deduplicate-lookup": ("deduplicate", {"changelog-producer": "lookup"}),
         "deduplicate-vectors": ("deduplicate", {"deletion-vectors.enabled": "true"}),
         "partial-update-full-compaction": ("partial-update", {"merge-engine": "partial-update",
                                                               "changelog-producer": "full-compaction"})}
Model = dict[int, tuple[str, int | None]]


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"],
                                                  options={"dynamic-bucket.target-row-num": "7", **options})


def _rows(rows: list[tuple[int, str, int | None, str]]) -> pa.Table:
    ids, dts, vs, kinds = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table({"id": pa.array(ids, pa.int64()), "dt": pa.array(dts, pa.string()),
                     "v": pa.array(vs, pa.int64()), "rowkind": pa.array(kinds, pa.string())})


def apply(model: Model, rows: list[tuple[int, str, int | None, str]], engine: str) -> None:
    """Paimon's semantics, one row at a time."""
    for key, dt_, v, kind in rows:
        if engine == "deduplicate":
            if kind == "-D":
                model.pop(key, None)
            else:
                model[key] = (dt_, v)
        elif key not in model:
            model[key] = (dt_, v)
        elif engine == "partial-update":
            model[key] = (model[key][0], v if v is not None else model[key][1])
        elif engine == "aggregation":
            old = model[key][1]
            model[key] = (model[key][0], v if old is None else old if v is None else old + v)


def read(table: cl.Table) -> Model:
    rows = table.scan().to_arrow().to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "a key is live in two partitions"
    return {r["id"]: (r["dt"], r["v"]) for r in rows}


def assert_one_place(table: cl.Table) -> None:
    """No key is live in two partitions' files of the latest snapshot: in each bucket, a key's
    newest row (by sequence number) is a retraction everywhere but in one partition."""
    ctx = table.context
    latest = ctx.latest_snapshot()
    assert latest is not None
    if ctx.options.deletion_vectors_enabled:
        return  # a replaced row is marked in a vector, not retracted in a file: read() checks the keys
    newest: dict[tuple[int, bytes, int], tuple[int, int]] = {}
    for e in live_entries(ctx, latest):
        rows = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file,
                             [*ctx.key_columns, "_SEQUENCE_NUMBER", "_VALUE_KIND"])
        for key, seq, kind in zip(*(c.to_pylist() for c in rows.columns), strict=True):
            place = (key, e.partition, e.bucket)
            if place not in newest or newest[place][0] < seq:
                newest[place] = (seq, kind)
    live: dict[int, set[bytes]] = {}
    for (key, partition, _), (_, kind) in newest.items():
        if kind in (0, 2):
            live.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in live.values()), {k: p for k, p in live.items() if len(p) > 1}
    assert set(live) == set(read(table))


def _batch(rng: random.Random, step: int, engine: str) -> list[tuple[int, str, int | None, str]]:
    rows = []
    for _ in range(40):
        key = rng.randrange(60)
        dt_ = rng.choice("abc")
        v = None if engine == "partial-update" and rng.random() < 0.2 else rng.randrange(100)
        kind = "-D" if engine == "deduplicate" and rng.random() < 0.1 else "+I"
        rows.append((key, dt_, v, kind))
    return rows


@pytest.mark.parametrize("case", list(CASES))
def test_keys_move_stay_or_are_dropped_by_merge_engine_as_the_model(tmp_path: Path, case: str) -> None:
    """Batches of keys in random partitions (a key often twice in one batch, in two partitions),
    through one-shot writes, a long-lived writer, and fresh writers that bootstrap the key index
    from the table (the process cache cleared); after every commit the table is the model."""
    engine, options = CASES[case]
    table = _table(tmp_path, **options)
    rng = random.Random(case)
    model: Model = {}
    key = (table.context.file_io.protocol, table.context.paths)
    with table.writer() as long_lived:
        for step in range(12):
            rows = _batch(rng, step, engine)
            if step % 3 == 0:
                table.write(_rows(rows))
            elif step % 3 == 1:
                long_lived.write(_rows(rows[:20]))
                long_lived.write(_rows(rows[20:]))
                assert long_lived.commit(step)
            elif step % 6 == 2:
                key_places.COMMITTED.clear()  # as in another process: bootstrapped from the files
                cl.open_table(table.location).write(_rows(rows))
                old = key_places.COMMITTED.peek(key)
            else:
                # As a Spark task of a later micro-batch: the index its process held some
                # commits ago, caught up with the rows landed since.
                key_places.COMMITTED.put(key, old)
                cl.open_table(table.location).write(_rows(rows))
            apply(model, rows, engine)
            assert read(table) == model, f"step {step}"
    assert_one_place(table)
    assert len({dt_ for dt_, _ in model.values()}) == 3


def test_a_caught_up_index_places_keys_as_a_bootstrapped_one(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-buffer-size": "1 kb"})  # several level-0 files a commit
    rng = random.Random(7)
    table.write(_rows(_batch(rng, 0, "deduplicate")))
    key = (table.context.file_io.protocol, table.context.paths)
    old = key_places.COMMITTED.peek(key)
    for step in range(1, 6):
        table.write(_rows(_batch(rng, step, "deduplicate")))
    table.compact(full=True)
    latest = table.latest_snapshot()
    assert latest is not None
    key_places.COMMITTED.put(key, old)
    caught_up = key_places.load(table.context)
    key_places.COMMITTED.clear()
    bootstrapped = key_places.load(table.context)
    keys = pa.array(range(60), pa.int64())
    hi, lo = fingerprints([keys])
    live = read(table)
    for state in (caught_up, bootstrapped):
        assert state.base == latest.id
        places = state.index.lookup(hi, lo, 0)
        for k, code in enumerate(places.tolist()):
            if k in live:
                assert table.context.partition_values(state.partitions[code >> 16]) == (live[k][0],)


def test_a_move_is_a_delete_in_the_old_partition_and_an_insert_in_the_new(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"changelog-producer": "input"})
    first = table.write(_rows([(1, "a", 1, "+I"), (2, "a", 2, "+I")]))
    assert first is not None
    moved = table.write(_rows([(1, "b", 10, "+I"), (2, "a", 20, "+I")]))
    assert moved is not None
    changes = table.changes(first.id, moved.id).to_arrow().to_pylist()
    assert sorted((c["rowkind"], c["id"], c["dt"], c["v"]) for c in changes) == [
        ("+I", 1, "b", 10), ("+I", 2, "a", 20), ("-D", 1, "a", 10)]
    assert read(table) == {1: ("b", 10), 2: ("a", 20)}


def test_new_keys_fill_buckets_up_to_the_target_and_freed_places_are_reused(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows([(k, "a", k, "+I") for k in range(20)]))
    counts = _bucket_rows(table)
    assert counts == {("a", 0): 7, ("a", 1): 7, ("a", 2): 6}
    table.write(_rows([(k, "b", k, "+I") for k in range(3)]))  # three keys leave bucket 0 of a
    table.write(_rows([(k, "a", k, "+I") for k in range(100, 104)]))  # bucket 0 has room again, then 2
    key_places.COMMITTED.clear()
    table.write(_rows([(k, "a", k, "+I") for k in range(200, 202)]))  # counted from the files alike
    ids = _ids_by_bucket(table)
    assert {100, 101, 102} <= ids[("a", 0)] and 103 in ids[("a", 2)]
    assert ids[("a", 3)] == {200, 201}


def _ids_by_bucket(table: cl.Table) -> dict[tuple[str, int], set[int]]:
    ctx = table.context
    found: dict[tuple[str, int], set[int]] = {}
    live = read(table)
    for e in live_entries(ctx, ctx.latest_snapshot()):  # type: ignore[arg-type]
        ids = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file, ctx.key_columns).column(0).to_pylist()
        dt_ = ctx.partition_values(e.partition)[0]
        found.setdefault((dt_, e.bucket), set()).update(i for i in ids if live.get(i, ("", 0))[0] == dt_)
    return found


def _bucket_rows(table: cl.Table) -> dict[tuple[str, int], int]:
    return {place: len(ids) for place, ids in _ids_by_bucket(table).items()}


def _many(keys: range, dt_: str, v: int) -> pa.Table:
    return _rows([(k, dt_, v, "+I") for k in keys])


def test_a_writer_whose_keys_another_writer_changed_meanwhile_conflicts_and_lands_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-buffer-size": "1 kb"})  # every write flushes: keys placed then
    table.write(_many(range(200), "a", 0))
    with table.writer() as one, table.writer() as two:
        one.write(_many(range(0, 200, 2), "b", 1))
        two.write(_many(range(0, 200, 3), "c", 2))  # both placed their keys by the same index
        assert one.commit(1)
        before = table.latest_snapshot()
        with pytest.raises(errors.CommitConflictError, match="placed its keys"):
            two.commit(1)
        assert table.latest_snapshot() == before
        two.write(_many(range(0, 200, 3), "c", 2))  # written again, from the table as it is now
        assert two.commit(2)
        assert table.compact(full=True) is not None  # a compaction moves no key: no conflict after it
        one.write(_many(range(0, 200, 5), "d", 3))
        assert one.commit(2)
    want = {k: ("d", 3) if k % 5 == 0 else ("c", 2) if k % 3 == 0 else ("b", 1) if k % 2 == 0 else ("a", 0)
            for k in range(200)}
    assert read(table) == want
    assert_one_place(table)


def test_keys_move_into_and_out_of_the_null_partition(tmp_path: Path) -> None:
    nullable = SCHEMA.set(1, pa.field("dt", pa.string()))
    table = cl.Catalog(str(tmp_path)).create_table("db.t", nullable, primary_keys=["id"], partition_keys=["dt"])
    nulls = pa.table({"id": pa.array([1, 2], pa.int64()), "dt": pa.array([None, "a"], pa.string()),
                      "v": pa.array([1, 2], pa.int64())})
    table.write(nulls)
    assert read(table) == {1: (None, 1), 2: ("a", 2)}  # type: ignore[dict-item]
    table.write(_rows([(1, "b", 3, "+I")]))
    table.write(pa.table({"id": pa.array([2], pa.int64()), "dt": pa.array([None], pa.string()),
                          "v": pa.array([4], pa.int64())}))
    assert read(table) == {1: ("b", 3), 2: (None, 4)}  # type: ignore[dict-item]
    assert "dt=__DEFAULT_PARTITION__" in os.listdir(table.location)
    assert_one_place(table)


def test_a_writer_with_nothing_pending_picks_up_other_writers_keys(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.writer() as writer:
        writer.write(_rows([(1, "a", 1, "+I")]))
        assert writer.commit(1)
        table.write(_rows([(2, "a", 2, "+I")]))  # another writer's rows: the index is stale
        writer.write(_rows([(2, "b", 3, "+I"), (1, "c", 4, "+I")]))
        assert writer.commit(2)
    assert read(table) == {1: ("c", 4), 2: ("b", 3)}
    assert_one_place(table)


def test_the_key_index_spills_to_local_disk_past_its_memory(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"lookup.cache-max-memory-size": "2 kb", "dynamic-bucket.target-row-num": "1000"})
    model: Model = {}
    with table.writer() as writer:
        for step in range(4):
            rows = [(k, "ab"[(k + step) % 2], step, "+I") for k in range(step * 100, step * 100 + 300)]
            writer.write(_rows(rows))
            assert writer.commit(step)
            apply(model, rows, "deduplicate")
        index = writer._write._assigner._state.index  # type: ignore[attr-defined]
        assert any(run.on_disk for run in index.runs) and index.nbytes <= 2048
    assert read(table) == model


def test_index_ttl_forgets_keys_of_old_files(tmp_path: Path) -> None:
    """Paimon's ``cross-partition-upsert.index-ttl``: the bootstrap skips buckets whose files are
    all older, so their keys are new to the writer (and may then live in two partitions)."""
    table = _table(tmp_path, **{"cross-partition-upsert.index-ttl": "1 ms"})
    table.write(_rows([(1, "a", 1, "+I")]))
    key_places.COMMITTED.clear()
    table.write(_rows([(1, "b", 2, "+I")]))
    assert sorted((r["id"], r["dt"]) for r in table.scan().to_arrow().to_pylist()) == [(1, "a"), (1, "b")]


def test_bootstrap_reads_every_partition_with_small_parallelism(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"cross-partition-upsert.bootstrap-parallelism": "1"})
    table.write(_rows([(k, "abc"[k % 3], k, "+I") for k in range(30)]))
    key_places.COMMITTED.clear()
    table.write(_rows([(k, "d", -k, "+I") for k in range(0, 30, 2)]))
    live = read(table)
    assert {k for k, (dt_, _) in live.items() if dt_ == "d"} == set(range(0, 30, 2)) and len(live) == 30


def test_cross_partition_tables_need_dynamic_buckets_and_no_sequence_field(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    for options, option in (({"bucket": "2"}, "bucket"), ({"bucket": "-2"}, "bucket"),
                            ({"sequence.field": "v"}, "sequence.field")):
        with pytest.raises(errors.OptionError, match="lack the partition keys") as info:
            catalog.create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"], options=options)
        assert f"'{option}'" in str(info.value) and "db.t" in str(info.value)
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"])
    assert table.context.options.bucket == -1 and table.context.cross_partition
    with pytest.raises(errors.OptionError, match="'bucket'"):
        table.set_options({"bucket": "4"})


def test_a_move_that_ignore_delete_would_lose_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"ignore-delete": "true"})
    table.write(_rows([(1, "a", 1, "+I")]))
    before = table.latest_snapshot()
    with pytest.raises(errors.DataError, match=r"key \{'id': 1\} would move to .*dt=b.*ignore-delete") as info:
        table.write(_rows([(2, "a", 2, "+I"), (1, "b", 2, "+I")]))
    assert "db.t" in str(info.value)
    assert table.latest_snapshot() == before
    table.write(_rows([(1, "a", 3, "+I")]))  # in its own partition: fine
    assert read(table) == {1: ("a", 3)}


def test_a_key_live_in_two_partitions_is_named_at_bootstrap(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"cross-partition-upsert.index-ttl": "1 ms"})
    table.write(_rows([(1, "a", 1, "+I")]))
    key_places.COMMITTED.clear()
    table.write(_rows([(1, "b", 2, "+I")]))  # the index forgot key 1: now in two partitions
    key_places.COMMITTED.clear()
    broken = cl.Catalog(str(tmp_path)).get_table("db.t")
    broken.reset_options(["cross-partition-upsert.index-ttl"])
    before = broken.latest_snapshot()
    with pytest.raises(errors.DataError, match=r"live in partition \{dt=a\} bucket 0 and in partition "
                                               r"\{dt=b\} bucket 0 of snapshot 2: two writers"):
        broken.write(_rows([(3, "a", 3, "+I")]))
    assert broken.latest_snapshot() == before


def test_key_index_finds_entries_whose_first_halves_collide() -> None:
    hi = np.array([5, 5, 5, 9], dtype=np.uint64)
    lo = np.array([1, 2, 3, 1], dtype=np.uint64)
    run = Run.of(hi, lo, np.array([10, 20, 30, 40]), None)
    assert run.find(np.array([5, 5, 9, 5], np.uint64), np.array([3, 2, 1, 4], np.uint64)).tolist() == [2, 1, 3, -1]
    index = KeyIndex(memory_budget=1 << 20, ttl_ms=None, runs=[run])
    index.put(np.array([5], np.uint64), np.array([2], np.uint64), np.array([99]), 0)  # newer wins
    assert index.lookup(hi, lo, 0).tolist() == [10, 99, 30, 40]


def test_fingerprints_tell_apart_keys_that_share_a_bucket_hash() -> None:
    keys = pa.array([f"key-{i}" for i in range(200_000)])
    hi, lo = fingerprints([keys])
    assert len(set(zip(hi.tolist(), lo.tolist(), strict=True))) == len(keys)
    again = fingerprints([keys.slice(10, 5)])
    assert again[0].tolist() == hi[10:15].tolist() and again[1].tolist() == lo[10:15].tolist()


def test_the_next_task_in_a_process_takes_the_keys_a_task_placed_once_its_files_land(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Spark runs the sink: tasks place and prepare (they never learn whether the driver
    landed their files), the driver commits; the next task in the same worker starts from the
    keys its predecessor placed, reading only other tasks' files of that commit, and a prepared
    placement whose files never land is not used."""
    table = _table(tmp_path, **{"changelog-producer": "lookup"})
    ctx = table.context
    changelog = producers.for_table(ctx)
    read_back: list[set[str]] = []
    real_apply = key_places._apply

    def counted(ctx_: TableContext, state: key_places.KeyPlaces, files: list[tuple[int, ManifestEntry]]) -> None:
        read_back.append({e.file.file_name for _, e in files})
        real_apply(ctx_, state, files)

    monkeypatch.setattr(key_places, "_apply", counted)

    def tasks_then_driver(batches: list[list[tuple[int, str, int | None, str]]], identifier: int, *,
                          lands: bool = True) -> list[set[str]]:
        """Each task's new data files."""
        messages, written = [], []
        for rows in batches:
            with open_write(ctx, "spark-job", one_shot=True) as write:
                write.write(_rows(rows))
                prepared = write.prepare()
            messages += prepared
            written.append({f.file_name for m in prepared for f in m.new_files})
        if lands:
            landing.land(ctx, changelog, messages, "spark-job", identifier, view=None)
        return written

    rng = random.Random(3)
    model: Model = {}
    for identifier in range(1, 6):
        rows = _batch(rng, identifier, "deduplicate")
        tasks_then_driver([rows], identifier)
        apply(model, rows, "deduplicate")
    assert read_back == []  # each task started from its predecessor's placements
    tasks_then_driver([_batch(rng, 0, "deduplicate")], 6, lands=False)  # the batch failed
    # Two tasks of one commit (disjoint keys): the next takes the last one's placements and
    # reads the other's files.
    first = [r for r in _batch(rng, 6, "deduplicate") if r[0] % 2 == 0]
    second = [r for r in _batch(rng, 7, "deduplicate") if r[0] % 2 == 1]
    written = tasks_then_driver([first, second], 6)
    apply(model, first + second, "deduplicate")
    rows = _batch(rng, 8, "deduplicate")
    tasks_then_driver([rows], 7)
    apply(model, rows, "deduplicate")
    assert read_back == [written[0]]
    assert read(table) == model
    assert_one_place(table)



@pytest.mark.parametrize("next_writer", ["the same writer", "the next writer of the process"])
def test_a_writer_learns_of_keys_another_writer_moved_between_its_append_and_its_compaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, next_writer: str) -> None:
    """Another writer's commit lands between a writer's APPEND snapshot and its COMPACT snapshot
    (a compaction moves no key, but the rows in between may): the writer's key index, and the
    one its process keeps for the next writer, stay as of its APPEND, so the next rows of a key
    the other writer moved retract it where it went instead of writing it in its old partition."""
    table = _table(tmp_path, **{"full-compaction.delta-commits": "1"})  # every commit compacts
    table.write(_many(range(10), "a", 0))  # keys 0-6 in bucket 0, 7-9 in bucket 1
    real_reached = killpoints.reached
    moved: list[cl.Snapshot | None] = []

    def other_writer_between(point: KillPoint, **kwargs: Any) -> None:
        if point is KillPoint.BEFORE_COMPACT_SNAPSHOT and not moved:
            moved.append(None)  # once: the other writer's own commit passes here too
            moved[0] = cl.open_table(table.location).write(_rows([(9, "b", 1, "+I")]))
        real_reached(point, **kwargs)

    monkeypatch.setattr(killpoints, "reached", other_writer_between)
    with table.writer(commit_user="one") as writer:
        writer.write(_rows([(2, "a", 2, "+I")]))  # compacts bucket 0, which the other writer leaves
        landed = writer.commit(1)
        assert [s.commit_kind for s in landed] == [cl.CommitKind.APPEND, cl.CommitKind.COMPACT]
        assert moved[0] is not None and moved[0].id == landed[0].id + 1  # key 9 moved to "b" in between
        back = _rows([(9, "a", 3, "+I")])  # moves key 9 back, retracting it in "b"
        if next_writer == "the same writer":
            writer.write(back)
            assert writer.commit(2)
        else:
            assert table.write(back) is not None
    want: Model = {k: ("a", 0) for k in range(10)} | {2: ("a", 2), 9: ("a", 3)}
    assert read(table) == want
    assert_one_place(table)
