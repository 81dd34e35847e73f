"""Issue 24 benchmark: the Spark sink on every primary-key bucket mode, as the table grows.

One stream of ``--batches`` micro-batches of ``--batch`` rows (default 100 x 100,000 = 10M; the
upsert workload of ``ingest_read.py``: 70% new keys, 25% updates, 5% deletes, 4 partitions, of
which ``--move`` of the updates give their key another partition) from Parquet files, on
``local[2]``, written by ``changelake.streaming``'s sink with ``changelog-producer = lookup``
into a table with fixed buckets (``bucket = 4``), a dynamic-bucket one and a cross-partition one
(primary key ``id`` without the partition column ``dt``: moved keys are deleted from their old
partition), and by ``foreachBatch`` with plain ``batch_df.write.parquet``. Printed per table:
rows/s, its ratio to plain Parquet, and the p50 of the per-batch trigger time of the last tenth
of the batches over the first tenth's (flat: <= 1.3). Each table's rows are checked against the
model of the workload.

Run: ./dev bench spark_table_kinds [--batches 100] [--batch 100000] [--move 0.1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from cross_partition_ingest import model, moving_batches
from ingest_read import SCHEMA
from pyspark.sql import DataFrame
from spark_sink import input_files, run_query, session, stream_of

import changelake as cl
from changelake import streaming

KINDS = {
    "fixed": (["dt", "id"], {"bucket": "4"}),
    "dynamic": (["dt", "id"], {"dynamic-bucket.target-row-num": "500000"}),
    "cross-partition": (["id"], {"dynamic-bucket.target-row-num": "500000"}),
}


def files_of(root: Path, tables: list[pa.Table]) -> Path:
    folder = root / "input"
    folder.mkdir()
    for i, batch in enumerate(tables):
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(batch, path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source reads in modification order
    return folder


def flatness(durations: list[float]) -> tuple[float, float]:
    """p50 of the first and the last tenth of the batches (ms)."""
    tenth = max(1, len(durations) // 10)
    return statistics.median(durations[:tenth]), statistics.median(durations[-tenth:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--move", type=float, default=0.1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="changelake-spark-kinds-"))
    spark = session()
    try:
        tables, moved = moving_batches(args.batches, args.batch, args.move)
        folder = files_of(root, tables)
        total = args.batches * args.batch
        out = root / "plain"

        def plain(df: DataFrame, batch_id: int) -> None:
            df.write.mode("append").parquet(str(out))

        # Warm up the JVM and the Python workers on a small query first.
        warm = cl.Catalog(str(root / "warehouse")).create_table("bench.warm", SCHEMA, primary_keys=["dt", "id"],
                                                                partition_keys=["dt"], options={"bucket": "2"})
        run_query(stream_of(spark, input_files(root, 2, 1000)), streaming.ForeachBatchSink(warm), root / "ck-warm")
        plain_s, plain_ms = run_query(stream_of(spark, folder), plain, root / "ck-plain")
        first, last = flatness(plain_ms)
        print(f"{total:,} rows in {args.batches} micro-batches on local[2], 4 partitions, changelog-producer=lookup, "
              f"{moved:,} updates move their key")
        print(f"plain parquet foreachBatch {total / plain_s:>11,.0f} rows/s   p50 first/last tenth "
              f"{first:.0f}/{last:.0f} ms")
        for kind, (keys, options) in KINDS.items():
            table = cl.Catalog(str(root / "warehouse")).create_table(
                f"bench.{kind.replace('-', '_')}", SCHEMA, primary_keys=keys, partition_keys=["dt"],
                options={"changelog-producer": "lookup", **options})
            sink_s, ms = run_query(stream_of(spark, folder), streaming.ForeachBatchSink(table), root / f"ck-{kind}")
            first, last = flatness(ms)
            want = model(tables, keys)
            got = table.scan().to_arrow().select(SCHEMA.names).sort_by([(k, "ascending") for k in keys])
            if not got.equals(want.cast(got.schema)):
                raise SystemExit(f"{kind}: the table's {got.num_rows:,} rows differ from the model's {want.num_rows:,}")
            buckets = len({(r["partition"], r["bucket"]) for r in table.system("buckets").to_pylist()})
            print(f"{kind:<16} sink {total / sink_s:>11,.0f} rows/s   ratio to plain {plain_s / sink_s:.2f}   "
                  f"p50 first/last tenth {first:.0f}/{last:.0f} ms = {last / first:.2f} (target <= 1.3)   "
                  f"{got.num_rows:,} rows in {buckets} buckets")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
