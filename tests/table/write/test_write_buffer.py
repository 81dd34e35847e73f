"""Bounded write buffers: spilled or flushed writes give the same table as an unbounded one."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.read import live_files

SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
        pa.field("x", pa.float64()),
    ]
)


def _batches(seed: int = 3) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(4):
        n = 20_000
        ids = rng.integers(0, 15_000, n)
        kinds = rng.choice(["+I", "+U", "-D", "-U"], n, p=[0.6, 0.25, 0.1, 0.05])
        out.append(pa.table({
            "dt": np.where(ids % 2 == 0, "a", "b"),
            "id": ids,
            "v": [f"value-{i}" for i in rng.integers(0, 1000, n)],
            "x": rng.random(n),
            "rowkind": kinds,
        }))
    return out


def _write(tmp_path: Path, name: str, options: dict[str, str]) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table(
        f"db.{name}", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "2", "write-only": "true", **options},
    )
    writer = table.writer("job")
    for batch in _batches():
        writer.write(batch)
    writer.commit(1)
    return table


def _rows(table: cl.Table) -> list[dict[str, object]]:
    return table.scan().to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")]).to_pylist()


@pytest.mark.parametrize("spillable", ["true", "false"])
def test_small_buffer_equals_unbounded(tmp_path: Path, spillable: str) -> None:
    unbounded = _write(tmp_path, "big", {})
    small = _write(tmp_path, f"small_{spillable}",
                   {"write-buffer-size": "256 kb", "write-buffer-spillable": spillable})
    assert _rows(small) == _rows(unbounded)
    files = live_files.live_entries(small.context, small.latest_snapshot())
    big_files = live_files.live_entries(unbounded.context, unbounded.latest_snapshot())
    if spillable == "false":
        # Every buffer flush wrote its own level-0 files.
        assert len(files) > len(big_files)
    # Sequence numbers keep input order across flushes: ranges of a bucket's files never collide.
    for where in {(e.partition, e.bucket) for e in files}:
        ranges = sorted((e.file.min_sequence_number, e.file.max_sequence_number)
                        for e in files if (e.partition, e.bucket) == where)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


def test_spill_files_are_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "spill"))
    (tmp_path / "spill").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    _write(tmp_path, "t", {"write-buffer-size": "128 kb"})
    assert list((tmp_path / "spill").iterdir()) == []


KILLED_WRITER = """
import os, sys
import numpy as np, pyarrow as pa
import changelake as cl
table = cl.Catalog(sys.argv[1]).get_table("db.t")
writer = table.writer("job")
rng = np.random.default_rng(1)
for _ in range(3):
    ids = rng.integers(0, 15_000, 20_000)
    writer.write(pa.table({"dt": np.where(ids % 2 == 0, "a", "b"), "id": ids,
                           "v": [f"value-{i}" for i in ids], "x": rng.random(len(ids))}))
os._exit(9)  # killed: no cleanup runs
"""


def test_spills_of_killed_processes_are_swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed writer leaves its spill directory behind; the next one this host makes removes
    it (and only the directories of this host's dead processes)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    warehouse = tmp_path / "wh"
    cl.Catalog(str(warehouse)).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "2", "write-only": "true", "write-buffer-size": "128 kb"})
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(warehouse)], env=os.environ.copy())
    assert killed.returncode == 9
    left = [d for d in scratch.iterdir() if d.name.startswith("changelake-spill-")]
    assert len(left) == 1 and any(left[0].iterdir())  # its spilled runs, never cleaned up
    host = socket.gethostname()
    alive = scratch / f"changelake-spill-1@{host}-keepme"  # pid 1 runs: not swept
    elsewhere = scratch / "changelake-spill-4194305@another-host-keepme"  # no such pid, another host
    for kept in (alive, elsewhere):
        kept.mkdir()
    _write(tmp_path, "other", {"write-buffer-size": "128 kb"})  # spills, so makes a directory
    assert sorted(d.name for d in scratch.iterdir()) == sorted([alive.name, elsewhere.name])
