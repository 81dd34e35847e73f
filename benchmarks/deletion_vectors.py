"""Issue 13 benchmark: deletion vectors on the 2M-row upsert workload.

2,000,000 rows in 20 commits of 100,000 (70% new keys, 25% updates, 5% deletes), 4 partitions,
bucket 4, compaction on (default settings), written to a table with ``deletion-vectors.enabled``
and to one without; the same batches written as plain Parquet files (the floor); then a full read
of the latest snapshot of each table (read rates are live rows returned per second, the median of
5 timed reads after a warm-up; the two reads are checked equal). With deltalake installed
(benchmark-only: ``pip install deltalake``), the live rows are also written as a Delta table
partitioned like ours (the layout copy-on-write merges leave) and read with delta-rs, timed the
same way.

Run: ./dev bench deletion_vectors [--commits 20] [--batch 100000] [--deletes 0.05]
(``--deletes 0``: upserts only, whose level-0 files move up without a rewrite;
``--lookup-compact gentle``: level 0 moves up only when universal compaction picks it, and a
final ``table.compact()``, timed with the ingest, moves the rest up before the reads)
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa
from ingest_read import SCHEMA, batches, run_floor

import changelake as cl


def ingest(root: str, commits: int, size: int, *, vectors: bool, deletes: float,
           lookup_compact: str = "radical") -> tuple[cl.Table, list[float]]:
    options = {"bucket": "4", "deletion-vectors.enabled": str(vectors).lower()}
    if vectors:
        options["lookup-compact"] = lookup_compact
    table = cl.Catalog(root).create_table("bench.orders", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                          options=options)
    durations = []
    for batch in batches(commits, size, deletes=deletes):
        start = time.perf_counter()
        table.write(batch)
        durations.append(time.perf_counter() - start)
    if vectors and lookup_compact == "gentle":
        # Level 0 is left where universal compaction leaves it, and readers skip it: a final
        # compaction (part of the ingest's time) moves it up, so that every row reads.
        start = time.perf_counter()
        table.compact()
        durations[-1] += time.perf_counter() - start
    return table, durations


READS = 5  # reads are timed as the median of this many, after one that warms caches


def median_seconds(read: Callable[[], object]) -> float:
    read()  # warm the caches (manifests, OS pages), as a long-lived reader has them
    times = []
    for _ in range(READS):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_read(table: cl.Table) -> tuple[pa.Table, float]:
    return table.scan().to_arrow(), median_seconds(lambda: table.scan().to_arrow())


def delta_read(root: str, live: pa.Table) -> float | None:
    """Seconds delta-rs takes to read ``live`` written as a Delta table (None without deltalake)."""
    if importlib.util.find_spec("deltalake") is None:
        return None
    import deltalake  # optional, benchmark-only: imported when installed

    deltalake.write_deltalake(root, live, partition_by=["dt"])
    assert deltalake.DeltaTable(root).to_pyarrow_table().num_rows == live.num_rows
    return median_seconds(lambda: deltalake.DeltaTable(root).to_pyarrow_table())


def _sorted(t: pa.Table) -> pa.Table:
    return t.select(SCHEMA.names).sort_by([("dt", "ascending"), ("id", "ascending")])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--deletes", type=float, default=0.05, help="share of deletes in each batch")
    parser.add_argument("--lookup-compact", choices=["radical", "gentle"], default="radical",
                        help="lookup-compact of the table with deletion vectors")
    args = parser.parse_args()
    total = args.commits * args.batch
    work = tempfile.mkdtemp(prefix="changelake-bench-")
    try:
        dv_table, dv_durations = ingest(f"{work}/dv", args.commits, args.batch, vectors=True, deletes=args.deletes,
                                        lookup_compact=args.lookup_compact)
        plain_table, plain_durations = ingest(f"{work}/plain", args.commits, args.batch, vectors=False,
                                              deletes=args.deletes)
        floor_write_s, _, floor_rows = run_floor(f"{work}/parquet", args.commits, args.batch, deletes=args.deletes)
        dv_rows, dv_read_s = timed_read(dv_table)
        plain_rows, plain_read_s = timed_read(plain_table)
        if not (dv_rows.num_rows == plain_rows.num_rows == floor_rows) or \
                not _sorted(dv_rows).equals(_sorted(plain_rows)):
            sys.exit(f"results differ: with vectors {dv_rows.num_rows}, without {plain_rows.num_rows}, "
                     f"floor {floor_rows}")
        delta_s = delta_read(f"{work}/delta", dv_rows.select(SCHEMA.names))
        files = {name: t.system("files").num_rows for name, t in (("with", dv_table), ("without", plain_table))}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    live = dv_rows.num_rows
    floor_rate = total / floor_write_s
    print(f"rows written: {total:,} in {args.commits} commits ({args.deletes:.0%} deletes); "
          f"live rows at the end: {live:,}; "
          f"files in the latest snapshot: {files['with']} with vectors, {files['without']} without")
    for label, durations in (("with deletion vectors", dv_durations), ("without", plain_durations)):
        ms = sorted(d * 1000 for d in durations)
        rate = total / sum(durations)
        print(f"ingest {label}: {rate:,.0f} rows/s ({rate / floor_rate:.2f}x the floor; per commit p50 "
              f"{statistics.median(ms):.0f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.0f} ms)")
    print(f"plain parquet write (floor): {floor_rate:,.0f} rows/s")
    dv_rate, plain_rate = live / dv_read_s, live / plain_read_s
    print(f"latest read with deletion vectors: {dv_rate:,.0f} rows/s ({dv_read_s:.2f} s)")
    print(f"latest read without (merge on read): {plain_rate:,.0f} rows/s ({plain_read_s:.2f} s)")
    if delta_s is None:
        print("delta-rs: not installed (pip install deltalake to compare)")
    else:
        delta_rate = live / delta_s
        print(f"delta-rs read: {delta_rate:,.0f} rows/s ({delta_s:.2f} s); with deletion vectors we read at "
              f"{dv_rate / delta_rate:.2f}x delta-rs")


if __name__ == "__main__":
    main()
