"""The write jobs' Arrow batches are bounded by rows only (Spark then never measures a batch
after each row), unless the session bounds their bytes itself; the session is left as it was."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext

import changelake as cl
from changelake import streaming
from changelake.streaming.arrow_batches import MAX_BYTES_PER_BATCH, UNBOUNDED_BYTES, collected, rows_bound_only

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def byte_bound_in_task() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A mapInArrow function that yields the byte bound its task's job ran with (Spark hands a
    job's SQL settings to its tasks); made here so that Spark ships it by value."""

    def bound(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        context = TaskContext.get()
        assert context is not None
        yield pa.RecordBatch.from_pydict({"bound": [context.getLocalProperty(MAX_BYTES_PER_BATCH)]})

    return bound


def test_write_jobs_bound_arrow_batches_by_rows_only_and_leave_the_session_as_it_was(spark: Any) -> None:
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None
    df = spark.range(3).mapInArrow(byte_bound_in_task(), "bound string")
    assert {row["bound"] for row in collected(df)} == {UNBOUNDED_BYTES}
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None
    with rows_bound_only(spark):
        assert spark.conf.get(MAX_BYTES_PER_BATCH) == UNBOUNDED_BYTES
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None


def test_a_byte_bound_the_session_sets_stands(spark: Any, tmp_path: Path) -> None:
    spark.conf.set(MAX_BYTES_PER_BATCH, "1000")  # a few rows a batch
    try:
        df = spark.range(3).mapInArrow(byte_bound_in_task(), "bound string")
        assert {row["bound"] for row in collected(df)} == {"1000"}
        table = cl.Catalog(str(tmp_path / "warehouse")).create_table(
            "db.t", SCHEMA, primary_keys=["id"], options={"bucket": "2", "changelog-producer": "lookup"})
        rows = spark.createDataFrame([(i, f"n{i}") for i in range(500)], "id long, name string").coalesce(1)
        assert streaming.write(rows, table) is not None
        assert spark.conf.get(MAX_BYTES_PER_BATCH) == "1000"
        assert sorted(r["id"] for r in table.scan().to_arrow().to_pylist()) == list(range(500))
    finally:
        spark.conf.unset(MAX_BYTES_PER_BATCH)


def test_a_sink_write_leaves_the_session_without_a_byte_bound(spark: Any, tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.t", SCHEMA, primary_keys=["id"], options={"bucket": "2", "changelog-producer": "lookup"})
    sink = streaming.ForeachBatchSink(table, commit_user="job")
    sink(spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string"), 0)
    assert spark.conf.get(MAX_BYTES_PER_BATCH, None) is None
    assert {r["id"]: r["name"] for r in table.scan().to_arrow().to_pylist()} == {1: "a", 2: "b"}
