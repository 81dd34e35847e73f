"""pypaimon 2.1 reads the changelog changelake writes with ``changelog-producer=input``: its
streaming scan (``new_stream_read_builder()`` with ``with_include_row_kind()``), started from
snapshot 1 through a consumer, returns for every APPEND snapshot exactly the rows that commit
wrote, row kinds included, and skips the COMPACT snapshots (they carry no changelog)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([
    pa.field("p", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("v", pa.string()),
    pa.field("n", pa.float64()),
])
Row = tuple[str, str, int, str | None, float | None]  # (kind, p, k, v, n)


def _commit_rows(seed: int, count: int) -> list[Row]:
    rng = random.Random(seed)
    return [(rng.choice(["+I", "+I", "-U", "+U", "-D"]), rng.choice(["x", "y"]), rng.randrange(80),
             None if rng.random() < 0.1 else f"{seed}-{i}", None if rng.random() < 0.1 else rng.random())
            for i in range(count)]


def _arrow(rows: list[Row]) -> pa.Table:
    kind, p, k, v, n = zip(*rows, strict=True)
    return pa.Table.from_arrays([pa.array(p), pa.array(k, pa.int64()), pa.array(v, pa.string()),
                                 pa.array(n, pa.float64()), pa.array(kind)], names=[*SCHEMA.names, "rowkind"])


def paimon_changelog(pypaimon: Pypaimon, warehouse: str, name: str, last_snapshot: int) -> dict[int, list[Row]]:
    """What pypaimon's streaming read returns per snapshot, from snapshot 1 to ``last_snapshot``
    (see pypaimon_side.stream_changelog), as (kind, p, k, v, n) rows."""
    out: dict[int, list[Row]] = {}
    for snapshot_id, data in pypaimon.stream_changelog(warehouse, name, last_snapshot).items():
        columns = [data.column(c).to_pylist() for c in ("_row_kind", *SCHEMA.names)]
        out[snapshot_id] = list(zip(*columns, strict=True))
    return out


@pytest.mark.parametrize("options", [
    {},
    {"write-buffer-size": "4 kb"},
    {"write-buffer-size": "4 kb", "write-buffer-spillable": "false", "data-file.thin-mode": "true"},
], ids=["plain", "spill", "flushes-thin"])
def test_pypaimon_streams_the_input_changelog(tmp_path: Path, pypaimon: Pypaimon, options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "changelog-producer": "input", "num-sorted-run.compaction-trigger": "2",
                 "commit.force-compact": "true", **options})
    commits: dict[int, list[Row]] = {}
    with table.writer(commit_user="job") as writer:
        for identifier in range(1, 4):
            rows = _commit_rows(identifier, 150)
            writer.write(_arrow(rows[:75]))
            writer.write(_arrow(rows[75:]))
            landed = writer.commit(identifier)
            commits[landed[0].id] = rows
    rows = _commit_rows(9, 100)
    snap = table.write(_arrow(rows))
    assert snap is not None
    commits[snap.id] = rows
    assert any(s.commit_kind is cl.CommitKind.COMPACT for s in table.snapshots())

    got = paimon_changelog(pypaimon, warehouse, "db.t", snap.id)
    assert sorted(got) == sorted(commits)  # the APPEND snapshots, no COMPACT one
    for snapshot_id, written in commits.items():
        theirs = got[snapshot_id]
        assert Counter(theirs) == Counter(written), snapshot_id
        for key in {(r[1], r[2]) for r in written}:  # each key's changes in input order
            assert [r for r in theirs if r[1:3] == key] == [r for r in written if r[1:3] == key]


def test_pypaimon_streams_the_lookup_changelog(tmp_path: Path, pypaimon: Pypaimon) -> None:
    """With ``changelog-producer=lookup`` pypaimon's stream returns the changelog of each
    commit's COMPACT snapshot: before-images included, folding into the table."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "changelog-producer": "lookup"})
    for seed in range(1, 4):
        table.write(_arrow(_commit_rows(seed, 60)))
    latest = table.latest_snapshot()
    assert latest is not None
    ours = table.changes(0, latest.id).to_arrow()
    theirs = paimon_changelog(pypaimon, warehouse, "db.t", latest.id)
    compact = {s.id for s in table.snapshots() if s.changelog_manifest_list is not None}
    assert set(theirs) == compact
    mine = [tuple(r[c] for c in ("rowkind", *SCHEMA.names)) for r in ours.to_pylist()]
    assert Counter(r for rows in theirs.values() for r in rows) == Counter(mine)
    folded: dict[tuple[str, int], Row] = {}
    for snapshot_id in sorted(theirs):
        for row in theirs[snapshot_id]:
            key = (row[1], row[2])
            if row[0] in ("-U", "-D"):
                assert folded.pop(key)[1:] == row[1:]
            else:
                folded[key] = row
    table_rows = {(r["p"], r["k"]): (r["v"], r["n"]) for r in table.scan().to_arrow().to_pylist()}
    assert {key: row[3:] for key, row in folded.items()} == table_rows
