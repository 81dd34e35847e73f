"""Issue 25 benchmark: a full compaction of a 10M-row table on Spark's executors
(``streaming.compact``) against ``table.compact()`` in one process, on copies of one table.

The table: the upsert workload of ``ingest_read.py`` (70% new keys, 25% updates, 5% deletes, 4
partitions x bucket 4), ``--rows`` rows in commits of ``--batch`` rows, written ``write-only`` so
that every commit leaves a level-0 file in each bucket. Both compactions merge every bucket into
its top level (``full``); the two results are checked to hold the same rows. Spark runs on
local[2], the same two cores the one process uses, or with ``--cluster`` on a standalone cluster
started here (a master and one worker of two cores on loopback, two executors of one core, each
task in an executor's Python); the session's first job, which starts its executors and Python
workers, compacts a third copy and is timed apart.

Run: ./dev bench spark_compact [--rows 10000000] [--batch 1000000] [--cluster]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ingest_read import SCHEMA, batches
from pyspark.sql import SparkSession
from spark_sink import session

import changelake as cl
from changelake import streaming

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))
from spark_support import QUICK_JVM, SRC, standalone_cluster  # noqa: E402  (tests/ put on the path above)


@contextlib.contextmanager
def spark_on(root: Path, *, cluster: bool) -> Iterator[tuple[SparkSession, str]]:
    """A session on local[2], or on a standalone cluster started under ``root``; and its name."""
    if not cluster:
        spark = session()
        try:
            yield spark, "local[2]"
        finally:
            spark.stop()
        return
    with standalone_cluster(root / "cluster", memory="4g") as master_url:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (SparkSession.builder.master(master_url).appName("changelake-bench")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.executor.cores", "1").config("spark.cores.max", "2")
                 .config("spark.executor.memory", "1g").config("spark.executorEnv.PYTHONPATH", SRC)
                 .config("spark.executor.extraJavaOptions", QUICK_JVM).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            yield spark, "standalone cluster, 2 executors"
        finally:
            spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=1_000_000)
    parser.add_argument("--cluster", action="store_true", help="run Spark on a standalone cluster started here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="changelake-compact-"))
    try:
        table = cl.Catalog(str(root / "warehouse")).create_table(
            "bench.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "4", "write-only": "true"})
        start = time.perf_counter()
        for data in batches(args.rows // args.batch, args.batch):
            table.write(data)
        print(f"{args.rows:,} rows written write-only in {time.perf_counter() - start:.1f} s")
        shutil.copytree(table.location, root / "copy")
        local = cl.open_table(str(root / "copy"))
        shutil.copytree(table.location, root / "warm")
        warm = cl.open_table(str(root / "warm"))

        start = time.perf_counter()
        local.compact(full=True)
        local_s = time.perf_counter() - start
        with spark_on(root, cluster=args.cluster) as (spark, where):
            # The session's first job starts its Python workers (and imports changelake there):
            # timed apart, on a copy of the same table.
            start = time.perf_counter()
            streaming.compact(spark, warm, full=True)
            cold_s = time.perf_counter() - start
            start = time.perf_counter()
            streaming.compact(spark, table, full=True)
            spark_s = time.perf_counter() - start
        key = [("dt", "ascending"), ("id", "ascending")]
        assert table.scan().to_arrow().sort_by(key).equals(local.scan().to_arrow().sort_by(key)), "results differ"
        buckets = len(table.inspect().buckets)
        print(f"full compaction of {buckets} buckets: table.compact() {local_s:.1f} s   "
              f"streaming.compact ({where}) {spark_s:.1f} s (the session's first: {cold_s:.1f} s)   "
              f"ratio {spark_s / local_s:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
