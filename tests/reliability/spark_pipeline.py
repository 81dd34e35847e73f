"""The Spark job that spark_crashtest.py kills: a streaming query on its own local[2]
SparkSession that writes the JSON change events of an input directory (one file per
micro-batch, in modification order) into a table through ``changelake.streaming.write_stream``,
from a fixed checkpoint, until every file present at its start is written; then it runs Paimon's
procedures on the executors: a full compaction (``changelake.streaming.compact``), a rescale to
the other of 2 and 3 buckets (``streaming.rescale``) and orphan cleanup with no age threshold
(``streaming.remove_orphan_files``: nothing else writes the table then), and exits 0. A rescale
a crash interrupted (the new ``bucket`` set, partitions still in the old number) is run again
first, as a user would before writing on.

Run as ``spark_pipeline.py --input DIR --checkpoint DIR --table LOCATION --schema DDL``; a kill
point comes in ``CHANGELAKE_KILL_POINT``, which Spark's python workers inherit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from pathlib import Path

import changelake as cl
from changelake import streaming
from changelake.table.read import live_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: on the path under pytest, not as a script
from spark_support import session_builder, write_event_stream


def unscaled_partitions(table: cl.Table) -> list[dict[str, object]]:
    """The partitions whose files have another number of buckets than the table's."""
    snapshot = table.latest_snapshot()
    if snapshot is None:
        return []
    ctx = table.context
    found = {e.partition for e in live_files.live_entries(ctx, snapshot) if e.total_buckets != ctx.options.bucket}
    return [dict(zip(ctx.partition_keys, ctx.partition_values(p), strict=True)) for p in sorted(found)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--input", required=True, help="directory of JSON-lines event files")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location")
    parser.add_argument("--table", required=True, help="the table's location")
    parser.add_argument("--schema", required=True, help="the events' schema, as a Spark DDL string")
    args = parser.parse_args(argv)
    spark = (
        session_builder("changelake-spark-crashtest")
        # A short-lived driver on a small shared machine: JIT compile less, collect serially.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    table = cl.open_table(args.table)
    unscaled = unscaled_partitions(table)
    if unscaled:
        streaming.rescale(spark, table, partitions=unscaled)
    write_event_stream(spark, args.input, args.schema, args.table, args.checkpoint)
    # Paimon's procedures on the executors, as maintenance jobs after the stream.
    streaming.compact(spark, table, full=True)
    table.refresh()
    streaming.rescale(spark, table, bucket=5 - table.context.options.bucket)
    streaming.remove_orphan_files(spark, table, older_than=dt.timedelta(0))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
