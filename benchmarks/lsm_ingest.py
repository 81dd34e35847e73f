"""Issue 3 benchmark: sustained upsert ingest with compaction, and reads before/after a full
compaction.

10,000,000 rows in 100 commits of 100,000 (70% new keys, 25% updates, 5% deletes), bucket 4,
four partitions, default compaction settings, written by one long-lived writer (one commit per
batch, as a streaming job does). Also runs the same workload at 2,500,000 rows.

Issue 11: the big run is made twice, with snapshot expiry off (``snapshot.num-retained.min`` at
its maximum: nothing expires) and on (Paimon's defaults but ``snapshot.time-retained``, which
``--time-retained`` shortens to the scale of a benchmark: with the default 1 h nothing written
in a few minutes would expire), to compare ingest rates and the files left on disk against the
live data.

Run: ./dev bench lsm_ingest [--commits 100] [--batch 100000] [--no-small] [--time-retained "1 s"]
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
from collections import Counter

sys.path.insert(0, os.path.dirname(__file__))

from ingest_read import SCHEMA, batches

import changelake as cl
from changelake.table.read import live_files


def p50_p95(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered) * 1000, ordered[int(0.95 * (len(ordered) - 1))] * 1000


def disk_usage(path: str) -> tuple[int, int]:
    count = size = 0
    for root, _, files in os.walk(path):
        for name in files:
            if name.endswith(".parquet"):
                count += 1
                size += os.path.getsize(os.path.join(root, name))
    return count, size


EXPIRY_OFF = {"snapshot.num-retained.min": str(2**31 - 1)}


def run(commits: int, size: int, options: dict[str, str]) -> dict[str, float]:
    work = tempfile.mkdtemp(prefix="changelake-lsm-")
    try:
        table = cl.Catalog(work).create_table(
            "bench.orders", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "4", **options}
        )
        stop = table.context.options.stop_trigger
        durations: list[float] = []
        max_runs = 0
        # A long-running ingest job: one writer, one commit per batch, compaction in background.
        writer = table.writer(commit_user="bench-job")
        for identifier, batch in enumerate(batches(commits, size)):
            start = time.perf_counter()
            writer.write(batch)
            writer.commit(identifier)
            durations.append(time.perf_counter() - start)
            runs: Counter[tuple[bytes, int]] = Counter()
            levels: dict[tuple[bytes, int], set[int]] = {}
            for entry in live_files.live_entries(table.context, table.latest_snapshot()):
                key = (entry.partition, entry.bucket)
                if entry.file.level == 0:
                    runs[key] += 1
                else:
                    levels.setdefault(key, set()).add(entry.file.level)
            max_runs = max(max_runs, max(runs[k] + len(levels.get(k, ())) for k in set(runs) | set(levels)))
        writer.close()
        manifests = len(live_files.data_manifests(table.context, table.latest_snapshot()))
        snapshots = len(table.snapshots())
        total = commits * size
        files, nbytes = disk_usage(table.location)
        live = live_files.live_entries(table.context, table.latest_snapshot())
        live_bytes = sum(e.file.file_size for e in live)
        start = time.perf_counter()
        rows = table.scan().to_arrow().num_rows
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        table.compact(full=True)
        compact_s = time.perf_counter() - start
        start = time.perf_counter()
        rows_full = table.scan().to_arrow().num_rows
        read_full_s = time.perf_counter() - start
        assert rows == rows_full
        first, last = p50_p95(durations[:10]), p50_p95(durations[-10:])
        return {
            "rows": total, "live": rows, "ingest": total / sum(durations),
            "first_p50": first[0], "first_p95": first[1], "last_p50": last[0], "last_p95": last[1],
            "files": files, "mb": nbytes / 2**20, "live_files": len(live), "live_mb": live_bytes / 2**20,
            "read": rows / read_s, "read_s": read_s,
            "compact_s": compact_s, "read_full": rows / read_full_s, "read_full_s": read_full_s,
            "max_runs": max_runs, "stop": stop, "manifests": manifests, "snapshots": snapshots,
            "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(r: dict[str, float]) -> None:
    print(f"{int(r['rows']):,} rows, {int(r['live']):,} live at the end")
    print(f"  ingest: {r['ingest']:,.0f} rows/s (target >= 300,000)")
    print(f"  per commit, first 10: p50 {r['first_p50']:.0f} ms, p95 {r['first_p95']:.0f} ms; "
          f"last 10: p50 {r['last_p50']:.0f} ms, p95 {r['last_p95']:.0f} ms "
          f"(ratio {r['last_p50'] / r['first_p50']:.2f}, target <= 1.5)")
    print(f"  on disk: {int(r['files'])} data files, {r['mb']:.0f} MB; live in the latest snapshot: "
          f"{int(r['live_files'])} files, {r['live_mb']:.0f} MB (x{r['mb'] / r['live_mb']:.2f} on disk, "
          "target <= 2 with expiry)")
    print(f"  planning the latest of {int(r['snapshots'])} snapshots reads {int(r['manifests'])} manifests")
    print(f"  sorted runs per bucket, max after any commit: {int(r['max_runs'])} (stop-trigger {int(r['stop'])})")
    print(f"  latest read without full compaction: {r['read']:,.0f} live rows/s "
          f"({r['read_s']:.2f} s; target >= 1.5M)")
    print(f"  full compaction: {r['compact_s']:.1f} s; then read: {r['read_full']:,.0f} rows/s "
          f"({r['read_full_s']:.2f} s; target >= 3M)")
    print(f"  peak RSS so far: {r['rss']:,.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--no-small", action="store_true", help="skip the 2.5M-row comparison run")
    parser.add_argument("--time-retained", default="1 s", help="snapshot.time-retained of the runs with expiry")
    args = parser.parse_args()
    expiry = {"snapshot.time-retained": args.time_retained}
    print("snapshot expiry off:")
    off = run(args.commits, args.batch, EXPIRY_OFF)
    report(off)
    print(f"snapshot expiry on (default retention, snapshot.time-retained {args.time_retained}):")
    big = run(args.commits, args.batch, expiry)
    report(big)
    print(f"expiry: ingest rate x{big['ingest'] / off['ingest']:.3f} of expiry off (target >= 0.9); "
          f"on disk {int(big['files'])} data files, {big['mb']:.0f} MB against {int(off['files'])}, "
          f"{off['mb']:.0f} MB without")
    if not args.no_small:
        small = run(args.commits // 4, args.batch, expiry)
        report(small)
        print("scaling 4x rows: ingest rate x{:.2f}, last-10 p50 x{:.2f}, read x{:.2f}, full read x{:.2f}".format(
            big["ingest"] / small["ingest"], big["last_p50"] / small["last_p50"],
            big["read"] / small["read"], big["read_full"] / small["read_full"]))


if __name__ == "__main__":
    main()
