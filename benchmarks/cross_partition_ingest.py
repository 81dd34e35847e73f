"""Issue 24 benchmark: cross-partition upsert ingest (a primary key without the partition column,
``bucket = -1``) against a dynamic-bucket table whose primary key holds the partition column, on
the same rows, in the same run.

The 2M-row upsert workload of ``ingest_read.py`` (20 commits of 100,000: 70% new keys, 25%
updates, 5% deletes; 4 partitions; ``write-only``; ``dynamic-bucket.target-row-num`` 100,000 as
in ``dynamic_bucket_ingest.py``), one ``table.write`` per commit, where ``--move`` (default 10%)
of the updates give their key another partition than the one it is in (updates and deletes
otherwise name the key's partition as it is then). The cross-partition table (primary key
``id``) moves those keys: a -D in the old bucket, the row in a bucket of the new partition. The
dynamic-bucket table (primary key ``dt, id``) takes the same rows as they are, so a moved
update there is a new key. Each table's rows are checked against a model of it (the last row
of each key, less the deleted). Printed: rows/s of both and their ratio, the per-commit p50 of
the first and the last tenth of commits, and the first write of a fresh process on the
cross-partition table (which bootstraps its key index from every live key).

Run: ./dev bench cross_partition_ingest [--commits 20] [--batch 100000] [--move 0.1]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from ingest_read import PARTITIONS, SCHEMA, batches

import changelake as cl

TARGET_ROW_NUM = "100000"


def moving_batches(commits: int, size: int, move: float, seed: int = 11) -> tuple[list[pa.Table], int]:
    """``ingest_read.batches`` with each key's partition tracked: a new key goes to ``id % 4``, a
    share ``move`` of the updates to one of the other three partitions (the key moves), every
    other update and every delete to the partition the key is in. The batches, and how many
    updates move their key."""
    rng = np.random.default_rng(seed)
    where = np.zeros(0, dtype=np.int64)  # by id: the partition index the key is in
    out, moved = [], 0
    for batch in batches(commits, size):
        ids = batch.column("id").to_numpy()
        kinds = batch.column("rowkind").to_numpy(zero_copy_only=False)
        if ids.max() >= len(where):
            grown = np.arange(ids.max() + 1, dtype=np.int64) % len(PARTITIONS)
            grown[:len(where)] = where
            where = grown
        updates = np.flatnonzero(kinds == "+U")
        movers = ids[updates[rng.random(len(updates)) < move]]
        where[movers] = (where[movers] + rng.integers(1, len(PARTITIONS), len(movers))) % len(PARTITIONS)
        moved += len(movers)
        dt = pa.array(np.array(PARTITIONS)[where[ids]])
        out.append(batch.set_column(batch.schema.get_field_index("dt"), "dt", dt))
    return out, moved


def model(written: Sequence[pa.Table], key: Sequence[str]) -> pa.Table:
    """The live rows after ``written`` (in order) by ``key``: each key's last row unless it is a
    delete, sorted by key."""
    data = pa.concat_tables(written)
    data = data.append_column("seq", pa.array(np.arange(data.num_rows, dtype=np.int64)))
    data = data.sort_by([*((k, "ascending") for k in key), ("seq", "ascending")])
    columns = [data.column(k).to_numpy() for k in key]
    last = np.ones(data.num_rows, dtype=bool)
    last[:-1] = np.logical_or.reduce([c[1:] != c[:-1] for c in columns])
    data = data.filter(pa.array(last))
    data = data.filter(pc.not_equal(data.column("rowkind"), "-D"))
    return data.select(SCHEMA.names)


def check(table: cl.Table, written: Sequence[pa.Table], key: Sequence[str], label: str) -> int:
    """Exit unless ``table`` reads exactly as the model of ``written``; its live rows."""
    want = model(written, key)
    got = table.scan().to_arrow().select(SCHEMA.names).sort_by([(k, "ascending") for k in key])
    if not got.equals(want.cast(got.schema)):
        raise SystemExit(f"{label}: the table's {got.num_rows:,} rows differ from the model's {want.num_rows:,}")
    return got.num_rows


def ingest(root: str, primary_keys: list[str], data: Sequence[pa.Table]) -> tuple[cl.Table, list[float]]:
    """The table after one ``table.write`` per batch, and each write's seconds."""
    table = cl.Catalog(root).create_table("bench.orders", SCHEMA, primary_keys=primary_keys, partition_keys=["dt"],
                                          options={"write-only": "true",
                                                   "dynamic-bucket.target-row-num": TARGET_ROW_NUM})
    durations = []
    for batch in data:
        start = time.perf_counter()
        table.write(batch)
        durations.append(time.perf_counter() - start)
    return table, durations


FIRST_WRITE = """
import sys, time, pyarrow as pa, changelake as cl
table = cl.open_table(sys.argv[1])
rows = pa.ipc.open_file(sys.argv[2]).read_all()
start = time.perf_counter()
table.write(rows)
print(time.perf_counter() - start)
"""


def first_write_of_a_fresh_process(table: cl.Table, rows: pa.Table, work: str) -> float:
    """Seconds of one ``table.write`` of ``rows`` in a new process (imports excluded)."""
    path = f"{work}/first-write.arrow"
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    src = str(Path(cl.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", FIRST_WRITE, table.location, path], check=True, text=True,
                          capture_output=True, env={"PYTHONPATH": src})
    return float(done.stdout.strip())


def tenths(durations: Sequence[float]) -> str:
    tenth = max(1, len(durations) // 10)
    first, last = statistics.median(durations[:tenth]) * 1000, statistics.median(durations[-tenth:]) * 1000
    return f"per-commit p50 first tenth {first:.0f} ms, last tenth {last:.0f} ms (ratio {last / first:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--move", type=float, default=0.10, help="share of the updates that move their key")
    args = parser.parse_args()
    data, moved = moving_batches(args.commits, args.batch, args.move)
    total = sum(b.num_rows for b in data)
    work = tempfile.mkdtemp(prefix="changelake-bench-")
    try:
        for keys in (["dt", "id"], ["id"]):  # warm up: the first writes of a process pay for imports
            ingest(f"{work}/warm-{len(keys)}", keys, [b.slice(0, 1000) for b in data[:2]])
        dynamic, dynamic_d = ingest(f"{work}/dynamic", ["dt", "id"], data)
        cross, cross_d = ingest(f"{work}/cross", ["id"], data)
        dynamic_rows = check(dynamic, data, ["dt", "id"], "dynamic bucket")
        cross_rows = check(cross, data, ["id"], "cross-partition")
        print(f"{total:,} rows in {args.commits} commits; {moved:,} updates move their key to another partition")
        print(f"cross-partition (primary key id, bucket -1): {total / sum(cross_d):,.0f} rows/s "
              f"({sum(cross_d):.1f} s), {cross_rows:,} live rows as the model; {tenths(cross_d)}")
        print(f"dynamic bucket (primary key dt, id, bucket -1): {total / sum(dynamic_d):,.0f} rows/s "
              f"({sum(dynamic_d):.1f} s), {dynamic_rows:,} live rows as the model; {tenths(dynamic_d)}")
        print(f"cross-partition / dynamic bucket: {sum(dynamic_d) / sum(cross_d):.2f}x")
        sample = data[-1].slice(0, 1000)
        print(f"first table.write of 1,000 rows in a fresh process (key index bootstrapped from {cross_rows:,} "
              f"live keys): {first_write_of_a_fresh_process(cross, sample, work):.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
