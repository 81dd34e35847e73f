"""Issue 13 benchmark: deletion vectors on the 2M-row upsert workload.

2,000,000 rows in 20 commits of 100,000 (70% new keys, 25% updates, 5% deletes), 4 partitions,
bucket 4, compaction on (default settings), written to a table with ``deletion-vectors.enabled``
and to one without; the same batches written as plain Parquet files (the floor). The machine's
speed drifts, so the three writes are made ``--rounds`` times (default 3) in a rotating order,
each after ``os.sync()``, and every ingest ratio is per round, then the median. Then a full read
of the latest snapshot of each table of the last round, in a fresh process (read rates are live
rows returned per second, the median of 21 timed reads after a warm-up; the two reads are checked
equal). With deltalake installed (benchmark-only: ``pip install deltalake``), the live rows are
also written as a Delta table partitioned like ours (the layout copy-on-write merges leave), and
our read and delta-rs's are timed in 21 alternating pairs: the ratio is the median of the pairs'.

Run: ./dev bench deletion_vectors [--commits 20] [--batch 100000] [--deletes 0.05] [--rounds 3]
(``--deletes 0``: upserts only, whose level-0 files move up without a rewrite;
``--lookup-compact gentle``: level 0 moves up only when universal compaction picks it, and a
final ``table.compact()``, timed with the ingest, moves the rest up before the reads)
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
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


READS = 21  # reads are timed as the median of this many, after one that warms caches


def median_seconds(read: Callable[[], object]) -> float:
    read()  # warm the caches (manifests, OS pages), as a long-lived reader has them
    times = []
    for _ in range(READS):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_seconds(ours: Callable[[], object], theirs: Callable[[], object]) -> tuple[float, float, float]:
    """Median seconds of two reads timed in alternating pairs (the machine's speed drifts), and
    the median of the pairs' ratios (theirs / ours)."""
    ours(), theirs()  # warm the caches (manifests, OS pages), as a long-lived reader has them

    def timed(read: Callable[[], object]) -> float:
        start = time.perf_counter()
        read()
        return time.perf_counter() - start

    pairs = []
    for i in range(READS):
        if i % 2:
            their_s = timed(theirs)
            pairs.append((timed(ours), their_s))
        else:
            pairs.append((timed(ours), timed(theirs)))
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[1] / p[0] for p in pairs))


def write_delta(root: str, live: pa.Table) -> bool:
    """Write ``live`` as a Delta table (False without deltalake)."""
    if importlib.util.find_spec("deltalake") is None:
        return False
    import deltalake  # optional, benchmark-only: imported when installed

    deltalake.write_deltalake(root, live, partition_by=["dt"])
    assert deltalake.DeltaTable(root).to_pyarrow_table().num_rows == live.num_rows
    return True


def time_reads(dv_location: str, plain_location: str, delta_root: str | None) -> tuple[float, float, float | None,
                                                                                        float | None]:
    """Seconds of each read (with vectors, without, delta-rs) and the pairs' ratio, in a fresh
    process (``spawn``): the ingest rounds' allocations left behind slow later reads unevenly."""
    dv_table, plain_table = cl.open_table(dv_location), cl.open_table(plain_location)
    plain_s = median_seconds(lambda: plain_table.scan().to_arrow())
    if delta_root is None:
        return median_seconds(lambda: dv_table.scan().to_arrow()), plain_s, None, None
    import deltalake  # optional, benchmark-only: imported when installed

    dv_s, delta_s, ratio = paired_seconds(lambda: dv_table.scan().to_arrow(),
                                          lambda: deltalake.DeltaTable(delta_root).to_pyarrow_table())
    return dv_s, plain_s, delta_s, ratio


