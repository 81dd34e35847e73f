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
* ``rows``: the table's rows; ``changes``: its changelog from snapshot 0 (each with ``rowkind``).

Run as ``cluster_job.py --master spark://HOST:PORT --input DIR --checkpoint DIR --table LOCATION
--schema DDL [--storage-options JSON --read-options JSON]`` (the events' schema, as a Spark DDL
string; for a table on S3, its fsspec storage options and Paimon's ``s3.*`` options for the data
source: the executors get them inside the pickled table, not from their environment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import changelake as cl
from changelake import streaming

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: on the path under pytest, not as a script
from spark_support import session_builder, write_event_stream

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--master", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--storage-options", type=json.loads, default=None)
    parser.add_argument("--read-options", type=json.loads, default={})
    args = parser.parse_args(argv)
    quick_jvm = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # short-lived JVMs on a small shared machine
    spark = (
        session_builder("changelake-cluster-test", args.master)
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.executor.memory", "512m")  # two executors in the worker's 1g
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", SRC)
        .config("spark.driver.extraJavaOptions", quick_jvm)
        .config("spark.executor.extraJavaOptions", quick_jvm)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    table = cl.open_table(args.table, args.storage_options)
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
    context = spark.sparkContext
    print(json.dumps({
        "master": context.master,
        "driver_pid": os.getpid(),
        "task_ancestry": context.parallelize(range(2), 2).map(ancestry).collect(),
        "batches": [s.commit_identifier for s in appends],
        "query_id": query.id,
        "commit_users": sorted({s.commit_user for s in appends}),
        "rows": table.scan().to_arrow().to_pylist(),
        "changes": changes,
    }))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
