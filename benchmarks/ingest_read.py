"""Issue 2 benchmark: upsert ingest and merge-on-read vs plain Parquet (the floor).

2,000,000 rows in 20 commits of 100,000 (70% new keys, 25% updates, 5% deletes), 4 partitions,
bucket 4, no compaction; then a full read of the latest snapshot. The same batches are written
as plain Parquet files and read + deduplicated with pyarrow as the floor.

Run: ./dev bench ingest_read [--commits 20] [--batch 100000]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import changelake as cl
from changelake.table.read import live_files

PARTITIONS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("qty", pa.int32()),
    ]
)


def batches(commits: int, size: int, seed: int = 7, *, deletes: float = 0.05) -> Iterator[pa.Table]:
    """Upsert batches: 70% new keys, 25% updates and 5% deletes of live keys (``deletes``: the
    share of deletes, taken from the updates)."""
    rng = np.random.default_rng(seed)
    live = np.zeros(0, dtype=np.int64)
    next_id = 0
    for _ in range(commits):
        n_new = int(size * 0.70) if live.size else size
        n_upd = int(size * (0.30 - deletes)) if live.size else 0
        n_del = size - n_new - n_upd if live.size else 0
        new = np.arange(next_id, next_id + n_new, dtype=np.int64)
        next_id += n_new
        picked = rng.choice(live, size=n_upd + n_del, replace=False) if live.size else live
        upd, dele = picked[:n_upd], picked[n_upd:]
        ids = np.concatenate([new, upd, dele])
        kinds = np.array(["+I"] * n_new + ["+U"] * n_upd + ["-D"] * n_del)
        live = np.setdiff1d(np.concatenate([live, new]), dele, assume_unique=True)
        dt = np.array(PARTITIONS)[ids % 4]
        yield pa.table(
            {
                "dt": dt,
                "id": ids,
                "name": pa.array([f"name-{i % 1000}" for i in range(len(ids))]),
                "amount": rng.random(len(ids)) * 100,
                "qty": rng.integers(0, 1000, len(ids), dtype=np.int32),
                "rowkind": kinds,
            }
        )


def compact_level0_left(table: cl.Table) -> float:
    """Seconds a last ``table.compact()`` takes to move up what a writer of a deletion-vector
    table left at level 0 (``lookup-compact=gentle``, ``lookup-wait=false``), which its readers
    skip; 0 when nothing is there."""
    latest = table.latest_snapshot()
    if latest is None or not table.context.options.deletion_vectors_enabled or \
            not any(e.file.level == 0 for e in live_files.live_entries(table.context, latest)):
        return 0.0
    start = time.perf_counter()
    table.compact()
    return time.perf_counter() - start


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_changelake(root: str, commits: int, size: int) -> tuple[float, list[float], float, int]:
    table = cl.Catalog(root).create_table(
        "bench.orders", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "4", "write-only": "true"},  # issue 2 measures level-0 files only
    )
    durations = []
    for batch in batches(commits, size):
        start = time.perf_counter()
        table.write(batch)
        durations.append(time.perf_counter() - start)
    start = time.perf_counter()
    result = table.scan().to_arrow()
    read_s = time.perf_counter() - start
    return sum(durations), durations, read_s, result.num_rows


class FloorRun(NamedTuple):
    """The floor's figures: its write's wall and CPU seconds (one core: pyarrow writes a file on
    the calling thread), its read + dedup's seconds, and the live rows it found."""

    write_s: float
    read_s: float
    rows: int
    write_cpu_s: float


def run_floor(root: str, commits: int, size: int, *, deletes: float = 0.05) -> FloorRun:
    os.makedirs(root)
    write_s = write_cpu_s = 0.0
    for i, batch in enumerate(batches(commits, size, deletes=deletes)):
        start, cpu_start = time.perf_counter(), time.process_time()
        with_seq = batch.append_column("seq", pa.array(np.arange(i * size, (i + 1) * size, dtype=np.int64)))
        pq.write_table(with_seq, f"{root}/part-{i}.parquet", compression="zstd", compression_level=1)
        write_s += time.perf_counter() - start
        write_cpu_s += time.process_time() - cpu_start
    start = time.perf_counter()
    data = pa.concat_tables(pq.read_table(f"{root}/part-{i}.parquet") for i in range(commits))
    order = pc.sort_indices(data, [("dt", "ascending"), ("id", "ascending"), ("seq", "ascending")])
    data = data.take(order)
    ends = pc.or_(pc.not_equal(data["dt"][1:], data["dt"][:-1]), pc.not_equal(data["id"][1:], data["id"][:-1]))
    last = pa.concat_arrays([ends.combine_chunks(), pa.array([True])])
    latest = data.filter(last)
    latest = latest.filter(pc.invert(pc.equal(latest["rowkind"], "-D")))
    read_s = time.perf_counter() - start
    return FloorRun(write_s, read_s, latest.num_rows, write_cpu_s)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    args = parser.parse_args()
    total = args.commits * args.batch
    work = tempfile.mkdtemp(prefix="changelake-bench-")
    try:
        ingest_s, durations, read_s, rows = run_changelake(f"{work}/cl", args.commits, args.batch)
        peak = rss_mb()
        floor_write_s, floor_read_s, floor_rows, _ = run_floor(f"{work}/plain", args.commits, args.batch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rows != floor_rows:
        sys.exit(f"row count mismatch: changelake {rows} vs floor {floor_rows}")
    ms = sorted(d * 1000 for d in durations)
    ingest_rate, floor_write_rate = total / ingest_s, total / floor_write_s
    read_rate, floor_read_rate = total / read_s, total / floor_read_s
    print(f"rows written: {total:,} in {args.commits} commits; live rows at the end: {rows:,}")
    print(f"changelake ingest: {ingest_rate:,.0f} rows/s  (per commit p50 {statistics.median(ms):.0f} ms, "
          f"p95 {ms[int(0.95 * (len(ms) - 1))]:.0f} ms)")
    print(f"plain parquet write (floor): {floor_write_rate:,.0f} rows/s")
    print(f"changelake merge-on-read: {read_rate:,.0f} rows/s ({read_s:.2f} s for {total:,} stored rows)")
    print(f"pyarrow read + dedup (floor): {floor_read_rate:,.0f} rows/s ({floor_read_s:.2f} s)")
    print(f"ratios: ingest {ingest_rate / floor_write_rate:.0%} of floor (target >= 40%), "
          f"read {read_rate / floor_read_rate:.0%} of floor (target >= 75%)")
    print(f"peak RSS during changelake ingest + read: {peak:,.0f} MB (target < 1536 MB)")


if __name__ == "__main__":
    main()
