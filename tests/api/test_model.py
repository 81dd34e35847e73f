"""Model-based tests: random sequences of write batches (inserts, updates, deletes, repeated keys)
and compactions against a dict, checked after every step and at every earlier snapshot.

A commit lands as an APPEND snapshot and, when the writer compacted, a COMPACT snapshot; a
COMPACT snapshot shows the same rows as the snapshot before it.
"""

from __future__ import annotations

import itertools
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changelake as cl
from changelake.table.read.live_files import live_entries

DAYS = ["2024-01-01", "2024-01-02"]
KINDS = ["+I", "+U", "-U", "-D"]
SCHEMA = pa.schema([
    pa.field("dt", pa.string(), nullable=False),
    pa.field("id", pa.int64(), nullable=False),
    pa.field("v", pa.int64()),
    pa.field("s", pa.string()),
])

Key = tuple[str, int]
Value = tuple[int | None, str | None]
Model = dict[Key, Value]
Row = tuple[str, int, int | None, str | None, str]

rows = st.tuples(
    st.sampled_from(DAYS),
    st.integers(0, 4),
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3)),
    st.sampled_from([None, "", "x", "more than seven bytes"]),
    st.sampled_from(KINDS),
)
# A batch: its rows, whether to send the rowkind column when every row is +I, and where to
# split it into two writer.write() calls of one commit (0: one write through table.write).
batches = st.tuples(st.lists(rows, max_size=10), st.booleans(), st.integers(0, 10))


def apply(model: Model, batch: list[Row]) -> None:
    """What one commit does: the last row of every key in the batch wins; -U/-D delete."""
    for dt, id_, v, s, kind in batch:
        if kind in ("+I", "+U"):
            model[(dt, id_)] = (v, s)
        else:
            model.pop((dt, id_), None)


def to_arrow(batch: list[Row], with_kinds: bool) -> pa.Table:
    columns: dict[str, Any] = {
        "dt": pa.array([r[0] for r in batch], pa.string()),
        "id": pa.array([r[1] for r in batch], pa.int64()),
        "v": pa.array([r[2] for r in batch], pa.int64()),
        "s": pa.array([r[3] for r in batch], pa.string()),
    }
    if with_kinds or any(r[4] != "+I" for r in batch):
        columns["rowkind"] = pa.array([r[4] for r in batch], pa.string())
    return pa.table(columns)


def as_model(result: pa.Table) -> Model:
    assert result.schema == SCHEMA
    out: Model = {}
    for r in result.to_pylist():
        key = (r["dt"], r["id"])
        assert key not in out, f"key {key} read twice"
        out[key] = (r["v"], r["s"])
    return out


def landed_since(table: cl.Table, before: int) -> list[cl.Snapshot]:
    """The snapshots after id ``before``: what one commit landed, an APPEND snapshot then at
    most one COMPACT snapshot of the same commit (or nothing)."""
    latest = table.latest_snapshot()
    landed = [table.snapshot(i) for i in range(before + 1, (latest.id if latest else 0) + 1)]
    assert len(landed) <= 2
    if landed:
        first = landed[0]
        assert first.commit_kind == "APPEND"
        for later in landed[1:]:
            assert later.commit_kind == "COMPACT"
            assert (later.commit_user, later.commit_identifier) == (first.commit_user, first.commit_identifier)
    return landed


def check_snapshots(table: cl.Table, model: Model, history: dict[int, Model], step: int) -> None:
    """The latest snapshot shows ``model`` (also through a partition filter) and every
    snapshot shows the state saved for it."""
    assert as_model(table.scan().to_arrow()) == model
    day = DAYS[step % 2]
    chosen = table.scan(filter=pc.field("dt") == day).to_arrow()
    assert as_model(chosen) == {k: v for k, v in model.items() if k[0] == day}
    latest = table.latest_snapshot()
    assert (latest.id if latest else 0) == len(history)
    for snapshot_id, state in history.items():
        assert as_model(table.scan(snapshot_id=snapshot_id).to_arrow()) == state, f"snapshot {snapshot_id}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(batches, min_size=1, max_size=6))
def test_writes_match_dict_model(steps: list[tuple[list[Row], bool, int]]) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        table = cl.Catalog(warehouse).create_table(
            "db.model", schema=SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"}
        )
        model: Model = {}
        history: dict[int, Model] = {}  # snapshot id -> the state it must show
        for step, (batch, with_kinds, split) in enumerate(steps, start=1):
            data = to_arrow(batch, with_kinds)
            before = len(history)
            if 0 < split < len(batch):
                writer = table.writer()
                writer.write(data.slice(0, split))
                writer.write(data.slice(split))
                returned = writer.commit(step)
                snap = returned[0] if returned else None
            else:
                snap = table.write(data)
                returned = [snap] if snap is not None else []
            landed = landed_since(table, before)
            assert [s.id for s in returned] == [s.id for s in landed][: len(returned)]
            if batch:
                assert snap is not None and snap.id == before + 1 and snap.commit_kind == "APPEND"
                apply(model, batch)
                for landed_snapshot in landed:
                    history[landed_snapshot.id] = dict(model)
            else:
                assert snap is None and not landed
            check_snapshots(table, model, history, step)

        # A fresh handle on the table agrees at every snapshot.
        reopened = cl.open_table(table.location)
        assert as_model(reopened.scan().to_arrow()) == model
        for snapshot_id, state in history.items():
            assert as_model(reopened.scan(snapshot_id=snapshot_id).to_arrow()) == state


