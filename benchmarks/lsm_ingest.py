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

Issue 13: ``--rows N`` is the scale run instead: N rows in commits of ``--batch`` rows (100M:
1,000 commits) by one long-lived writer with expiry on, a generator whose memory does not grow
with the table's history (a bitmap of live ids), and the figures the issue asks for: peak RSS
(target < 2 GB), first-100 and last-100 commit p50 (target ratio <= 1.5), a streamed read of the
latest snapshot (rows counted batch by batch, never held at once), and bytes on disk against the
live data. ``--deletion-vectors`` makes the table a deletion-vector one, ``--option`` sets
others (``lookup-wait=false``, ``lookup-compact=gentle``: what such a writer leaves at level 0,
which readers skip, goes up in a last ``table.compact()``, timed with the last commit).

Run: ./dev bench lsm_ingest [--commits 100] [--batch 100000] [--no-small] [--time-retained "1 s"]
     ./dev bench lsm_ingest --rows 100000000 [--deletion-vectors] [--option KEY=VALUE]
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
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))

from ingest_read import PARTITIONS, SCHEMA, batches, compact_level0_left

import changelake as cl
from changelake.table.format.manifest import FileKind
from changelake.table.format.snapshot import CommitKind
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


def scale_batches(commits: int, size: int, seed: int = 7) -> Iterator[pa.Table]:
    """:func:`ingest_read.batches`'s mix (70% new keys, 25% updates, 5% deletes of live keys) for
    any number of commits: live ids are a bitmap over the ids handed out, and updates and
    deletes are drawn from it by rejection, so each batch costs the same at any history."""
    rng = np.random.default_rng(seed)
    live = np.zeros(commits * size, dtype=np.bool_)
    next_id = 0
    names = pa.array([f"name-{i % 1000}" for i in range(size)])
    for _ in range(commits):
        n_new = int(size * 0.70) if next_id else size
        n_old = size - n_new
        picked = np.zeros(0, dtype=np.int64)
        while picked.size < n_old:  # live ids are most of those handed out: few rounds
            draw = rng.integers(0, next_id, int(n_old * 1.5) + 16)
            picked = np.unique(np.concatenate([picked, draw[live[draw]]]))
        picked = rng.permutation(picked)[:n_old]
        upd, dele = picked[: int(size * 0.25)], picked[int(size * 0.25):]
        new = np.arange(next_id, next_id + n_new, dtype=np.int64)
        next_id += n_new
        live[new] = True
        live[dele] = False
        ids = np.concatenate([new, upd, dele])
        kinds = np.concatenate([np.full(n_new, "+I"), np.full(upd.size, "+U"), np.full(dele.size, "-D")])
        yield pa.table({
            "dt": np.array(PARTITIONS)[ids % 4], "id": ids, "name": names,
            "amount": rng.random(size) * 100, "qty": rng.integers(0, 1000, size, dtype=np.int32),
            "rowkind": kinds,
        })


def rows_rewritten(table: cl.Table, after: int) -> int:
    """Rows of the data files that the compactions of the snapshots after ``after`` rewrote
    (removed, not just moved to another level): the work a commit's compaction does."""
    ctx = table.context
    latest = ctx.latest_snapshot()
    total = 0
    for snapshot_id in range(after + 1, 0 if latest is None else latest.id + 1):
        snapshot = ctx.snapshot(snapshot_id)
        if snapshot.commit_kind is not CommitKind.COMPACT:
            continue
        entries = [e for m in live_files.manifest_list(ctx, snapshot.delta_manifest_list)
                   for e in live_files.manifest_entries(ctx, m.file_name)]
        added = {e.file.file_name for e in entries if e.kind is FileKind.ADD}
        total += sum(e.file.row_count for e in entries if e.kind is FileKind.DELETE and e.file.file_name not in added)
    return total


