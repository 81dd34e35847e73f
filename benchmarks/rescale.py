"""Rescale benchmark: ``table.rescale`` of the upsert workload's table against its floor.

The table of ingest_read.py (2,000,000 upserts in 20 commits of 100,000: 70% new keys, 25%
updates, 5% deletes; 4 partitions, bucket 4, written with ``write-only`` so the LSM trees hold
every level-0 file the commits left, the worst case for the merge) is rescaled to 8 buckets. The
floor is the work a rescale cannot avoid: the latest merged read of the table (``scan``) and the
same rows written once more as plain Parquet files (zstd level 1). Prints both, rows/s of
merged rows, their ratio, the peak RSS, and checks that the rescaled table reads the same rows.
Partitions over 32 MB of files take the bounded-memory path (``--bounded`` forces it).

Run: ./dev bench rescale [--commits 20] [--batch 100000] [--bucket 8] [--bounded]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))

from ingest_read import SCHEMA, batches, rss_mb

import changelake as cl
from changelake.table.merge import chunked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--bucket", type=int, default=8)
    parser.add_argument("--bounded", action="store_true",
                        help="take the bounded-memory path (partitions merged in chunks, spilled per new bucket) "
                             "whatever the partitions' sizes")
    args = parser.parse_args()
    if args.bounded:
        chunked.CHUNKED_MERGE_BYTES = 0
    root = tempfile.mkdtemp(prefix="changelake-bench-rescale-")
    try:
        table = cl.Catalog(os.path.join(root, "wh")).create_table(
            "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "4", "write-only": "true"})
        with table.writer(commit_user="bench") as writer:
            for i, batch in enumerate(batches(args.commits, args.batch), start=1):
                writer.write(batch)
                writer.commit(i)
        latest = table.latest_snapshot()
        assert latest is not None
        print(f"table: {args.commits * args.batch:,} upserts in {args.commits} commits, "
              f"{len(table.system('files'))} data files")

        started = time.perf_counter()
        merged = table.scan().to_arrow()
        read_s = time.perf_counter() - started
        started = time.perf_counter()
        floor_dir = os.path.join(root, "floor")
        os.makedirs(floor_dir)
        for dt in merged.column("dt").unique().to_pylist():
            rows = merged.filter(pc.equal(merged.column("dt"), dt))
            pq.write_table(rows, os.path.join(floor_dir, f"{dt}.parquet"), compression="zstd", compression_level=1)
        floor_s = read_s + time.perf_counter() - started

        started = time.perf_counter()
        landed = table.rescale(bucket=args.bucket)
        rescale_s = time.perf_counter() - started
        assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
        n = merged.num_rows
        print(f"floor (merged read {read_s:.2f} s + plain Parquet write): {floor_s:.2f} s, {n / floor_s:,.0f} rows/s")
        print(f"rescale 4 -> {args.bucket} buckets: {rescale_s:.2f} s, {n / rescale_s:,.0f} merged rows/s, "
              f"{floor_s / rescale_s:.2f}x the floor")
        print(f"peak RSS: {rss_mb():,.0f} MB")
        key = ["dt", "id"]
        if not table.scan().to_arrow().sort_by([(k, "ascending") for k in key]).equals(
                merged.sort_by([(k, "ascending") for k in key])):
            raise SystemExit("the rescaled table reads other rows")
        print("check: the rescaled table reads the same rows")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
