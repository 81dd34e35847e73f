"""Change reads with ``commit_metadata``: each row carries the snapshot its change was committed
in and that snapshot's commit time, in ``changes()`` and in streams (a full read: the snapshot
it read); without the flag nothing is added."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

import changelake as cl

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def test_changes_and_streams_carry_their_commit(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"],
                                                   options={"bucket": "1", "changelog-producer": "input"})
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    table.write(pa.table({"id": [2], "v": ["c"], "rowkind": ["+U"]}))
    table.write(pa.table({"id": [1], "v": ["a"], "rowkind": ["-D"]}))
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    times = {s.id: dt.datetime.fromtimestamp(s.time_millis / 1000, dt.UTC) for s in appends}

    changes = table.changes(0, appends[-1].id, commit_metadata=True).to_arrow()
    assert changes.schema.names == ["rowkind", "id", "v", "_commit_snapshot", "_commit_timestamp"]
    got = [(r["rowkind"], r["id"], r["_commit_snapshot"], r["_commit_timestamp"]) for r in changes.to_pylist()]
    want_snapshots = [appends[0].id, appends[0].id, appends[1].id, appends[2].id]
    assert got == [(k, i, s, times[s]) for (k, i), s in zip([("+I", 1), ("+I", 2), ("+U", 2), ("-D", 1)],
                                                            want_snapshots, strict=True)]
    assert table.changes(0, appends[-1].id).to_arrow().schema.names == ["rowkind", "id", "v"]

    full = list(table.stream(mode="latest-full", commit_metadata=True, columns=["id"]))
    latest = table.latest_snapshot()
    assert latest is not None and full[0].data.schema.names == ["rowkind", "id", "_commit_snapshot",
                                                                "_commit_timestamp"]
    assert {(r["id"], r["_commit_snapshot"]) for b in full for r in b.data.to_pylist()} == {(2, latest.id)}
