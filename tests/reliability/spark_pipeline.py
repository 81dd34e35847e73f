"""The Spark job that spark_crashtest.py kills: a streaming query on its own local[2]
SparkSession that writes the JSON change events of an input directory (one file per
micro-batch, in modification order) into a table through ``changelake.streaming.write_stream``,
from a fixed checkpoint, until every file present at its start is written; then it compacts the
table fully on the executors (``changelake.streaming.compact``) and exits 0.

Run as ``spark_pipeline.py --input DIR --checkpoint DIR --table LOCATION --schema DDL``; a kill
point comes in ``CHANGELAKE_KILL_POINT``, which Spark's python workers inherit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from changelake import streaming

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: on the path under pytest, not as a script
from spark_support import session_builder, write_event_stream


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
    write_event_stream(spark, args.input, args.schema, args.table, args.checkpoint)
    # Paimon's compact procedure on the executors, as a maintenance job after the stream.
    streaming.compact(spark, args.table, full=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
