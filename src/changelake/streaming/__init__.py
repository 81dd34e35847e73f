"""changelake on Spark: exactly-once writes from (streaming) DataFrames, the ``changelake``
data source, and Paimon's maintenance procedures on the executors. The only part of changelake
that imports pyspark."""

from changelake.streaming.cdc_sync import CdcSyncSink, sync_cdc_stream
from changelake.streaming.cleanup import expire_snapshots, remove_orphan_files
from changelake.streaming.maintenance import compact, rescale
from changelake.streaming.sink import ForeachBatchSink, write, write_stream
from changelake.streaming.source import register

__all__ = ["CdcSyncSink", "ForeachBatchSink", "compact", "expire_snapshots", "register", "remove_orphan_files",
           "rescale", "sync_cdc_stream", "write", "write_stream"]
