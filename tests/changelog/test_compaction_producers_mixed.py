"""Producer ``lookup`` with mixed writers on shared keys (a long-lived writer, one-shot
``table.write()`` calls, ``table.compact()``, a ``write-only`` writer): every snapshot's
changelog is the diff of the table's states between the snapshots that carry changelog, and
folded from the first snapshot it is the table."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
State = dict[int, Any]


def _state(table: cl.Table, snapshot_id: int) -> State:
    return {r["k"]: r["v"] for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()}


def _rows(rng: random.Random) -> pa.Table:
    keys = [rng.randrange(20) for _ in range(rng.randint(1, 6))]
    kinds = [rng.choice(["+I", "+U", "-D"]) for _ in keys]
    return pa.table({"k": keys, "v": [rng.randrange(4) for _ in keys], "rowkind": kinds})


def test_mixed_writers_changelog_is_the_diff_of_table_states(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "2", "changelog-producer": "lookup", "changelog-producer.row-deduplicate": "true"})
    rng = random.Random(7)
    with table.writer(commit_user="long") as long_lived:
        for identifier in range(1, 16):
            choice = rng.random()
            if choice < 0.4:
                long_lived.write(_rows(rng))
                long_lived.commit(identifier)
            elif choice < 0.8:
                table.write(_rows(rng))
            else:
                table.compact(full=rng.random() < 0.5)
    previous: State = {}
    for snap in table.snapshots():
        if snap.changelog_manifest_list is None:
            continue
        now = _state(table, snap.id)
        changes = table.changes(snap.id - 1, snap.id).to_arrow().to_pylist()
        got = sorted(((r["rowkind"], r["k"], r["v"]) for r in changes), key=lambda r: r[1])
        want: list[Any] = []
        for k in sorted(set(previous) | set(now)):
            old, new = previous.get(k), now.get(k)
            if k not in previous and k in now:
                want.append(("+I", k, new))
            elif k in previous and k not in now:
                want.append(("-D", k, old))
            elif k in previous and old != new:
                want += [("-U", k, old), ("+U", k, new)]
        assert got == want, snap.id
        previous = now
    latest = table.latest_snapshot()
    assert latest is not None and previous == _state(table, latest.id)