def _sorted(t: pa.Table) -> pa.Table:
    return t.select(SCHEMA.names).sort_by([("dt", "ascending"), ("id", "ascending")])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--deletes", type=float, default=0.05, help="share of deletes in each batch")
    parser.add_argument("--lookup-compact", choices=["radical", "gentle"], default="radical",
                        help="lookup-compact of the table with deletion vectors")
    parser.add_argument("--rounds", type=int, default=3,
                        help="ingest rounds (the three writes in a rotating order); ratios are per round, "
                             "then the median")
    args = parser.parse_args()
    total = args.commits * args.batch
    rounds: list[dict[str, float]] = []
    dv_durations: list[float] = []
    plain_durations: list[float] = []
    works = []
    try:
        for round_number in range(args.rounds):
            work = tempfile.mkdtemp(prefix="changelake-bench-")
            works.append(work)
            seconds: dict[str, float] = {}
            steps = ["floor", "with", "without"]
            for step in steps[round_number % 3:] + steps[:round_number % 3]:
                os.sync()  # the disk's writeback of one run's files is not left to slow the next
                if step == "floor":
                    floor = run_floor(f"{work}/parquet", args.commits, args.batch, deletes=args.deletes)
                    seconds[step], floor_rows = floor.write_s, floor.rows
                elif step == "with":
                    dv_table, dv_durations = ingest(f"{work}/dv", args.commits, args.batch, vectors=True,
                                                    deletes=args.deletes, lookup_compact=args.lookup_compact)
                    seconds[step] = sum(dv_durations)
                else:
                    plain_table, plain_durations = ingest(f"{work}/plain", args.commits, args.batch, vectors=False,
                                                          deletes=args.deletes)
                    seconds[step] = sum(plain_durations)
            rounds.append(seconds)
            if round_number < args.rounds - 1:
                shutil.rmtree(work, ignore_errors=True)
        # reads: the last round's tables
        dv_rows, plain_rows = dv_table.scan().to_arrow(), plain_table.scan().to_arrow()
        if not (dv_rows.num_rows == plain_rows.num_rows == floor_rows) or \
                not _sorted(dv_rows).equals(_sorted(plain_rows)):
            sys.exit(f"results differ: with vectors {dv_rows.num_rows}, without {plain_rows.num_rows}, "
                     f"floor {floor_rows}")
        delta_root = f"{works[-1]}/delta"
        if not write_delta(delta_root, dv_rows.select(SCHEMA.names)):
            delta_root = None
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            dv_read_s, plain_read_s, delta_s, delta_ratio = pool.apply(
                time_reads, (dv_table.location, plain_table.location, delta_root))
        files = {name: t.system("files").num_rows for name, t in (("with", dv_table), ("without", plain_table))}
    finally:
        for work in works:
            shutil.rmtree(work, ignore_errors=True)
    live = dv_rows.num_rows
    print(f"rows written: {total:,} in {args.commits} commits ({args.deletes:.0%} deletes); "
          f"live rows at the end: {live:,}; "
          f"files in the latest snapshot: {files['with']} with vectors, {files['without']} without")
    print(f"rounds: {len(rounds)} (floor, with and without vectors, in a rotating order); the last round's "
          "per-commit figures and tables follow")
    for label, key, durations in (("with deletion vectors", "with", dv_durations),
                                  ("without", "without", plain_durations)):
        ratios = [r["floor"] / r[key] for r in rounds]
        ms = sorted(d * 1000 for d in durations)
        rate = total / statistics.median(r[key] for r in rounds)
        print(f"ingest {label}: {rate:,.0f} rows/s (median); {statistics.median(ratios):.2f}x the floor "
              f"(median; every round: {', '.join(f'{x:.2f}x' for x in ratios)}); per commit p50 "
              f"{statistics.median(ms):.0f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:.0f} ms")
    print(f"plain parquet write (floor): {total / statistics.median(r['floor'] for r in rounds):,.0f} rows/s "
          "(median)")
    dv_rate, plain_rate = live / dv_read_s, live / plain_read_s
    print(f"latest read with deletion vectors: {dv_rate:,.0f} rows/s ({dv_read_s:.3f} s)")
    print(f"latest read without (merge on read): {plain_rate:,.0f} rows/s ({plain_read_s:.3f} s)")
    if delta_s is None or delta_ratio is None:
        print("delta-rs: not installed (pip install deltalake to compare)")
    else:
        print(f"delta-rs read: {live / delta_s:,.0f} rows/s ({delta_s:.3f} s); with deletion vectors we read at "
              f"{delta_ratio:.2f}x delta-rs (median of {READS} alternating pairs)")


if __name__ == "__main__":
    main()
