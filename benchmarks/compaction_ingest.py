"""Issue 13 benchmark: the upsert ingest of ingest_read.py with default options (compaction on).

2,000,000 rows in 20 commits of 100,000 (70% new keys, 25% updates, 5% deletes), 4 partitions,
bucket 4 and nothing else set, against the floor: the same batches written as plain Parquet
files (zstd level 1) in the same run. Prints ingest rows/s and its ratio to the floor, per-commit
latencies (p50 of the first and of the last ten commits), the data files at the end, the latest
read's rows/s and the peak RSS. ``--one-shot`` writes each batch with ``Table.write`` (a writer
per commit, waiting for compaction) instead of one long-lived writer committing once per batch.
``--option KEY=VALUE`` sets a table option (repeatable); a table with deletion vectors whose
writer left rows at level 0 (``lookup-compact=gentle``, ``lookup-wait=false``), which its
readers skip, gets a last ``table.compact()`` timed with the ingest.

``--profile`` adds where the time went, the engine's worker threads included: the main thread
and every task the shared pool runs are profiled (cProfile per thread), and the time of the
engine's phases is summed over all threads.

``--pairs N`` (default 3) makes N ingest runs, each next to a floor run (in alternating order:
the machine's speed drifts), and prints every pair's ratio and the median pair's figures.

The floor writes on one core; the ingest uses every core it has. The CPU seconds a row costs in
each (the ingest's: the process's, every thread's) tell how many cores the ingest needs to reach
a ratio; ``--cpus N`` runs both on the first N cores only (Linux), to see the ratio scale.

Run: ./dev bench compaction_ingest [--commits 20] [--batch 100000] [--one-shot] [--profile] [--option K=V]
     [--pairs 3] [--cpus N]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from ingest_read import SCHEMA, batches, compact_level0_left, run_floor

import changelake as cl
from changelake.table import executor
from changelake.table.read import live_files

# (label, file path suffix, function name): the engine's phases, as cumulative time
PHASES = [
    ("flush: bucket + sort", "write/bucketing.py", "sort_flush"),
    ("flush: merge within batch", "write/bucketing.py", "merge_flush"),
    ("flush: level-0 files", "write/writer.py", "_write_level0"),
    ("data files: parquet encode + write", "format/data_file.py", "write"),
    ("compaction (whole)", "lsm/compactor.py", "compact"),
    ("compaction: read inputs", "table/context.py", "read_file"),
    ("compaction: merge", "table/context.py", "merge_rows"),
    ("compaction: write outputs", "lsm/compactor.py", "_rewrite_files"),
    ("commit: waiting for compaction", "write/writer.py", "_collect"),
    ("commit: restore levels from table", "write/bucketing.py", "restored_files"),
    ("commit: manifests + snapshot", "commit/committer.py", "commit"),
    ("commit: snapshot expiry", "table/snapshot_expiry.py", "expire_after_commit"),
]


class ThreadProfiles:
    """cProfile of the main thread plus one per pool task, summed into one set of stats."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.main = cProfile.Profile()
        self.tasks: list[cProfile.Profile] = []
        self.active = True  # tasks submitted while False are not profiled

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                return fn(*args, **kwargs)
            # CPU time of this thread: wall time of pool threads on 2 cores is mostly waiting
            profile = cProfile.Profile(time.thread_time)
            profile.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                profile.disable()
                with self.lock:
                    self.tasks.append(profile)
        return profiled

    def install(self) -> None:
        """Profile every task the engine's pools run (submit and map both go through submit)."""
        pools = [executor.executor()]
        if hasattr(executor, "compaction_executor"):  # background compactions' own thread
            pools.append(executor.compaction_executor())
        for pool in pools:
            submit = pool.submit

            def profiled_submit(fn: Callable[..., Any], /, *args: Any,
                                __submit: Callable[..., Any] = submit, **kwargs: Any) -> Any:
                if not self.active:
                    return __submit(fn, *args, **kwargs)
                return __submit(self.wrap(fn), *args, **kwargs)

            pool.submit = profiled_submit  # type: ignore[method-assign,assignment]

    def stats(self) -> tuple[pstats.Stats, pstats.Stats | None]:
        main = pstats.Stats(self.main)
        if not self.tasks:
            return main, None
        workers = pstats.Stats(self.tasks[0])
        for p in self.tasks[1:]:
            workers.add(p)
        return main, workers


def phase_seconds(stats: pstats.Stats | None) -> dict[str, float]:
    out = dict.fromkeys((label for label, _, _ in PHASES), 0.0)
    if stats is None:
        return out
    for (path, _, name), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        for label, suffix, fn in PHASES:
            if name == fn and path.endswith(suffix):
                out[label] += cumulative
    return out


def print_profile(profiles: ThreadProfiles, wall: float, cpu: float) -> None:
    main, workers = profiles.stats()
    on_main, on_workers = phase_seconds(main), phase_seconds(workers)
    print(f"\nwhere the time went ({wall:.2f} s wall, {cpu:.2f} s CPU of the process, for the "
          "ingest; phases nest; main: wall s, workers: CPU s summed over pool threads):")
    print(f"  {'phase':<40} {'main s':>8} {'worker s':>9}")
    for label, _, _ in PHASES:
        print(f"  {label:<40} {on_main[label]:>8.2f} {on_workers[label]:>9.2f}")
    for title, stats in (("main thread", main), ("worker threads", workers)):
        if stats is None:
            continue
        text = io.StringIO()
        stats.stream = text  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(18)
        lines = text.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        print(f"\n  top functions by own time, {title}:")
        for line in lines[start:]:
            if line.strip():
                print("   " + line[:150])


