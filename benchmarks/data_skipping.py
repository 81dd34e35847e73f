"""Issue 28 benchmark: data skipping by value statistics.

A deletion-vector primary-key table (``id`` key, an event time ``ts`` that grows with it, as
an ingest-ordered log has) of ``--rows`` rows written in commits of ``--batch``, then 1% of
the keys updated (deletion vectors mark their old rows). Read with a 1%-selective filter on the
value column ``ts``, once from a table written with value statistics (the default
``metadata.stats-mode``, ``truncate(16)``) and once from the same table written with
``metadata.stats-mode = none`` (the baseline: every file is opened). Prints the files and
bytes each read opens (the planned files' sizes) and the best-of-N read times.
Target: <= 5% of the baseline's bytes and >= 10x faster.

Run: ./dev bench data_skipping [--rows 10000000] [--batch 500000] [--buckets 2]
     [--target-file-size "1 mb"] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import changelake as cl

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("ts", pa.timestamp("ms")),
    pa.field("user", pa.string()),
    pa.field("amount", pa.float64()),
])
START_MS = 1_700_000_000_000


def rows(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    # ts follows the key with a little jitter: files sorted by key are clustered by time
    ts = START_MS + ids * 10 + rng.integers(0, 50, len(ids))
    return pa.table({
        "id": ids,
        "ts": pa.array(ts, pa.timestamp("ms")),
        "user": pa.array(np.char.add("user-", (ids % 100_000).astype(str))),
        "amount": rng.random(len(ids)) * 100,
    }, schema=SCHEMA)


def build(catalog: cl.Catalog, name: str, options: dict[str, str], total: int, batch: int) -> float:
    rng = np.random.default_rng(7)
    table = catalog.create_table(name, SCHEMA, primary_keys=["id"], options=options)
    start = time.perf_counter()
    for lo in range(0, total, batch):
        table.write(rows(np.arange(lo, min(total, lo + batch), dtype=np.int64), rng))
    updated = np.sort(rng.choice(total, max(1, total // 100), replace=False)).astype(np.int64)
    table.write(rows(updated, rng))
    return time.perf_counter() - start


def read(table: cl.Table, window: pc.Expression, repeat: int) -> tuple[int, int, float, pa.Table]:
    splits = table.scan(filter=window).plan()
    files = [f for s in splits for f in s.files]
    best = float("inf")
    result = pa.table({})
    for _ in range(repeat):
        start = time.perf_counter()
        result = table.scan(filter=window).to_arrow()
        best = min(best, time.perf_counter() - start)
    return len(files), sum(f.file_size for f in files), best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=500_000)
    parser.add_argument("--buckets", type=int, default=2)
    parser.add_argument("--target-file-size", default="1 mb")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="changelake-skipping-")
    try:
        catalog = cl.Catalog(root)
        options = {"bucket": str(args.buckets), "deletion-vectors.enabled": "true",
                   "target-file-size": args.target_file_size}
        t_stats = build(catalog, "db.stats", options, args.rows, args.batch)
        t_plain = build(catalog, "db.plain", {**options, "metadata.stats-mode": "none"}, args.rows, args.batch)
        print(f"{args.rows:,} rows written: {t_stats:.1f}s with statistics, {t_plain:.1f}s without")
        # a 1% window of event time in the middle of the table
        span = args.rows * 10
        low = START_MS + span // 2
        window = (pc.field("ts") >= pa.scalar(low, pa.timestamp("ms"))) & \
            (pc.field("ts") < pa.scalar(low + span // 100, pa.timestamp("ms")))
        stats_read = read(catalog.get_table("db.stats"), window, args.repeat)
        plain_read = read(catalog.get_table("db.plain"), window, args.repeat)
        same = stats_read[3].sort_by("id").select(["id", "ts"]).equals(plain_read[3].sort_by("id").select(["id", "ts"]))
        for label, (files, size, seconds, result) in (("statistics", stats_read), ("none (baseline)", plain_read)):
            print(f"{label:>16}: {files:4d} files, {size / 1e6:8.1f} MB opened, {seconds * 1000:8.1f} ms, "
                  f"{result.num_rows:,} rows")
        print(f"bytes read: {stats_read[1] / max(1, plain_read[1]):.1%} of the baseline (target <= 5%); "
              f"time: {plain_read[2] / stats_read[2]:.1f}x faster (target >= 10x); same rows: {same}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
