"""Issue 3 memory check: one 5,000,000-row write with write-buffer-size=64 mb.

The whole process (input table included) must stay under 1 GB peak RSS. Prints the peak RSS,
the time, and the same write with an unbounded buffer for comparison (each in a fresh process).

Run: ./dev bench bounded_memory [--rows 5000000]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import changelake as cl

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("qty", pa.int32()),
    ]
)


def child(rows: int, buffer: str | None) -> None:
    rng = np.random.default_rng(11)
    ids = rng.permutation(rows).astype(np.int64)
    data = pa.table({
        "id": ids,
        "name": pc.binary_join_element_wise("name-", pa.array(ids % 1000).cast(pa.string()), ""),
        "amount": rng.random(rows),
        "qty": rng.integers(0, 1000, rows, dtype=np.int32),
    })
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    work = tempfile.mkdtemp(prefix="changelake-mem-")
    try:
        options = {"bucket": "2"}
        if buffer is not None:
            options["write-buffer-size"] = buffer
        table = cl.Catalog(work).create_table("bench.t", SCHEMA, primary_keys=["id"], options=options)
        start = time.perf_counter()
        table.write(data)
        seconds = time.perf_counter() - start
        stored = sum(s.delta_record_count or 0 for s in table.snapshots())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mb": peak, "input_mb": data.nbytes / 2**20,
                      "rss_before_write_mb": base_rss, "rows": stored}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--child", choices=["bounded", "unbounded"])
    args = parser.parse_args()
    if args.child:
        child(args.rows, "64 mb" if args.child == "bounded" else "4 gb")
        return
    for mode in ("bounded", "unbounded"):
        out = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--child", mode],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        label = "write-buffer-size=64 mb" if mode == "bounded" else "write-buffer-size=4 gb"
        print(f"{label}: {args.rows:,} rows in {r['seconds']:.1f} s ({args.rows / r['seconds']:,.0f} rows/s); "
              f"peak RSS {r['peak_mb']:,.0f} MB (input table {r['input_mb']:,.0f} MB, "
              f"RSS before the write {r['rss_before_write_mb']:,.0f} MB)"
              + ("; target < 1024 MB" if mode == "bounded" else ""))


if __name__ == "__main__":
    main()
