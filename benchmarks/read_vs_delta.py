"""Issue 28 benchmark: latest reads against delta-rs's, merge-on-read and with deletion vectors.

The 2M-row upsert workload of ``deletion_vectors.py`` (20 commits of 100,000: 70% new keys, 25%
updates, 5% deletes; 4 partitions, bucket 4, compaction on, default options) is written to a
table without deletion vectors (read merge-on-read) and to one with ``deletion-vectors.enabled``;
their live rows (checked equal) are written as a Delta table partitioned like ours (the layout
copy-on-write merges leave). Then, in a fresh process, the three full reads of the latest
snapshot (``table.scan().to_arrow()``, ``DeltaTable(...).to_pyarrow_table()``) are timed in
``--reads`` rounds after a warm-up, the three in a rotating order each round (the machine's speed
drifts, and other work shares it); each ratio (delta-rs's seconds / ours) is the median of the
rounds' ratios.

``--decode`` also prints where most of a read's CPU goes: pyarrow's decoding of each column the
reads return, on one thread, from the deletion-vector table's files of the latest snapshot and
from the Delta table's files, in the same fresh process (``name`` as each read decodes it: ours
as a dictionary, decoded to strings after the deletion vectors' filter, delta-rs's as strings).

Run: ./dev bench read_vs_delta [--commits 20] [--batch 100000] [--reads 21] [--tables DIR] [--decode]
(``--tables DIR`` keeps the tables in DIR and reuses them when DIR holds them already)
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq
from deletion_vectors import _sorted, ingest
from ingest_read import SCHEMA

import changelake as cl

try:
    import deltalake  # benchmark-only (the ``bench`` extra)
except ImportError:  # pragma: no cover - the script says what is missing
    deltalake = None


def build(root: str, commits: int, size: int) -> None:
    """The merge-on-read table, the deletion-vector table and the Delta table under ``root``."""
    plain, _ = ingest(f"{root}/plain", commits, size, vectors=False, deletes=0.05)
    vectors, _ = ingest(f"{root}/dv", commits, size, vectors=True, deletes=0.05)
    plain_rows, dv_rows = plain.scan().to_arrow(), vectors.scan().to_arrow()
    if not _sorted(plain_rows).equals(_sorted(dv_rows)):
        sys.exit(f"results differ: merge-on-read {plain_rows.num_rows} rows, with vectors {dv_rows.num_rows}")
    deltalake.write_deltalake(f"{root}/delta", dv_rows.select(SCHEMA.names), partition_by=["dt"])


def _timed(read: Callable[[], pa.Table]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (every thread of the process) of one read."""
    start, cpu = time.perf_counter(), time.process_time()
    read()
    return time.perf_counter() - start, time.process_time() - cpu


def time_reads(root: str, reads: int) -> dict[str, list[tuple[float, float]]]:
    """Wall and CPU seconds of each read in every round (fresh process: the ingest's
    allocations left behind slow later reads unevenly); the results are checked equal first."""
    plain, vectors = cl.open_table(f"{root}/plain/bench.db/orders"), cl.open_table(f"{root}/dv/bench.db/orders")
    named: dict[str, Callable[[], pa.Table]] = {
        "merge-on-read": lambda: plain.scan().to_arrow(),
        "deletion vectors": lambda: vectors.scan().to_arrow(),
        "delta-rs": lambda: deltalake.DeltaTable(f"{root}/delta").to_pyarrow_table(),
    }
    results = [_sorted(read()) for read in named.values()]  # also the warm-up
    if not all(r.equals(results[0]) for r in results[1:]):
        sys.exit(f"reads differ: {[r.num_rows for r in results]} rows")
    names = list(named)
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for i in range(reads):
        for name in names[i % 3:] + names[:i % 3]:
            seconds[name].append(_timed(named[name]))
    seconds["rows"] = [(float(results[0].num_rows), 0.0)]
    return seconds


