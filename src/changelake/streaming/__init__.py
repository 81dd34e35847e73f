"""changelake on Spark: exactly-once writes from (streaming) DataFrames, and the ``changelake``
data source. The only part of changelake that imports pyspark."""

from changelake.streaming.maintenance import compact
from changelake.streaming.sink import ForeachBatchSink, write, write_stream
from changelake.streaming.source import register

__all__ = ["ForeachBatchSink", "compact", "register", "write", "write_stream"]
