"""The driver that test_spark_cluster.py submits to a standalone cluster: it streams the JSON
change events of a directory into a table through ``changelake.streaming.write_stream``
(``availableNow``, one file per micro-batch), reads the table and its changelog back, and
prints one JSON object for the test to check:

* ``master``: the cluster it ran on;
* ``driver_pid``, ``task_ancestry``: this process, and for each of two tasks the processes
  (``[pid, command line]``) from its python worker up to init: on a cluster a task runs below an
  executor JVM and this driver is no task's ancestor (locally it is, by way of its JVM);
* ``query_id``; ``batches`` and ``commit_users``: the commit identifiers and users of the table's
  APPEND snapshots;
* ``rows``: the table's rows; ``changes``: its changelog from snapshot 0 (each with ``rowkind``);
* ``task_python``: for each of two tasks, its interpreter and the file it imported changelake from;
* ``procedures``: with ``--procedures``, what each of Paimon's procedures run on the cluster
  afterwards did (``compact``: the snapshot's kind and the files per level after it;
  ``rescale``: the buckets after it; ``orphans``: the files removed; ``expire``: the snapshots
  expired; each with its ``seconds``), and ``rows_after`` the table's rows after them.

Run as ``cluster_job.py --master spark://HOST:PORT --table LOCATION [--input DIR --checkpoint DIR
--schema DDL] [--storage-options JSON --read-options JSON] [--archive ENV.tar.gz]
[--procedures compact,rescale,orphans,expire]`` (the events' schema, as a Spark DDL string; for a
table on S3, its fsspec storage options and Paimon's ``s3.*`` options for the data source: the
executors get them inside the pickled table, not from their environment). Without ``--input``
nothing is streamed. Executors run this interpreter with this source tree on their
``PYTHONPATH``, or, with ``--archive``, the Python of that packed virtualenv, which Spark ships
and unpacks as ``./environment`` (``spark.archives``), as docs/spark.md tells users to deploy;
the driver unpacks it in its working directory too (run it in a scratch directory).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import changelake as cl
from changelake import streaming
from changelake.table.read.live_files import live_entries

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: on the path under pytest, not as a script
from spark_support import QUICK_JVM, session_builder, write_event_stream

SRC = str(Path(__file__).resolve().parents[2] / "src")


def ancestry(_: int) -> list[tuple[int, str]]:
    """This process and its ancestors up to init (from /proc), each as (pid, command line)."""
    chain = []
    pid = os.getpid()
    while pid > 0:
        proc = Path(f"/proc/{pid}")
        chain.append((pid, (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")))
        stat = (proc / "stat").read_text()
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return chain


def task_python(_: int) -> tuple[str, str]:
    """The interpreter a task runs and where it imports changelake from."""
    return sys.executable, str(cl.__file__)


def procedures(spark: SparkSession, table: cl.Table, names: Sequence[str]) -> dict[str, Any]:
    """Run Paimon's procedures ``names`` on the cluster, in order; what each did."""
    done: dict[str, Any] = {}
    for name in names:
        start = time.perf_counter()
        if name == "compact":
            landed = streaming.compact(spark, table, full=True)
            done[name] = {"kind": landed.commit_kind.value if landed else None,
                          "levels": sorted({e.file.level for e in live_entries(table.context, landed)})
                          if landed else []}
        elif name == "rescale":
            landed = streaming.rescale(spark, table, bucket=table.context.options.bucket + 1)
            done[name] = {"kind": landed.commit_kind.value if landed else None,
                          "buckets": sorted({e.bucket for e in live_entries(table.context, landed)}) if landed else []}
        elif name == "orphans":
            done[name] = {"removed": streaming.remove_orphan_files(spark, table, older_than=dt.timedelta(0))}
        elif name == "expire":
            expired = streaming.expire_snapshots(spark, table, retain_min=1, retain_max=1)
            done[name] = {"expired": list(expired.snapshots)}
        else:
            raise ValueError(f"unknown procedure {name!r}")
        done[name]["seconds"] = time.perf_counter() - start
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--master", required=True)
    parser.add_argument("--input")
    parser.add_argument("--checkpoint")
    parser.add_argument("--table", required=True)
    parser.add_argument("--schema")
    parser.add_argument("--storage-options", type=json.loads, default=None)
    parser.add_argument("--read-options", type=json.loads, default={})
    parser.add_argument("--archive")
    parser.add_argument("--procedures", type=lambda text: text.split(","), default=[])
    args = parser.parse_args(argv)
    builder = (
        session_builder("changelake-cluster-test", args.master)
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executor.memory", "512m")  # two executors in the worker's 1g
        .config("spark.driver.extraJavaOptions", QUICK_JVM)
        .config("spark.executor.extraJavaOptions", QUICK_JVM)
    )
    if args.archive:
        # A driver that is a plain Python process takes its executors' Python from
        # PYSPARK_PYTHON (spark.pyspark.python is spark-submit's).
        os.environ["PYSPARK_PYTHON"] = "./environment/bin/python"
        # The data source plans its reads in Python workers the driver starts with that same
        # executable, so the driver's working directory holds the environment too.
        with tarfile.open(args.archive) as archive:
            archive.extractall("environment", filter="tar")
        # Nor the source tree the cluster's daemons have on their PYTHONPATH: only the archive's.
        builder = (builder.config("spark.archives", f"{args.archive}#environment")
                   .config("spark.executorEnv.PYTHONPATH", ""))
    else:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = builder.config("spark.executorEnv.PYTHONPATH", SRC)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    table = cl.open_table(args.table, args.storage_options)
    context = spark.sparkContext
    result: dict[str, Any] = {
        "master": context.master,
        "driver_pid": os.getpid(),
        "task_ancestry": context.parallelize(range(2), 2).map(ancestry).collect(),
        "task_python": context.parallelize(range(2), 2).map(task_python).collect(),
    }
    if args.input:
        result |= stream(spark, table, args)
    if args.procedures:
        result["procedures"] = procedures(spark, table, args.procedures)
        result["rows_after"] = table.scan().to_arrow().num_rows
    print(json.dumps(result))
    spark.stop()
    return 0


def stream(spark: SparkSession, table: cl.Table, args: argparse.Namespace) -> dict[str, Any]:
    """Stream the events into the table, then read it and its changelog back."""
    query = write_event_stream(spark, args.input, args.schema, table, args.checkpoint)

    table.refresh()
    latest = table.latest_snapshot()
    assert latest is not None, "the query wrote nothing"
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    # The changelog, read back by a streaming query of the `changelake` data source: the
    # splits are planned here and read in the executors.
    streaming.register(spark)
    reader = (spark.readStream.format("changelake").options(**args.read_options).option("read.changelog", "true")
              .option("scan.mode", "from-snapshot").option("scan.snapshot-id", "1").load(args.table))
    read = (reader.writeStream.format("memory").queryName("changes")
            .option("checkpointLocation", f"{args.checkpoint}-read").trigger(availableNow=True).start())
    read.awaitTermination()
    changes = [row.asDict() for row in spark.table("changes").collect()]
    return {
        "batches": [s.commit_identifier for s in appends],
        "query_id": query.id,
        "commit_users": sorted({s.commit_user for s in appends}),
        "rows": table.scan().to_arrow().to_pylist(),
        "changes": changes,
    }


if __name__ == "__main__":
    sys.exit(main())
