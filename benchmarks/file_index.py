"""Issue 28 benchmark: data skipping by file indexes (bloom filters).

An append table and a deletion-vector primary-key table of ``--rows`` rows, written in commits
of ``--batch``, with a high-cardinality string column ``uid`` (random, so its value statistics
span every file and skip none) and a bloom filter on it (``file-index.bloom-filter.columns =
uid``, Paimon's default sizing: 1,000,000 items, fpp 0.1). Each is written twice, with and
without the index (the deletion-vector table then updates 1% of its keys). Prints, per
table kind: the ingest rate with and without the index, and for point reads (``uid = v`` for
``--lookups`` values each in one file, best of ``--repeat``) the files and bytes opened and the
read time with the index against the table without (where every file is opened). Ingest is
timed in ``--ingest-repeat`` alternating pairs (best of each, wall and CPU of every thread),
the input batches made first.

Run: ./dev bench file_index [--rows 2000000] [--batch 500000] [--target-file-size "8 mb"]
     [--lookups 5] [--repeat 3] [--ingest-repeat 2]
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
    pa.field("uid", pa.string()),
    pa.field("amount", pa.float64()),
])
INDEX = {"file-index.bloom-filter.columns": "uid"}


def rows(ids: np.ndarray) -> pa.Table:
    # uid: a 16-hex-digit hash of the id, so any file's values spread over the whole range
    hashed = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0x5851F42D4C957F2D)
    return pa.table({
        "id": ids,
        "uid": pa.array(np.char.add("u", np.char.zfill(np.char.mod("%x", hashed), 16))),
        "amount": (ids % 1000).astype(np.float64) / 10,
    }, schema=SCHEMA)


def build(catalog: cl.Catalog, name: str, keys: list[str], options: dict[str, str], batches: list[pa.Table],
          updates: pa.Table) -> tuple[float, float]:
    """Write the table; returns the wall and CPU seconds (every thread of the process) the
    appends took (the deletion-vector table's updates are not timed: they are the same work
    with and without the index)."""
    table = catalog.create_table(name, SCHEMA, primary_keys=keys, options=options)
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        table.write(batch)
    seconds = (time.perf_counter() - start, time.process_time() - cpu)
    if keys:
        table.write(updates)
    return seconds


def lookups(table: cl.Table, wanted: list[str], repeat: int) -> tuple[int, int, float, int]:
    """Files and bytes the point reads open, their summed best-of-``repeat`` time, rows found."""
    files = size = found = 0
    seconds = 0.0
    for value in wanted:
        where = pc.field("uid") == value
        planned = [f for s in table.scan(filter=where).plan() for f in s.files]
        files += len(planned)
        size += sum(f.file_size for f in planned)
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            found_now = table.scan(filter=where).to_arrow().num_rows
            best = min(best, time.perf_counter() - start)
        found += found_now
        seconds += best
    return files, size, seconds, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=500_000)
    parser.add_argument("--target-file-size", default="8 mb")
    parser.add_argument("--lookups", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ingest-repeat", type=int, default=2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="changelake-file-index-")
    step = args.rows // args.lookups
    wanted_ids = np.array([step // 2 + i * step for i in range(args.lookups)], dtype=np.int64)
    wanted = rows(wanted_ids).column("uid").to_pylist()
    try:
        catalog = cl.Catalog(root)
        kinds = {"append": ([], {"bucket": "-1"}),
                 "deletion vectors": (["id"], {"bucket": "2", "deletion-vectors.enabled": "true"})}
        batches = [rows(np.arange(lo, min(args.rows, lo + args.batch), dtype=np.int64))
                   for lo in range(0, args.rows, args.batch)]
        rng = np.random.default_rng(7)
        updates = rows(np.sort(rng.choice(args.rows, max(1, args.rows // 100), replace=False)).astype(np.int64))
        for n, (kind, (keys, options)) in enumerate(kinds.items()):
            options = {**options, "target-file-size": args.target_file_size}
            # ingest timed in alternating pairs (the machine is shared): the best of each
            runs: dict[str, list[tuple[float, float]]] = {"plain": [], "indexed": []}
            for attempt in range(args.ingest_repeat):
                suffix = "" if attempt == 0 else f"_{attempt}"
                runs["plain"].append(build(catalog, f"db.plain{n}{suffix}", keys, options, batches, updates))
                runs["indexed"].append(build(catalog, f"db.indexed{n}{suffix}", keys, {**options, **INDEX},
                                             batches, updates))
            # the best wall time and the least CPU of each
            plain, indexed = ((min(w for w, _ in r), min(c for _, c in r)) for r in runs.values())
            with_index = lookups(catalog.get_table(f"db.indexed{n}"), wanted, args.repeat)
            without = lookups(catalog.get_table(f"db.plain{n}"), wanted, args.repeat)
            total = sum(len(s.files) for s in catalog.get_table(f"db.plain{n}").scan().plan())
            print(f"{kind}: {args.rows:,} rows in {total} files")
            print(f"  ingest: {args.rows / indexed[0]:,.0f} rows/s with the index, {args.rows / plain[0]:,.0f} "
                  f"without ({plain[0] / indexed[0]:.2f}x the rate); CPU {indexed[1] * 1e9 / args.rows:.0f} ns/row "
                  f"with, {plain[1] * 1e9 / args.rows:.0f} without ({indexed[1] / plain[1]:.2f}x)")
            for label, (files, size, seconds, found) in (("index", with_index), ("no index", without)):
                print(f"  {label:>8}: {files / args.lookups:5.1f} files, {size / args.lookups / 1e6:7.1f} MB opened, "
                      f"{seconds / args.lookups * 1000:7.1f} ms per lookup ({found} rows found)")
            print(f"  point reads: {with_index[1] / max(1, without[1]):.1%} of the bytes, "
                  f"{without[2] / with_index[2]:.1f}x faster; same rows: {with_index[3] == without[3] == args.lookups}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
