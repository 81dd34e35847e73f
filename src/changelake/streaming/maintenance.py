"""Paimon's ``compact`` and ``rescale`` procedures on Spark: the buckets (or partitions) of a
table rewritten on the executors, one Spark task a bucket (or partition), and committed once by
the driver.

Compaction:

The driver plans from one snapshot: the buckets with files (of the given partitions), each a
row of a small DataFrame spread one a task. Each task compacts its buckets as
``table.compact()`` would (the table's merge engine, compaction strategy, deletion vectors and
changelog producer), from that snapshot, and returns only commit messages. The commit is the
one ``table.compact()`` makes: a compaction whose input another commit rewrote meanwhile is
void (``CommitConflictError``: compact again), and a crash before it leaves only orphan files
(the crash test kills the driver at ``spark-compacted``, and tasks at ``compaction``).

Rescale: the driver sets the table's new ``bucket`` (a schema change) and plans from one
snapshot; each task rewrites its partitions into the new buckets as :meth:`Table.rescale` does;
the driver commits one OVERWRITE snapshot of them. A commit that changed the partitions
meanwhile voids it (``CommitConflictError``); a crash before the commit leaves orphan files and
the new ``bucket`` set, so writes to the partitions fail until the rescale runs again (the crash
test kills the driver at ``spark-rescaled``, and tasks at ``rescale``).
"""

from __future__ import annotations

import functools
import pickle
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from changelake.table.maintenance import rescale as rescaling
from changelake.table.read import live_files
from changelake.table.write import postpone

_MESSAGES = "messages"
_MESSAGES_SCHEMA = pa.schema([pa.field(_MESSAGES, pa.binary())])

TaskFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def on_executors(spark: SparkSession, rows: pa.Table, tasks: int, run: TaskFunction, schema: str) -> pa.Table:
    """``run`` over ``rows`` spread across ``tasks`` Spark tasks (``mapInArrow``): the rows
    they return, collected on the driver. Works over Spark Connect too."""
    work = spark.createDataFrame(rows).repartition(max(1, min(tasks, rows.num_rows)))
    return work.mapInArrow(run, schema).toArrow()


def max_tasks(spark: SparkSession) -> int:
    """How many tasks a job of many small pieces of work is cut into: the session's
    ``spark.sql.shuffle.partitions``, which Spark users size to their cluster."""
    return int(spark.conf.get("spark.sql.shuffle.partitions") or "200")


def _messages(result: pa.Table) -> list[CommitMessage]:
    return [m for blob in result.column(_MESSAGES).to_pylist() for m in pickle.loads(blob)]


def _messages_batch(messages: Sequence[CommitMessage]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{_MESSAGES: pickle.dumps(list(messages))}], schema=_MESSAGES_SCHEMA)


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
    rows = pa.table({"partition": [p for p, _ in buckets], "bucket": pa.array([b for _, b in buckets], pa.int32())})
    run = functools.partial(compact_task, ctx, snapshot, full=full)
    messages = _messages(on_executors(spark, rows, len(buckets), run, f"{_MESSAGES} binary"))
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
    yield _messages_batch(messages)


def rescale(spark: SparkSession, table: Table | str, *, bucket: int | None = None,
            partitions: Sequence[Mapping[str, Any]] | None = None) -> Snapshot | None:
    """Rewrite ``table``'s partitions (all, or ``partitions``, each a dict of partition values)
    with ``bucket`` buckets (default: the table's ``bucket``) on Spark's executors, one task a
    partition, as one OVERWRITE snapshot: :meth:`Table.rescale` spread over a cluster. A
    ``bucket`` other than the table's becomes the table's first (a new schema); a ``Table``
    given is refreshed to it. A commit that changed the partitions' rows meanwhile makes it fail
    with ``CommitConflictError`` (run it again, as after a crash). Returns the snapshot (None
    when the partitions hold no file). Works over Spark Connect too."""
    target = as_table(table)
    ctx, planned = rescaling.plan(target.context, bucket=bucket, partitions=partitions)
    target.refresh()
    if planned is None:
        return None
    names = sorted(planned.files)
    run = functools.partial(rescale_task, planned)
    messages = _messages(on_executors(spark, pa.table({"partition": pa.array(names, pa.binary())}), len(names), run,
                                      f"{_MESSAGES} binary"))
    killpoints.reached(KillPoint.SPARK_RESCALED)
    landed = rescaling.commit(planned, messages, str(uuid.uuid4()))
    if landed is not None:
        snapshot_expiry.expire_after_commit(ctx)
    return landed


def rescale_task(planned: rescaling.RescalePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's rewrite of the partitions it got (rows ``partition``): one row holding its
    pickled commit messages."""
    names = sorted({bytes(p) for batch in batches for p in batch.column("partition").to_pylist()})
    if names:
        yield _messages_batch(rescaling.rewrite(planned, names))
