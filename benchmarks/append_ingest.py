"""Issue 24 benchmark: append-table ingest vs the plain-Parquet floor.

2,000,000 rows in 20 commits of 100,000 (a log-like table: timestamp, partition, ids, strings,
numbers), 4 partitions; once into an unaware append table (``bucket = -1``) and once into a
fixed-bucket one (``bucket = 4``, ``bucket-key = user_id``), both ``write-only`` (compaction is
measured apart, by ``table.compact()``). The floor writes the same batches with
``pyarrow.parquet`` (one file per partition per commit, zstd, as changelake writes), nothing
else. Target: append ingest >= 0.7x the floor's rows per second.

Run: ./dev bench append_ingest [--commits 20] [--batch 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import changelake as cl

PARTITIONS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
SCHEMA = pa.schema([
    pa.field("dt", pa.string()),
    pa.field("ts", pa.timestamp("us")),
    pa.field("user_id", pa.int64()),
    pa.field("event", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("qty", pa.int32()),
])


def batches(commits: int, size: int, seed: int = 11) -> Iterator[pa.Table]:
    rng = np.random.default_rng(seed)
    events = np.array([f"event-{i}" for i in range(200)])
    for c in range(commits):
        yield pa.table({
            "dt": np.array(PARTITIONS)[rng.integers(0, len(PARTITIONS), size)],
            "ts": pa.array(np.arange(c * size, (c + 1) * size, dtype=np.int64) * 1000, pa.timestamp("us")),
            "user_id": rng.integers(0, 1_000_000, size, dtype=np.int64),
            "event": events[rng.integers(0, len(events), size)],
            "amount": rng.random(size) * 100,
            "qty": rng.integers(0, 1000, size, dtype=np.int32),
        }, schema=SCHEMA)


def floor(root: str, data: list[pa.Table]) -> float:
    """Seconds to write every batch as one zstd Parquet file per partition."""
    start = time.perf_counter()
    for n, batch in enumerate(data):
        for dt in PARTITIONS:
            part = batch.filter(pc.equal(batch.column("dt"), dt))
            os.makedirs(f"{root}/dt={dt}", exist_ok=True)
            pq.write_table(part, f"{root}/dt={dt}/part-{n}.parquet", compression="zstd", compression_level=1)
    return time.perf_counter() - start


def ingest(root: str, data: list[pa.Table], options: dict[str, str]) -> tuple[float, list[float]]:
    """Seconds to write every batch as one commit of an append table, and each commit's seconds."""
    table = cl.Catalog(root).create_table("db.logs", SCHEMA, partition_keys=["dt"],
                                          options={"write-only": "true", **options})
    commits = []
    start = time.perf_counter()
    for batch in data:
        began = time.perf_counter()
        table.write(batch)
        commits.append(time.perf_counter() - began)
    total = time.perf_counter() - start
    assert table.scan(columns=["qty"]).to_arrow().num_rows == sum(b.num_rows for b in data)
    return total, commits


def best(runs: int, work: Callable[[str], float]) -> float:
    """The fastest of ``runs`` runs, each in a fresh directory."""
    times = []
    for _ in range(runs):
        root = tempfile.mkdtemp(prefix="append-bench-")
        try:
            times.append(work(root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    data = list(batches(args.commits, args.batch))
    rows = args.commits * args.batch
    plain = best(args.runs, lambda root: floor(root, data))
    print(f"{rows:,} rows in {args.commits} commits; plain-Parquet floor: {plain:.2f}s ({rows / plain:,.0f} rows/s)")
    for label, options in (("unaware (bucket -1)", {}),
                           ("fixed (bucket 4, bucket-key user_id)", {"bucket": "4", "bucket-key": "user_id"})):
        latencies: list[float] = []

        def run(root: str, options: dict[str, str] = options, latencies: list[float] = latencies) -> float:
            total, commits = ingest(root, data, options)
            latencies[:] = commits
            return total

        seconds = best(args.runs, run)
        tenth = max(1, len(latencies) // 10)
        drift = statistics.median(latencies[-tenth:]) / statistics.median(latencies[:tenth])
        print(f"append {label}: {seconds:.2f}s ({rows / seconds:,.0f} rows/s) = {plain / seconds:.2f}x the floor; "
              f"commit p50 {statistics.median(latencies) * 1000:.0f} ms, last/first tenth p50 {drift:.2f}")
    root = tempfile.mkdtemp(prefix="append-bench-")
    try:
        table = cl.Catalog(root).create_table("db.logs", SCHEMA, partition_keys=["dt"],
                                              options={"write-only": "true", "target-file-size": "16 mb"})
        for batch in data:
            table.write(batch)
        start = time.perf_counter()
        table.compact(full=True)
        files = table.system("files").num_rows
        print(f"compaction of the unaware table's {args.commits * len(PARTITIONS)} small files "
              f"(target-file-size 16 mb): {time.perf_counter() - start:.2f}s, {files} files left")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
