"""changelake on Spark: exactly-once writes from (streaming) DataFrames, the ``changelake``
data source, CDC streams that follow their source's schema, Paimon's table operations (delete,
update, merge, overwrite) and maintenance procedures on the executors. The only part of
changelake that imports pyspark."""

from changelake.streaming.cdc_sync import CdcSyncSink, sync_cdc_stream
from changelake.streaming.cleanup import expire_snapshots, remove_orphan_files
from changelake.streaming.maintenance import compact, rescale
from changelake.streaming.operations import delete, merge, overwrite, update
from changelake.streaming.sink import ForeachBatchSink, write, write_stream
from changelake.streaming.source import register

__all__ = ["CdcSyncSink", "ForeachBatchSink", "compact", "delete", "expire_snapshots", "merge", "overwrite", "register",
           "remove_orphan_files", "rescale", "sync_cdc_stream", "update", "write", "write_stream"]