def _decode(paths: list[str], column: str, *, dictionary: bool) -> None:
    for path in paths:
        pq.ParquetFile(path, read_dictionary=[column] if dictionary else None).read(columns=[column], use_threads=False)


def decode_seconds(root: str, rounds: int = 7) -> dict[str, dict[str, float]]:
    """CPU seconds pyarrow takes, on one thread, to decode each value column from the
    deletion-vector table's data files of the latest snapshot and from the Delta table's
    files (the median of ``rounds``), by table then column."""
    pa.set_cpu_count(1)
    scan = cl.open_table(f"{root}/dv/bench.db/orders").scan()
    files = {"ours": [scan.read_context.file_path(s.bucket_dir, f) for s in scan.plan() for f in s.files],
             "delta-rs": [str(p) for p in sorted(pathlib.Path(root, "delta").rglob("*.parquet"))]}
    seconds: dict[str, dict[str, float]] = {}
    for name, paths in files.items():
        seconds[name] = {}
        for column in (c for c in SCHEMA.names if c != "dt"):
            # ours decodes strings from dictionaries after the filter; delta-rs's read, as strings
            dictionary = name == "ours" and pa.types.is_string(SCHEMA.field(column).type)
            read = functools.partial(_decode, paths, column, dictionary=dictionary)
            seconds[name][column] = statistics.median(_timed(read)[1] for _ in range(rounds))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=21, help="timed rounds of the three reads")
    parser.add_argument("--tables", help="keep the tables here (reused when present)")
    parser.add_argument("--decode", action="store_true", help="also time pyarrow's decoding of each column")
    args = parser.parse_args()
    if deltalake is None:
        sys.exit("delta-rs is not installed: pip install deltalake (or the bench extra)")
    root = args.tables or tempfile.mkdtemp(prefix="changelake-bench-")
    try:
        if not os.path.exists(f"{root}/delta"):
            start = time.perf_counter()
            build(root, args.commits, args.batch)
            print(f"tables written in {time.perf_counter() - start:.1f} s")
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            seconds = pool.apply(time_reads, (root, args.reads))
            decoding = pool.apply(decode_seconds, (root,)) if args.decode else {}
        files = {name: cl.open_table(f"{root}/{name}/bench.db/orders").system("files").num_rows
                 for name in ("plain", "dv")}
    finally:
        if args.tables is None:
            shutil.rmtree(root, ignore_errors=True)
    live = int(seconds.pop("rows")[0][0])
    print(f"live rows: {live:,}; files in the latest snapshot: {files['plain']} merge-on-read, "
          f"{files['dv']} with deletion vectors; {args.reads} rounds of the three reads, rotating order; "
          f"load average {os.getloadavg()[0]:.1f} (other work on the machine slows the reads unevenly)")
    delta = [wall for wall, _ in seconds["delta-rs"]]
    delta_cpu = statistics.median(cpu for _, cpu in seconds["delta-rs"])
    for name, timed in seconds.items():
        times = [wall for wall, _ in timed]
        median, cpu = statistics.median(times), statistics.median(c for _, c in timed)
        line = (f"{name}: {live / median:,.0f} rows/s (median {median:.3f} s, min {min(times):.3f} s; "
                f"CPU {cpu:.3f} s a read)")
        if name != "delta-rs":
            ratios = [d / t for d, t in zip(delta, times, strict=True)]
            low, _, high = statistics.quantiles(ratios, n=4)
            line += (f"; {statistics.median(ratios):.2f}x delta-rs (median of the rounds' ratios; quartiles "
                     f"{low:.2f}-{high:.2f}; by CPU seconds {delta_cpu / cpu:.2f}x)")
        print(line)
    for name, columns in decoding.items():
        each = ", ".join(f"{column} {1000 * cpu:.1f}" for column, cpu in columns.items())
        print(f"{name}: decoding on one thread, CPU ms: {each}; all {1000 * sum(columns.values()):.1f}")


if __name__ == "__main__":
    main()
