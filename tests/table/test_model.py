"""Model-based test: random sequences of write batches (inserts, updates, deletes, repeated keys)
against a dict, checked after every commit and at every earlier snapshot."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changelake as cl

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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(batches, min_size=1, max_size=6))
def test_writes_match_dict_model(steps: list[tuple[list[Row], bool, int]]) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        table = cl.Catalog(warehouse).create_table(
            "db.model", schema=SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"}
        )
        model: Model = {}
        history: list[Model] = []  # history[i]: the state snapshot i + 1 must show
        for step, (batch, with_kinds, split) in enumerate(steps, start=1):
            data = to_arrow(batch, with_kinds)
            if 0 < split < len(batch):
                writer = table.writer()
                writer.write(data.slice(0, split))
                writer.write(data.slice(split))
                landed = writer.commit(step)
                snap = landed[0] if landed else None
            else:
                snap = table.write(data)
            if batch:
                assert snap is not None and snap.id == len(history) + 1
                apply(model, batch)
                history.append(dict(model))
            else:
                assert snap is None
            latest = table.latest_snapshot()
            assert (latest.id if latest else 0) == len(history)

            assert as_model(table.scan().to_arrow()) == model
            day = DAYS[step % 2]
            chosen = table.scan(filter=pc.field("dt") == day).to_arrow()
            assert as_model(chosen) == {k: v for k, v in model.items() if k[0] == day}
            for snapshot_id, state in enumerate(history, start=1):
                assert as_model(table.scan(snapshot_id=snapshot_id).to_arrow()) == state

        # A fresh handle on the table agrees at every snapshot.
        reopened = cl.open_table(table.location)
        assert as_model(reopened.scan().to_arrow()) == model
        for snapshot_id, state in enumerate(history, start=1):
            assert as_model(reopened.scan(snapshot_id=snapshot_id).to_arrow()) == state
