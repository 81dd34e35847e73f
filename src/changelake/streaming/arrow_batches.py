"""How the rows of the write jobs reach their Python tasks: in Arrow batches bounded by rows only.

Spark 4 bounds each Arrow batch it sends a ``mapInArrow`` task by
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows and by
``spark.sql.execution.arrow.maxBytesPerBatch`` bytes. Unless the byte bound is ``Int.MaxValue``,
its writer measures the batch being filled after every row it adds, walking every column's
vectors: on a 100,000-row micro-batch of six columns, a quarter of the JVM task's time, on the
critical path of every micro-batch. The write jobs run with the byte bound off (``Int.MaxValue``,
Spark's own value for none), so that only the row bound (10,000 rows by default) cuts the batches,
unless the session sets a byte bound of its own, which stands.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, Row, SparkSession

MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
UNBOUNDED_BYTES = str(2**31 - 1)  # Int.MaxValue: the writer then never measures a batch


@contextmanager
def rows_bound_only(session: SparkSession) -> Iterator[None]:
    """Within the block, jobs of ``session`` send Arrow batches to Python bounded by rows only:
    ``maxBytesPerBatch`` is ``Int.MaxValue`` unless the session sets it (then it is left
    alone); it is unset again afterwards. Spark reads the value when a job starts."""
    if session.conf.get(MAX_BYTES_PER_BATCH, None) is not None:
        yield
        return
    session.conf.set(MAX_BYTES_PER_BATCH, UNBOUNDED_BYTES)
    try:
        yield
    finally:
        session.conf.unset(MAX_BYTES_PER_BATCH)


def collected(df: DataFrame) -> list[Row]:
    """``df.collect()``, its job's Arrow batches bounded by rows only (:func:`rows_bound_only`)."""
    with rows_bound_only(df.sparkSession):
        return df.collect()
