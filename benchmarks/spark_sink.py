"""Issue 10 benchmark: the Spark sink and source on local[2].

* Ingest: 2,000,000 rows (70% new keys, 25% updates, 5% deletes) as 20 micro-batches from a
  Parquet file stream into a 4-partition x bucket-4 table through ``changelake.streaming``'s
  sink, against the same stream written by ``foreachBatch`` with plain
  ``batch_df.write.parquet`` (target: >= 0.5x its rate).
* Overhead: 30 micro-batches of 1,000 rows through the sink against a no-op ``foreachBatch``
  (target: per-batch p50 <= 2x), with a bare ``mapInArrow`` job that only counts the rows for
  scale (the floor of any sink whose work runs in Python tasks).
* Read: ``readStream`` (AvailableNow) of the table's whole changelog against
  ``spark.read.parquet`` of the same changelog files (target: >= 0.25x).

Peak RSS of the driver's Python process is printed (the JVM's is its own).

The sink's per-batch latency is printed for the first and the last tenth of the batches (p50
each), to show whether it grows with the table (``--batches 500`` is 50M rows).

``--option KEY=VALUE`` sets an option of the ingest's table (``--option lookup-wait=false``: the
sink's writer stays in its Python worker and each batch's lookup compaction lands with a later
batch); ``--ingest-only`` stops after the ingest lines.

Run: ./dev bench spark_sink [--batches 20] [--batch 100000] [--option KEY=VALUE] [--ingest-only]
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from ingest_read import SCHEMA, batches
from pyspark.sql import DataFrame, SparkSession

import changelake as cl
from changelake import streaming


def session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("changelake-bench")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             # every micro-batch's progress is kept (Spark keeps the last 100): the tenths below
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def input_files(root: Path, count: int, size: int) -> Path:
    """The micro-batches as Parquet files, one per batch, in stream order."""
    folder = root / f"input-{count}x{size}"
    folder.mkdir()
    for i, batch in enumerate(batches(count, size)):
        path = folder / f"part-{i:04d}.parquet"
        pq.write_table(batch, path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source reads in modification order
    return folder


def stream_of(spark: SparkSession, folder: Path) -> DataFrame:
    schema = "dt string, id long, name string, amount double, qty int, rowkind string"
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(folder))


def run_query(df: DataFrame, function: Any, checkpoint: Path) -> tuple[float, list[float]]:
    """Wall seconds of an AvailableNow query and each batch's trigger time in ms."""
    start = time.perf_counter()
    query = (df.writeStream.foreachBatch(function).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    durations = [float(p["durationMs"]["triggerExecution"]) for p in query.recentProgress]
    return elapsed, durations


def count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})


def new_table(root: Path, name: str, producer: str = "lookup", extra: dict[str, str] | None = None) -> cl.Table:
    return cl.Catalog(str(root / "warehouse")).create_table(
        f"bench.{name}", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "4", "changelog-producer": producer, **(extra or {})})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a table option of the ingest's table (repeatable), e.g. lookup-wait=false")
    parser.add_argument("--ingest-only", action="store_true", help="skip the 1,000-row and read lines")
    args = parser.parse_args()
    extra = dict(o.split("=", 1) for o in args.option)
    root = Path(tempfile.mkdtemp(prefix="changelake-spark-bench-"))
    spark = session()
    try:
        total = args.batches * args.batch
        big = input_files(root, args.batches, args.batch)
        out = root / "plain"

        def plain(df: DataFrame, batch_id: int) -> None:
            df.write.mode("append").parquet(str(out))

        # Warm up the JVM and the Python workers on a small query first.
        warm = new_table(root, "warm")
        run_query(stream_of(spark, input_files(root, 2, 1000)), streaming.ForeachBatchSink(warm), root / "ck-warm")

        plain_s, _ = run_query(stream_of(spark, big), plain, root / "ck-plain")
        table = new_table(root, "orders", extra=extra)
        sink_s, sink_batches = run_query(stream_of(spark, big), streaming.ForeachBatchSink(table), root / "ck-sink")
        print(f"{total:,} rows in {args.batches} micro-batches, 4 partitions x bucket 4, changelog-producer=lookup"
              + "".join(f", {k}={v}" for k, v in extra.items()))
        print(f"ingest  sink {total / sink_s:>11,.0f} rows/s   plain parquet foreachBatch "
              f"{total / plain_s:>11,.0f} rows/s   ratio {plain_s / sink_s:.2f} (target >= 0.5)")
        tenth = max(1, len(sink_batches) // 10)
        first, last = statistics.median(sink_batches[:tenth]), statistics.median(sink_batches[-tenth:])
        print(f"ingest  sink per-batch p50: first tenth {first:.0f} ms, last tenth {last:.0f} ms, "
              f"ratio {last / first:.2f} (of {len(sink_batches)} batches)")
        latest = table.latest_snapshot()
        kinds = [table.snapshot(i).commit_kind.value for i in range(1, latest.id + 1)] if latest else []
        print(f"ingest  sink snapshots: {kinds.count('APPEND')} APPEND, {kinds.count('COMPACT')} COMPACT")
        if args.ingest_only:
            return

        small = input_files(root, 30, 1000)
        _, noop = run_query(stream_of(spark, small), lambda df, batch_id: None, root / "ck-noop")
        # The floor of any sink whose work runs in Python tasks: one mapInArrow job that only
        # counts the rows, and returns the count to the driver.
        _, bare = run_query(stream_of(spark, small),
                            lambda df, batch_id: df.mapInArrow(count_rows, "n long").collect(), root / "ck-bare")
        floor = statistics.median(bare) / statistics.median(noop)
        print(f"1,000-row batches, a bare mapInArrow job: p50 {statistics.median(bare):.0f} ms   "
              f"no-op p50 {statistics.median(noop):.0f} ms   ratio {floor:.2f}")
        for producer in ("none", "lookup"):
            sink = streaming.ForeachBatchSink(new_table(root, producer, producer))
            _, tiny = run_query(stream_of(spark, small), sink, root / f"ck-{producer}")
            ratio = statistics.median(tiny) / statistics.median(noop)
            print(f"1,000-row batches, changelog-producer={producer}: sink p50 {statistics.median(tiny):.0f} ms   "
                  f"no-op p50 {statistics.median(noop):.0f} ms   ratio {ratio:.2f} (target <= 2)")

        streaming.register(spark)
        changes = (spark.readStream.format("changelake").option("read.changelog", "true")
                   .option("scan.mode", "from-snapshot").option("scan.snapshot-id", "1").load(table.location))
        start = time.perf_counter()
        query = (changes.writeStream.format("noop").option("checkpointLocation", str(root / "ck-read"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        read_s = time.perf_counter() - start
        emitted = sum(p["numInputRows"] for p in query.recentProgress)
        files = [str(p) for p in Path(table.location).rglob("changelog-*.parquet")]
        start = time.perf_counter()
        spark.read.parquet(*files).write.format("noop").mode("overwrite").save()
        parquet_s = time.perf_counter() - start
        print(f"changelog read  readStream {emitted / read_s:>11,.0f} rows/s ({emitted:,} rows)   "
              f"spark.read.parquet {emitted / parquet_s:>11,.0f} rows/s   ratio {parquet_s / read_s:.2f} "
              "(target >= 0.25)")
        print(f"driver peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
