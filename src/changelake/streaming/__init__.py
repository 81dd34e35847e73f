"""changelake on Spark: exactly-once writes from (streaming) DataFrames, the ``changelake``
data source, Paimon's table operations (delete, update, merge, overwrite) and maintenance
procedures on the executors. The only part of changelake
that imports pyspark."""

from changelake.streaming.cleanup import expire_snapshots, remove_orphan_files
from changelake.streaming.maintenance import compact, rescale
from changelake.streaming.operations import delete, merge, overwrite, update
from changelake.streaming.sink import ForeachBatchSink, write, write_stream
from changelake.streaming.source import register

__all__ = ["ForeachBatchSink", "compact", "delete", "expire_snapshots", "merge", "overwrite", "register",
           "remove_orphan_files", "rescale", "update", "write", "write_stream"]
