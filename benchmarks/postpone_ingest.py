"""Issue 24 benchmark: ingest into a postpone-bucket table (``bucket = -2``) against the same
table with fixed buckets, then the postpone compaction that moves the rows into real buckets.

The upsert workload of ``ingest_read`` (70% new keys, 25% updates, 5% deletes; four partitions)
in ``--commits`` commits of ``--batch`` rows by one long-lived writer: with fixed buckets
(``bucket = 4``: sort, merge, level-0 files and background compaction per bucket), and into
``bucket-postpone/`` (rows as they come, no compaction), then one ``table.compact()``
(``postpone.default-bucket-num = 4``). Prints rows/s of each ingest, the compaction's time and
rows/s, and whether both tables read the same rows.

Run: ./dev bench postpone_ingest [--commits 20] [--batch 100000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

from ingest_read import PARTITIONS, SCHEMA, batches

import changelake as cl


def ingest(work: str, name: str, options: dict[str, str], commits: int, size: int) -> tuple[cl.Table, float]:
    table = cl.Catalog(work).create_table(f"bench.{name}", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                          options=options)
    data = list(batches(commits, size))
    started = time.perf_counter()
    with table.writer(commit_user="bench-job") as writer:
        for identifier, batch in enumerate(data):
            writer.write(batch)
            writer.commit(identifier)
    return table, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    args = parser.parse_args()
    rows = args.commits * args.batch
    work = tempfile.mkdtemp(prefix="changelake-postpone-")
    try:
        fixed, fixed_s = ingest(work, "fixed", {"bucket": "4"}, args.commits, args.batch)
        postponed, postponed_s = ingest(work, "postponed", {"bucket": "-2", "postpone.default-bucket-num": "4"},
                                        args.commits, args.batch)
        started = time.perf_counter()
        postponed.compact()
        compact_s = time.perf_counter() - started
        same = fixed.scan().to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")]).equals(
            postponed.scan().to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")]))
        print(f"{rows:,} rows in {args.commits} commits, {len(PARTITIONS)} partitions")
        print(f"fixed buckets (4):    ingest {fixed_s:7.2f} s  {rows / fixed_s:12,.0f} rows/s")
        print(f"postpone bucket (-2): ingest {postponed_s:7.2f} s  {rows / postponed_s:12,.0f} rows/s "
              f"({fixed_s / postponed_s:.2f}x the fixed-bucket rate)")
        print(f"postpone compaction:  {compact_s:7.2f} s  {rows / compact_s:12,.0f} rows/s (one COMPACT snapshot)")
        print(f"both tables read the same rows: {same}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
