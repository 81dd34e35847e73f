"""pypaimon reads every snapshot of a table with deletion vectors that changelake writes exactly as
changelake does (it applies the vectors of our index files, listed by our index manifests, and
skips level 0 as Paimon's readers of such tables do), for every merge engine.

pypaimon 2.1 cannot produce such a table itself: its writers only add level-0 files, which its
own readers then skip, so changelake is the only writer here."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.lsm import compactor
from changelake.table.merge import chunked
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    ("v", pa.string()), ("n", pa.int64())])
ENGINES = {
    "deduplicate": {},
    # no deletes: level-0 files move up without a rewrite
    "deduplicate-upserts": {},
    # level 0 stays until universal compaction or the interval moves it up; readers skip it
    "deduplicate-gentle": {"lookup-compact": "gentle", "lookup-compact.max-interval": "4"},
    # level 0 goes up in the background and lands with a later commit
    "deduplicate-async": {"lookup-wait": "false"},
    # every compaction section merged in key-bounded chunks (as big ones are), a few rows at a time
    "deduplicate-chunked": {},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.n.aggregate-function": "sum"},
}


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["dt"], r["k"]))


def _paimon_rows(pypaimon: Pypaimon, warehouse: str, snapshot_id: int) -> list[dict[str, Any]]:
    return _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot_id)}).to_pylist())


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_pypaimon_reads_every_snapshot_as_changelake(tmp_path: Any, pypaimon: Pypaimon, engine: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = str(tmp_path)
    if engine == "deduplicate-chunked":
        monkeypatch.setattr(compactor, "CHUNKED_COMPACTION_BYTES", 0)
        monkeypatch.setattr(chunked, "BATCH_ROWS", 4)
    options = {"bucket": "2", "deletion-vectors.enabled": "true", "target-file-size": "2 kb",
               "num-sorted-run.compaction-trigger": "3", **ENGINES[engine]}
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options=options)
    rng = random.Random(7)
    with table.writer(commit_user="u") as writer:
        for step in range(8):
            count = rng.randint(5, 50)
            rows = {"dt": [rng.choice(["a", "b"]) for _ in range(count)],
                    "k": [rng.randrange(80) for _ in range(count)],
                    "v": [None if engine == "partial-update" and rng.random() < 0.3 else f"s{step}"
                          for _ in range(count)],
                    "n": [rng.randrange(10) for _ in range(count)]}
            deletes = engine in ("deduplicate", "deduplicate-gentle", "deduplicate-async", "deduplicate-chunked")
            kinds = ["-D" if deletes and rng.random() < 0.2 else "+I" for _ in range(count)]
            writer.write(pa.table({**rows, "rowkind": kinds}))
            writer.commit(step)
    table.compact(full=True)
    snapshots = table.snapshots()
    assert any(s.index_manifest for s in snapshots)
    for snapshot in snapshots:
        ours = _sorted(table.scan(snapshot_id=snapshot.id).to_arrow().to_pylist())
        assert _paimon_rows(pypaimon, warehouse, snapshot.id) == ours, f"snapshot {snapshot.id}"
