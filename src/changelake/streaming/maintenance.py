"""Paimon's ``compact`` procedure on Spark: the buckets of a table compacted on the executors,
one Spark task a bucket, and committed once by the driver as one COMPACT snapshot.

The driver plans from one snapshot: the buckets with files (of the given partitions), each a
row of a small DataFrame spread one a task. Each task compacts its buckets as
``table.compact()`` would (the table's merge engine, compaction strategy, deletion vectors and
changelog producer), from that snapshot, and returns only commit messages. The commit is the
one ``table.compact()`` makes: a compaction whose input another commit rewrote meanwhile is
void (``CommitConflictError``: compact again), and a crash before it leaves only orphan files
(the crash test kills the driver at ``spark-compacted``, and tasks at ``compaction``).
"""

from __future__ import annotations

import functools
import pickle
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from changelake.api.table import Table
from changelake.changelog import producers
from changelake.errors import StreamingError
from changelake.option_values import POSTPONE_BUCKET
from changelake.streaming.sink import as_table
from changelake.table import snapshot_expiry
from changelake.table.append import compaction as append_compaction
from changelake.table.commit import committer
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.lsm import compactor
from changelake.table.read import live_files
from changelake.table.write import postpone

_MESSAGES = "messages"


def compact(spark: SparkSession, table: Table | str, *, full: bool = False,
            partitions: Sequence[Mapping[str, Any]] | None = None) -> Snapshot | None:
    """Compact ``table``'s buckets (all, or those of ``partitions``, each a dict of partition
    values) on Spark's executors as one COMPACT snapshot, as :meth:`Table.compact` does in one
    process; ``full`` merges every bucket into its top level. None when there was nothing to
    compact. Works over Spark Connect too."""
    target = as_table(table)
    ctx = target.context
    if postpone.is_postpone(ctx):
        raise StreamingError("a postpone-bucket table's compaction assigns buckets per partition in one process: "
                             "compact it with table.compact()", table=target.name)
    snapshot = ctx.latest_snapshot()
    if snapshot is None:
        return None
    wanted = None if partitions is None else [ctx.partition_of(p) for p in partitions]
    entries = live_files.live_entries(ctx, snapshot)
    buckets = sorted({(e.partition, e.bucket) for e in entries if e.bucket != POSTPONE_BUCKET
                      and (wanted is None or ctx.partition_values(e.partition) in wanted)})
    if not buckets:
        return None
    work = spark.createDataFrame([(p, b) for p, b in buckets], "partition binary, bucket int").repartition(len(buckets))
    run = functools.partial(compact_task, ctx, snapshot, full=full)
    messages = [m for row in work.mapInArrow(run, f"{_MESSAGES} binary").collect()
                for m in pickle.loads(row[_MESSAGES])]
    killpoints.reached(KillPoint.SPARK_COMPACTED)
    if not messages:
        return None
    landed = committer.commit(ctx, messages, str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER)
    if landed:
        snapshot_expiry.expire_after_commit(ctx)
    return landed[0] if landed else None


def compact_task(ctx: TableContext, snapshot: Snapshot, batches: Iterator[pa.RecordBatch], *,
                 full: bool) -> Iterator[pa.RecordBatch]:
    """A task's compaction of the buckets it got (rows ``partition, bucket``), from ``snapshot``:
    one row holding its pickled commit messages."""
    buckets = {(bytes(p), int(b)) for batch in batches
               for p, b in zip(batch.column("partition").to_pylist(), batch.column("bucket").to_pylist(), strict=True)}
    if not buckets:
        return
    messages: list[CommitMessage]
    if ctx.kind is TableKind.APPEND:
        messages = append_compaction.compact_table(ctx, full=full, partitions=None, buckets=buckets, snapshot=snapshot)
    else:
        messages = compactor.compact_table(ctx, full=full, partitions=None, changelog=producers.for_table(ctx),
                                           buckets=buckets, snapshot=snapshot)
    yield pa.RecordBatch.from_pylist([{_MESSAGES: pickle.dumps(messages)}],
                                     schema=pa.schema([pa.field(_MESSAGES, pa.binary())]))
