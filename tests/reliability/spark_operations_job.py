"""The Spark job test_spark_operations_crash.py kills: on its own local[2] SparkSession it runs
table operations on the executors (``changelake.streaming.merge``, ``delete``, ``overwrite``,
``update``) on a table, in the order given, then exits 0. The merge runs as a ``foreachBatch``
would run it (commit user ``job``, batch id 0), so running it again lands nothing.

Run as ``spark_operations_job.py --table LOCATION OPERATION...``; a kill point comes in
``CHANGELAKE_KILL_POINT``, which Spark's python workers inherit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

import changelake as cl
from changelake import streaming

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: on the path under pytest, not as a script
from spark_support import QUICK_JVM, session_builder

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])
SPARK_SCHEMA = "dt string, id long, v long"
INITIAL = [{"dt": f"d{i % 3}", "id": i, "v": i} for i in range(60)]
MERGE_SOURCE = [{"dt": f"d{i % 3}", "id": i, "v": -i} for i in range(50, 80)]  # 10 updates, 20 inserts
DELETE_PREDICATE = "v < -64 and dt <> 'd2'"
OVERWRITE_ROWS = [{"dt": "d1", "id": 1000 + i, "v": i} for i in range(5)]
UPDATE_PREDICATE, UPDATE_SET = "dt = 'd0'", {"v": 7}


def merge(spark: SparkSession, table: cl.Table) -> None:
    source = spark.createDataFrame([tuple(r.values()) for r in MERGE_SOURCE], SPARK_SCHEMA)
    (streaming.merge(source, table, batch_id=0, commit_user="job")
     .when_matched_update().when_not_matched_insert().execute())


def delete(spark: SparkSession, table: cl.Table) -> None:
    streaming.delete(spark, table, DELETE_PREDICATE)


def overwrite(spark: SparkSession, table: cl.Table) -> None:
    streaming.overwrite(spark.createDataFrame([tuple(r.values()) for r in OVERWRITE_ROWS], SPARK_SCHEMA), table)


def update(spark: SparkSession, table: cl.Table) -> None:
    streaming.update(spark, table, UPDATE_PREDICATE, set=UPDATE_SET)


OPERATIONS: dict[str, Callable[[SparkSession, cl.Table], None]] = {
    "merge": merge, "delete": delete, "overwrite": overwrite, "update": update}


def apply(table: cl.Table, operation: str) -> None:
    """``operation`` on ``table`` in one process (the model of what the Spark job lands)."""
    if operation == "merge":
        (table.merge(pa.Table.from_pylist(MERGE_SOURCE, schema=SCHEMA))
         .when_matched_update().when_not_matched_insert().execute())
    elif operation == "delete":
        table.delete(DELETE_PREDICATE)
    elif operation == "overwrite":
        table.overwrite(pa.Table.from_pylist(OVERWRITE_ROWS, schema=SCHEMA))
    else:
        table.update(UPDATE_PREDICATE, set=UPDATE_SET)


def create(warehouse: str, name: str) -> cl.Table:
    """The table the job works on, with its first rows."""
    table = cl.Catalog(warehouse).create_table(name, SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                               options={"bucket": "2", "changelog-producer": "lookup"})
    table.write(pa.Table.from_pylist(INITIAL, schema=SCHEMA))
    return table


def rows_of(table: cl.Table) -> list[dict[str, Any]]:
    rows = table.scan().to_arrow()
    return rows.sort_by([("dt", "ascending"), ("id", "ascending")]).to_pylist()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--table", required=True, help="the table's location")
    parser.add_argument("operations", nargs="+", choices=sorted(OPERATIONS))
    args = parser.parse_args(argv)
    spark = session_builder("changelake-spark-operations-crash").config(
        "spark.driver.extraJavaOptions", QUICK_JVM).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    table = cl.open_table(args.table)
    for operation in args.operations:
        OPERATIONS[operation](spark, table)
        table.refresh()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
