"""changelake streams the changelog files pypaimon writes for ``changelog-producer=input``.

pypaimon 2.1 writes, per bucket and commit, the write buffer after merging by key (sorted by
key, one row per key) as the changelog file, where Apache Paimon writes the raw input. The
commits below therefore change each key at most once per commit, so that both are the input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([
    pa.field("dt", pa.string(), nullable=False),
    pa.field("id", pa.int64(), nullable=False),
    pa.field("v", pa.string()),
    pa.field("op", pa.string()),
])


def _row(dt: str, i: int, v: str | None, op: str) -> dict[str, Any]:
    return {"dt": dt, "id": i, "v": v, "op": op}


COMMITS = [
    [_row(dt, i, f"{dt}-{i}", "+I") for dt in ("a", "b") for i in range(8)],
    [_row("a", 1, "a-1", "-U"), _row("a", 2, "a2-new", "+U"), _row("b", 3, "b-3", "-D"), _row("b", 20, "new", "+I")],
    [_row("a", 1, "a1-new", "+U"), _row("a", 2, "a2-new", "-D"), _row("b", 3, "back", "+I"), _row("b", 9, None, "-D")],
]


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["dt"], row["id"], row["op"])


def test_changelake_streams_pypaimons_input_changelog(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    pypaimon.create_table(warehouse, "db.t", SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                          options={"bucket": "2", "rowkind.field": "op", "changelog-producer": "input"})
    for rows in COMMITS:
        pypaimon.write(warehouse, "db.t", pa.Table.from_pylist(rows, schema=SCHEMA))
    table = cl.Catalog(warehouse).get_table("db.t")
    assert all(s.changelog_manifest_list is not None for s in table.snapshots())

    batches = list(table.stream(mode="from-snapshot", snapshot_id=1, max_rows=3))
    assert {b.kind for b in batches} == {cl.ChangeKind.CHANGELOG}
    for snapshot_id, rows in enumerate(COMMITS, start=1):
        got = [r for b in batches if b.snapshot_id == snapshot_id for r in b.data.to_pylist()]
        assert all(r["rowkind"] == r["op"] for r in got)  # the kinds are the input's
        assert sorted(({k: r[k] for k in SCHEMA.names} for r in got), key=_key) == sorted(rows, key=_key)

    # Resuming from every offset reads the rest exactly.
    for stop in range(len(batches)):
        resumed = list(table.stream(offset=batches[stop].offset, max_rows=3))
        rows_after = [r for b in resumed for r in b.data.to_pylist()]
        assert rows_after == [r for b in batches[stop + 1:] for r in b.data.to_pylist()]

    # latest-full: the merged table as +I, then the changelog of later commits.
    stream = table.stream()
    full = [r for b in stream for r in b.data.to_pylist()]
    assert {r["rowkind"] for r in full} == {"+I"}
    assert sorted((r["dt"], r["id"], r["v"]) for r in full) == sorted(
        (r["dt"], r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist())
    later = [_row("a", 5, "a5-new", "+U"), _row("b", 6, None, "-D")]
    pypaimon.write(warehouse, "db.t", pa.Table.from_pylist(later, schema=SCHEMA))
    assert sorted(({k: r[k] for k in SCHEMA.names} for b in stream for r in b.data.to_pylist()), key=_key) == \
        sorted(later, key=_key)

    # Batch change reads of a range.
    changes = table.changes(1, 3).to_arrow().to_pylist()
    assert sorted(({k: r[k] for k in SCHEMA.names} for r in changes), key=_key) == \
        sorted(COMMITS[1] + COMMITS[2], key=_key)
