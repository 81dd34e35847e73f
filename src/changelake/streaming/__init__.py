"""changelake on Spark: exactly-once writes from (streaming) DataFrames, and the ``changelake``
data source. The only part of changelake that imports pyspark."""

from changelake.streaming.sink import ForeachBatchSink, write, write_stream

__all__ = ["ForeachBatchSink", "write", "write_stream"]