def scale(rows: int, size: int, options: dict[str, str]) -> None:
    """The scale run (see the module docstring); prints its figures."""
    commits = rows // size
    work = tempfile.mkdtemp(prefix="changelake-scale-")
    try:
        table = cl.Catalog(work).create_table(
            "bench.orders", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "4", **options})
        print(f"{commits * size:,} rows in {commits:,} commits of {size:,}, options {options}", flush=True)
        durations: list[float] = []
        cpu: list[float] = []  # the process's CPU seconds (all threads) per commit: the work, whatever the load
        rewritten: list[int] = []  # rows the commit's compactions rewrote
        writer = table.writer(commit_user="bench-job")
        started = time.perf_counter()
        for identifier, batch in enumerate(scale_batches(commits, size)):
            before = table.latest_snapshot()
            start, start_cpu = time.perf_counter(), time.process_time()
            writer.write(batch)
            writer.commit(identifier)
            durations.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            rewritten.append(rows_rewritten(table, 0 if before is None else before.id))
            if (identifier + 1) % 100 == 0:
                print(f"  {identifier + 1:,} commits, {time.perf_counter() - started:,.0f} s, "
                      f"last p50 {statistics.median(durations[-100:]) * 1000:.0f} ms, "
                      f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB", flush=True)
        writer.close()
        durations[-1] += compact_level0_left(table)  # timed with the last commit
        window = min(100, max(1, commits // 10))
        first, last = statistics.median(durations[:window]), statistics.median(durations[-window:])
        ingest_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        files, nbytes = disk_usage(table.location)
        live = live_files.live_entries(table.context, table.latest_snapshot())
        live_bytes = sum(e.file.file_size for e in live)
        start = time.perf_counter()
        read = sum(b.num_rows for b in table.scan().to_batches())
        read_s = time.perf_counter() - start
        print(f"  ingest: {commits * size / sum(durations):,.0f} rows/s")
        print(f"  per commit p50, first {window}: {first * 1000:.0f} ms, last {window}: {last * 1000:.0f} ms "
              f"(ratio {last / first:.2f}, target <= 1.5)")
        first_cpu, last_cpu = statistics.median(cpu[:window]), statistics.median(cpu[-window:])
        print(f"  per commit CPU p50 (all threads; other jobs on the machine do not inflate it), first {window}: "
              f"{first_cpu * 1000:.0f} ms, last {window}: {last_cpu * 1000:.0f} ms (ratio {last_cpu / first_cpu:.2f})")
        slowest = sorted(range(commits), key=lambda i: durations[i])[-5:]
        print("  slowest commits: " + ", ".join(f"#{i + 1} {durations[i]:.1f} s" for i in reversed(slowest)))
        for start_at in range(0, commits, window):
            part = sorted(durations[start_at:start_at + window])
            cpu_part, rows_part = cpu[start_at:start_at + window], rewritten[start_at:start_at + window]
            print(f"  commits {start_at + 1}-{start_at + len(part)}: p50 {part[len(part) // 2] * 1000:.0f} ms, "
                  f"p90 {part[int(0.9 * (len(part) - 1))] * 1000:.0f} ms, total {sum(part):.0f} s; CPU p50 "
                  f"{statistics.median(cpu_part) * 1000:.0f} ms; rows rewritten p50 "
                  f"{statistics.median(rows_part):,.0f}, mean {statistics.mean(rows_part):,.0f}")
        print(f"  peak RSS during ingest: {ingest_rss:,.0f} MB (target < 2,048; the generator's live-id "
              f"bitmap is {commits * size / 2**20:,.0f} MB of it)")
        print(f"  latest read (streamed): {read:,} live rows in {read_s:.1f} s = {read / read_s:,.0f} rows/s")
        print(f"  peak RSS after the read: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
        print(f"  on disk: {files:,} data files, {nbytes / 2**20:,.0f} MB; live: {len(live):,} files, "
              f"{live_bytes / 2**20:,.0f} MB (x{nbytes / live_bytes:.2f}, target <= 2); "
              f"{len(table.snapshots())} snapshots retained")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--no-small", action="store_true", help="skip the 2.5M-row comparison run")
    parser.add_argument("--time-retained", default="1 s", help="snapshot.time-retained of the runs with expiry")
    parser.add_argument("--rows", type=int, help="the scale run instead: this many rows, expiry on")
    parser.add_argument("--deletion-vectors", action="store_true", help="the scale run on a deletion-vector table")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a table option of the scale run (repeatable)")
    args = parser.parse_args()
    expiry = {"snapshot.time-retained": args.time_retained}
    if args.rows:
        vectors = {"deletion-vectors.enabled": "true"} if args.deletion_vectors else {}
        scale(args.rows, args.batch, expiry | vectors | dict(o.split("=", 1) for o in args.option))
        return
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
