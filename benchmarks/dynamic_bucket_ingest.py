"""Issue 24 benchmark: dynamic-bucket ingest (``bucket = -1``) against the same table with fixed
buckets, in the same run, and per-commit latency of a long dynamic-bucket run.

1. The 2M-row upsert workload of ``ingest_read.py`` (20 commits of 100,000: 70% new keys, 25%
   updates, 5% deletes; 4 partitions; ``write-only``), one ``table.write`` per commit, into a
   table with ``bucket = 4`` and into a dynamic-bucket one (``dynamic-bucket.target-row-num``
   100,000, so that buckets fill and new ones open: 4-5 per partition by the end). Target:
   dynamic >= 0.8x fixed.
2. ``--long-rows`` rows (default 10M) in commits of 100,000 into a dynamic-bucket table through
   one long-lived writer (``table.writer()``, one commit per batch; default target-row-num), as a
   streaming ingest runs: p50 of the last tenth of commits over the first tenth's, ``write-only``
   (the bucket assignment and HASH index as they grow; target <= 1.3), then with compaction, next
   to the same run into ``bucket = 4`` (compaction of ever larger buckets is common to both).

Run: ./dev bench dynamic_bucket_ingest [--commits 20] [--batch 100000] [--long-rows 10000000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from ingest_read import SCHEMA, batches

import changelake as cl


def ingest(root: str, options: dict[str, str], commits: int, size: int) -> tuple[float, int]:
    """Seconds to write the workload one ``table.write`` a commit, and the live rows then."""
    table = cl.Catalog(root).create_table("bench.orders", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                          options={"write-only": "true", **options})
    start = time.perf_counter()
    for batch in batches(commits, size):
        table.write(batch)
    return time.perf_counter() - start, table.scan().to_arrow().num_rows


def long_run(root: str, commits: int, size: int, options: dict[str, str]) -> tuple[float, float, float]:
    """Rows/s of a long-lived writer's commits, and the p50 of its first and last tenth (ms)."""
    table = cl.Catalog(root).create_table("bench.long", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                          options=options)
    durations = []
    with table.writer() as writer:
        for identifier, batch in enumerate(batches(commits, size), start=1):
            start = time.perf_counter()
            writer.write(batch)
            writer.commit(identifier)
            durations.append(time.perf_counter() - start)
    tenth = max(1, len(durations) // 10)
    return (commits * size / sum(durations), statistics.median(durations[:tenth]) * 1000,
            statistics.median(durations[-tenth:]) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--long-rows", type=int, default=10_000_000)
    args = parser.parse_args()
    total = args.commits * args.batch
    work = tempfile.mkdtemp(prefix="changelake-bench-")
    try:
        fixed_s, fixed_rows = ingest(f"{work}/fixed", {"bucket": "4"}, args.commits, args.batch)
        dynamic_s, dynamic_rows = ingest(f"{work}/dynamic", {"dynamic-bucket.target-row-num": "100000"},
                                         args.commits, args.batch)
        if fixed_rows != dynamic_rows:
            raise SystemExit(f"live rows differ: fixed {fixed_rows}, dynamic {dynamic_rows}")
        print(f"{total:,} rows in {args.commits} commits, {fixed_rows:,} live at the end")
        print(f"fixed buckets (bucket=4): {total / fixed_s:,.0f} rows/s ({fixed_s:.1f} s)")
        print(f"dynamic buckets (target-row-num 100000): {total / dynamic_s:,.0f} rows/s ({dynamic_s:.1f} s)")
        print(f"dynamic / fixed: {fixed_s / dynamic_s:.2f}x (target >= 0.8x)")
        long_commits = max(10, args.long_rows // args.batch)
        print(f"long runs: {long_commits * args.batch:,} rows in {long_commits} commits of a long-lived writer")
        runs = (("dynamic, write-only", {"write-only": "true"}), ("dynamic, compaction", {}),
                ("bucket=4, compaction", {"bucket": "4"}))
        for i, (label, options) in enumerate(runs):
            rate, first, last = long_run(f"{work}/long-{i}", long_commits, args.batch, options)
            target = " (target <= 1.3)" if options == {"write-only": "true"} else ""
            print(f"  {label}: {rate:,.0f} rows/s; per-commit p50 first tenth {first:.0f} ms, last tenth "
                  f"{last:.0f} ms, ratio {last / first:.2f}{target}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