def run(root: str, commits: int, size: int, *, one_shot: bool, options: dict[str, str],
        profiles: ThreadProfiles | None) -> dict[str, Any]:
    table = cl.Catalog(root).create_table(
        "bench.orders", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "4", **options},
    )
    data = list(batches(commits, size))  # generated up front: the floor times writes only, too
    durations: list[float] = []
    if profiles is not None:
        profiles.main.enable()
    started, cpu_started = time.perf_counter(), time.process_time()
    writer = None if one_shot else table.writer(commit_user="bench-job")
    for identifier, batch in enumerate(data):
        start = time.perf_counter()
        if writer is None:
            table.write(batch)
        else:
            writer.write(batch)
            writer.commit(identifier)
        durations.append(time.perf_counter() - start)
    if writer is not None:
        start = time.perf_counter()
        writer.close()  # waits for a compaction still running: part of the ingest's cost
        durations[-1] += time.perf_counter() - start
    durations[-1] += compact_level0_left(table)  # part of the ingest
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if profiles is not None:  # the profile covers the ingest only
        profiles.main.disable()
        profiles.active = False
    start = time.perf_counter()
    rows = table.scan().to_arrow().num_rows
    read_s = time.perf_counter() - start
    latest = table.latest_snapshot()
    assert latest is not None
    files = len(live_files.live_entries(table.context, latest))
    return {"durations": durations, "read_s": read_s, "rows": rows, "files": files, "wall": wall, "cpu": cpu}


def pin_to_cores(count: int) -> int:
    """Keep this process (every thread it has and will have) on its first ``count`` cores."""
    allowed = sorted(os.sched_getaffinity(0))[:count]
    for thread in os.listdir("/proc/self/task"):  # threads made later inherit the mask
        os.sched_setaffinity(int(thread), allowed)
    return len(allowed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--one-shot", action="store_true", help="Table.write per batch, not one writer")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a table option beyond bucket 4 (to compare settings)")
    parser.add_argument("--pairs", type=int, default=3,
                        help="ingest and floor runs, in alternating order; ratios are per pair, then the median")
    parser.add_argument("--profile", action="store_true", help="where the time went, worker threads included")
    parser.add_argument("--cpus", type=int, help="run on the first N cores only (Linux)")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    if args.cpus is not None:
        cores = pin_to_cores(args.cpus)
    total = args.commits * args.batch
    profiles = ThreadProfiles() if args.profile else None
    if profiles is not None:
        profiles.install()
    options = dict(o.split("=", 1) for o in args.option)
    pairs: list[tuple[dict[str, Any], float]] = []
    for pair in range(1 if profiles is not None else args.pairs):
        # The machine's speed drifts over seconds: each ratio compares runs made back to back,
        # the floor first in every other pair.
        # The disk's writeback of one run's files is not left to slow the next (os.sync).
        work = tempfile.mkdtemp(prefix="changelake-bench-")
        try:
            if pair % 2:
                os.sync()
                floor = run_floor(f"{work}/plain", args.commits, args.batch)
            os.sync()
            r = run(f"{work}/cl", args.commits, args.batch, one_shot=args.one_shot, options=options,
                    profiles=profiles)
            if not pair % 2:
                os.sync()
                floor = run_floor(f"{work}/plain", args.commits, args.batch)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if r["rows"] != floor.rows:
            sys.exit(f"row count mismatch: changelake {r['rows']} vs floor {floor.rows}")
        pairs.append((r, floor))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ratios = [floor.write_s / sum(r["durations"]) for r, floor in pairs]
    r, floor = pairs[ratios.index(sorted(ratios)[(len(ratios) - 1) // 2])]  # the median pair
    durations = r["durations"]
    ingest_rate, floor_rate = total / sum(durations), total / floor.write_s
    first = statistics.median(durations[:10]) * 1000
    last = statistics.median(durations[-10:]) * 1000
    mode = "Table.write per batch" if args.one_shot else "one writer, a commit per batch"
    print(f"rows written: {total:,} in {args.commits} commits ({mode}); live rows at the end: {r['rows']:,}")
    print(f"pairs of runs: {len(pairs)}; the median pair's figures follow")
    print(f"changelake ingest: {ingest_rate:,.0f} rows/s ({sum(durations):.2f} s wall, "
          f"{r['cpu']:.2f} s CPU)")
    print(f"plain parquet write (floor): {floor_rate:,.0f} rows/s")
    print(f"ratio: ingest {ingest_rate / floor_rate:.2f}x of floor (target >= 0.6); every pair: "
          + ", ".join(f"{x:.2f}x" for x in ratios))
    cost = r["cpu"] / floor.write_cpu_s
    print(f"CPU per row: ingest {r['cpu'] / total * 1e6:.2f} us, floor {floor.write_cpu_s / total * 1e6:.2f} us "
          f"({cost:.2f}x); on {cores} cores the ingest reaches about {cores / cost:.2f}x of the floor, "
          f"0.6x takes {0.6 * cost:.1f} cores kept busy")
    # The CPU figure of every pair: on a shared machine the median of these is the steadier one.
    costs = [p["cpu"] / f.write_cpu_s for p, f in pairs]
    print(f"CPU per row, ingest / floor: median of pairs {statistics.median(costs):.2f}x (target <= 3); "
          "every pair: " + ", ".join(f"{x:.2f}x" for x in costs))
    print(f"per commit: first-10 p50 {first:.0f} ms, last-10 p50 {last:.0f} ms "
          f"(ratio {last / first:.2f}, target <= 1.5)")
    print(f"live data files at the end: {r['files']}")
    print(f"latest read: {r['rows'] / r['read_s']:,.0f} rows/s ({r['read_s']:.2f} s)")
    print(f"peak RSS: {peak:,.0f} MB")
    if profiles is not None:
        print_profile(profiles, r["wall"], r["cpu"])


if __name__ == "__main__":
    main()