# -- compaction ----------------------------------------------------------------------------

COMPACTION_OPTIONS = {"bucket": "2", "target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}
NUM_LEVELS = 3  # num-levels defaults to num-sorted-run.compaction-trigger + 1

# A run of rows: (day, first id, count, id stride, kind, first v, s); ids go past the few keys
# of single rows so that batches are big enough for files to roll at the target file size.
row_runs = st.tuples(
    st.sampled_from(DAYS), st.integers(0, 200), st.integers(1, 100), st.sampled_from([1, 2, 3]),
    st.sampled_from(KINDS), st.integers(-5, 5), st.sampled_from([None, "", "x", "more than seven bytes"]),
)
write_steps = st.tuples(st.just("write"), st.lists(row_runs, max_size=3), st.lists(rows, max_size=5))
compact_steps = st.tuples(st.just("compact"), st.booleans(), st.sampled_from([None, *DAYS]))


def expand(runs: list[tuple[str, int, int, int, str, int, str | None]], singles: list[Row]) -> list[Row]:
    batch: list[Row] = []
    for day, first, count, stride, kind, v, s in runs:
        batch += [(day, first + i * stride, v + i, s, kind) for i in range(count)]
    return batch + singles


def check_lsm(table: cl.Table, full_days: set[str]) -> None:
    """LSM invariants of the latest snapshot: levels in range; within every (partition,
    bucket) each level >= 1 is one sorted run (files' key ranges do not overlap); the record
    count is that of the live files; a bucket fully compacted (of a day in ``full_days``)
    has all its files in the top level, without delete rows."""
    latest = table.latest_snapshot()
    if latest is None:
        return
    entries = live_entries(table.context, latest)
    assert latest.total_record_count == sum(e.file.row_count for e in entries)
    by_bucket: dict[tuple[bytes, int], list[Any]] = {}
    for e in entries:
        by_bucket.setdefault((e.partition, e.bucket), []).append(e.file)
        assert 0 <= e.file.level < NUM_LEVELS
        assert e.file.row_count > 0
        assert table.context.key_of(e.file.min_key) <= table.context.key_of(e.file.max_key)
        assert e.file.min_sequence_number <= e.file.max_sequence_number
    for (partition, bucket), files in by_bucket.items():
        for level in range(1, NUM_LEVELS):
            run = sorted((f for f in files if f.level == level), key=lambda f: table.context.key_of(f.min_key))
            for left, right in itertools.pairwise(run):
                assert table.context.key_of(left.max_key) < table.context.key_of(right.min_key), (
                    f"bucket {bucket}: level {level} files {left.file_name} and {right.file_name} overlap"
                )
        if table.context.partition_values(partition)[0] in full_days:
            assert {f.level for f in files} == {NUM_LEVELS - 1}, f"bucket {bucket} after a full compaction"
            assert all(f.delete_row_count == 0 for f in files)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(write_steps, write_steps, compact_steps), min_size=1, max_size=10))
def test_compaction_matches_dict_model(steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        table = cl.Catalog(warehouse).create_table(
            "db.model", schema=SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options=COMPACTION_OPTIONS,
        )
        model: Model = {}
        history: dict[int, Model] = {}  # snapshot id -> the state it must show
        for step, (action, *args) in enumerate(steps, start=1):
            before = len(history)
            full_days: set[str] = set()
            if action == "write":
                batch = expand(*args)
                snap = table.write(to_arrow(batch, with_kinds=False))
                landed = landed_since(table, before)
                assert (snap.id if snap else None) == (landed[0].id if landed else None)
                assert bool(landed) == bool(batch)
                apply(model, batch)
            else:
                full, day = args
                snap = table.compact(full=full, partitions=None if day is None else [{"dt": day}])
                latest = table.latest_snapshot()
                if snap is None:
                    assert (latest.id if latest else 0) == before
                    landed = []
                else:
                    assert snap.commit_kind == "COMPACT" and snap.id == before + 1
                    assert latest is not None and latest.id == snap.id
                    landed = [snap]
                if full:
                    full_days = set(DAYS) if day is None else {day}
            for landed_snapshot in landed:
                history[landed_snapshot.id] = dict(model)
            check_snapshots(table, model, history, step)
            check_lsm(table, full_days)
