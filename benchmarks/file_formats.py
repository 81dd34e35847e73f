"""Issue 27 benchmark: full reads of ORC and Avro tables against their format readers alone.

A primary-key table of 2,000,000 rows (ints, strings, doubles), bucket 2, is written as ORC and
as Avro and fully compacted (one sorted level, read without a merge). changelake's full read
(``table.scan().to_arrow()``) is timed against reading the same data files directly: with
``pyarrow.orc`` for ORC, and with ``fastavro`` into Arrow (``pa.Table.from_pylist`` of its
records) for Avro. Target: within 1.5x of each.

Run: ./dev bench file_formats [--rows 2000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import functools
import glob
import shutil
import tempfile
import time
from collections.abc import Callable

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.orc as orc

import changelake as cl

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("qty", pa.int32()),
    pa.field("city", pa.string()),
])
TARGET = 1.5


def rows(count: int) -> pa.Table:
    rng = np.random.default_rng(27)
    ids = rng.permutation(count).astype(np.int64)
    cities = np.array(["Amsterdam", "Berlin", "Cairo", "Delhi", "Edinburgh", "Fez", "Geneva", "Hanoi"])
    return pa.table({
        "id": ids,
        "name": pa.array(np.char.add("customer-", ids.astype(str))),
        "amount": rng.random(count) * 1000,
        "qty": rng.integers(0, 100, count, dtype=np.int32),
        "city": pa.array(cities[rng.integers(0, len(cities), count)]),
    }, schema=SCHEMA)


def best(repeat: int, read: Callable[[], pa.Table | int]) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        result = read()
        count = result if isinstance(result, int) else result.num_rows
        times.append(time.perf_counter() - start)
    return min(times), count


def orc_direct(files: list[str]) -> int:
    return sum(orc.read_table(f).num_rows for f in files)


def avro_direct(files: list[str]) -> int:
    total = 0
    for path in files:
        with open(path, "rb") as f:
            total += pa.Table.from_pylist(list(fastavro.reader(f))).num_rows
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    data = rows(args.rows)
    failed = False
    print(f"{args.rows:,} rows, best of {args.repeat}")
    for file_format, direct in (("orc", orc_direct), ("avro", avro_direct)):
        warehouse = tempfile.mkdtemp(prefix=f"bench-{file_format}-")
        try:
            table = cl.Catalog(warehouse).create_table(
                "db.t", SCHEMA, primary_keys=["id"],
                options={"bucket": "2", "file.format": file_format, "target-file-size": "1 gb"})
            start = time.perf_counter()
            table.write(data)
            table.compact(full=True)
            written = time.perf_counter() - start
            files = sorted(glob.glob(f"{warehouse}/db.db/t/bucket-*/data-*.{file_format}"))
            ours, ours_rows = best(args.repeat, table.scan().to_arrow)
            theirs, their_rows = best(args.repeat, functools.partial(direct, files))
            assert ours_rows == their_rows == args.rows, (ours_rows, their_rows)
            ratio = ours / theirs
            failed |= ratio > TARGET
            reader = "pyarrow.orc" if file_format == "orc" else "fastavro -> Arrow"
            print(f"{file_format:>5}: write+compact {written:6.2f}s | changelake read {ours:6.2f}s | "
                  f"{reader} {theirs:6.2f}s | ratio {ratio:4.2f}x (target <= {TARGET}x)")
        finally:
            shutil.rmtree(warehouse, ignore_errors=True)
    print("FAIL" if failed else "OK")


if __name__ == "__main__":
    main()
