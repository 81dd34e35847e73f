"""Writing Spark DataFrames into a table, exactly once per (commit user, batch id).

A write runs as one Spark job: a ``mapInArrow`` tags every row with its bucket (Paimon's hash,
vectorized; in dynamic bucket mode, its key's assigner, as Paimon's sinks route keys to the
assigner tasks that own disjoint buckets), a shuffle sends each (partition, bucket or assigner)
to exactly one task, and a second
``mapInArrow`` writes each task's buckets with the table's merge engine, compaction and
changelog producer (lookup changelog included), returning only small commit messages. The
driver collects those and commits once, with the query id as commit user and the batch id as
commit identifier: a batch that user already committed (Spark replays the last batch after a
crash between our commit and its commit log) writes nothing, and one that turns out committed
when it lands deletes what it wrote.

Everything here works over Spark Connect too, which has neither ``sparkContext`` nor ``rdd``:
there the query id comes from the checkpoint's ``metadata`` file (where Spark keeps it across
restarts, so a query keeps its commit user whichever way it is run), and every multi-task
write shuffles (the one-task shortcut needs the partition count).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any

import fsspec
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import IntegerType, StructField, StructType

from changelake.api.catalog import open_table
from changelake.api.table import Table
from changelake.changelog import producers
from changelake.errors import StreamingError
from changelake.streaming import write_tasks
from changelake.streaming.arrow_batches import collected
from changelake.streaming.spark_schema import with_table_timestamps
from changelake.streaming.write_tasks import BUCKET_COLUMN, MESSAGE_COLUMN
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.context import TableContext
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.fileio import FileIO
from changelake.table.io.killpoints import KillPoint
from changelake.table.write import conform, landing, postpone

QUERY_ID_PROPERTY = "sql.streaming.queryId"


def as_table(table: Table | str, storage_options: Mapping[str, Any] | None = None) -> Table:
    """``table`` itself, or the table at the path or URL ``table``."""
    if isinstance(table, Table):
        return table
    return open_table(table, storage_options=dict(storage_options) if storage_options else None)


class ForeachBatchSink:
    """A ``foreachBatch`` function that writes each micro-batch into ``table`` exactly once:
    ``df.writeStream.foreachBatch(ForeachBatchSink(table)).option("checkpointLocation", ...)``.

    The commit user is ``commit_user`` or else the streaming query's id, which stays the same
    when the query restarts from its checkpoint. Over Spark Connect the id is read from the
    query's checkpoint, so give its ``checkpoint_location`` (the query's ``checkpointLocation``;
    :func:`write_stream` does). The commit identifier is the batch id. Row kinds come from a
    ``rowkind`` column (+I/-U/+U/-D) or the table's ``rowkind.field``, so a CDC stream or
    another table's changelog stream can be written straight in.
    """

    def __init__(self, table: Table | str, *, commit_user: str | None = None,
                 checkpoint_location: str | None = None) -> None:
        self.table = as_table(table)
        self.commit_user = commit_user
        self.checkpoint_location = checkpoint_location

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        user = self.commit_user or query_id(batch_df.sparkSession, self.table, self.checkpoint_location)
        commit_batch(batch_df, self.table, user, batch_id, streaming=True)


def query_id(session: SparkSession, table: Table, checkpoint_location: str | None) -> str:
    """The id of the streaming query running the batch being written into ``table`` (from
    inside its ``foreachBatch``): Spark's local property on classic Spark; over Spark Connect,
    read from the query's checkpoint at ``checkpoint_location``."""
    if not is_connect(session):
        user = session.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not user:
            raise StreamingError("not called by a streaming query (no query id): pass commit_user", table=table.name)
        return str(user)
    if checkpoint_location is None:
        raise StreamingError("on Spark Connect the query id is read from the query's checkpoint: pass "
                             "checkpoint_location (its checkpointLocation) or commit_user", table=table.name)
    return checkpoint_query_id(checkpoint_location, table.context.file_io)


def is_connect(session: SparkSession) -> bool:
    """Whether ``session`` is a Spark Connect session (pyspark.sql.connect's class; that module
    is not imported here: it needs the ``connect`` extra's packages)."""
    return type(session).__module__.startswith("pyspark.sql.connect.")


def checkpoint_query_id(location: str, table_io: FileIO) -> str:
    """The query id Spark keeps in the ``metadata`` file of the checkpoint at ``location``
    (written when the query first starts; the id of every run since). The table's storage
    options open it when it is on the table's kind of store."""
    scheme = fsspec.core.split_protocol(location)[0] or "file"
    same_store = scheme == table_io.protocol or {scheme, table_io.protocol} <= {"s3", "s3a"}
    io, path = FileIO.for_url(location, table_io.storage_options if same_store else None)
    metadata = f"{path}/metadata"
    try:
        return str(json.loads(io.read_text(metadata).splitlines()[0])["id"])
    except FileNotFoundError as exc:
        raise StreamingError(f"the query's checkpoint has no metadata file {io.url(metadata)}: "
                             "is checkpoint_location the query's checkpointLocation?") from exc
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise StreamingError(f"the query's checkpoint metadata {io.url(metadata)} holds no query id: {exc}") from exc


def write_stream(df: DataFrame, table: Table | str, *, checkpoint_location: str,
                 trigger: Mapping[str, Any] | None = None, commit_user: str | None = None,
                 query_name: str | None = None) -> StreamingQuery:
    """Start a streaming query that writes ``df`` into ``table`` exactly once (through
    :class:`ForeachBatchSink`), on classic Spark or Spark Connect. ``trigger`` holds
    ``DataStreamWriter.trigger``'s keywords, e.g. ``{"availableNow": True}`` or
    ``{"processingTime": "10 seconds"}``."""
    sink = ForeachBatchSink(table, commit_user=commit_user, checkpoint_location=checkpoint_location)
    return start_query(df, sink, checkpoint_location=checkpoint_location, trigger=trigger, query_name=query_name)


def start_query(df: DataFrame, sink: ForeachBatchSink, *, checkpoint_location: str,
                trigger: Mapping[str, Any] | None, query_name: str | None) -> StreamingQuery:
    """Start the streaming query of ``df`` whose batches ``sink`` writes."""
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def write(df: DataFrame, table: Table | str) -> Snapshot | None:
    """Write a (batch) DataFrame into ``table`` as one commit, on the executors: the new
    snapshot (None when ``df`` has no rows). A postpone-bucket table with
    ``postpone.batch-write-fixed-bucket`` (the default) gets the rows in real buckets, as
    Paimon's batch writes: readers see them at once."""
    target = as_table(table)
    ctx = target.context
    if postpone.is_postpone(ctx) and ctx.options.postpone_batch_write_fixed_bucket:
        landed = _commit_fixed_buckets(df, target, str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER)
    else:
        landed = commit_batch(df, target, str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER)
    return landed[0] if landed else None


def _commit_fixed_buckets(df: DataFrame, table: Table, commit_user: str, identifier: int) -> list[Snapshot]:
    """A postpone-bucket table's batch write into real buckets: a first job sums each
    partition's rows and bytes; each partition keeps the buckets it has, a new one gets
    ``postpone.default-bucket-num`` or buckets for its size (as :func:`Table.write` does); a
    second job writes every (partition, bucket) in one task, write-only."""
    ctx = table.context
    conform.check_columns(ctx, df.columns)
    ctx.check_writable()
    df = as_table_timestamps(df, ctx)
    plan = fixed_bucket_plan(df, ctx)
    if not plan:
        return []
    written = in_planned_buckets(df, ctx, plan).mapInArrow(
        functools.partial(write_tasks.write_planned, ctx, commit_user), f"{MESSAGE_COLUMN} binary")
    return land_written(ctx, producers.for_table(ctx), written, commit_user, identifier)


def fixed_bucket_plan(df: DataFrame, ctx: TableContext) -> dict[bytes, int]:
    """The real buckets of each partition the rows of ``df`` are in, for a postpone-bucket
    table's fixed-bucket batch write (a job sums each partition's rows and bytes)."""
    sizes: dict[bytes, tuple[int, int]] = {}
    for row in collected(df.mapInArrow(functools.partial(write_tasks.partition_sizes, ctx),
                                       "partition binary, rows long, bytes long")):
        partition = bytes(row["partition"])
        rows, size = sizes.get(partition, (0, 0))
        sizes[partition] = (rows + row["rows"], size + row["bytes"])
    return postpone.fixed_bucket_plan(ctx, sizes) if sizes else {}


def in_planned_buckets(df: DataFrame, ctx: TableContext, plan: Mapping[bytes, int]) -> DataFrame:
    """The rows of ``df`` with their real bucket and bucket count in ``plan``
    (:func:`write_tasks.add_planned_bucket`), each (partition, bucket) in one Spark partition."""
    tagged_schema = StructType([*df.schema.fields, StructField(BUCKET_COLUMN, IntegerType(), nullable=False),
                                StructField(write_tasks.BUCKETS_COLUMN, IntegerType(), nullable=False)])
    tagged = df.mapInArrow(functools.partial(write_tasks.add_planned_bucket, ctx, plan), tagged_schema)
    return tagged.repartition(*[column(k) for k in ctx.partition_keys], F.col(BUCKET_COLUMN))


def column(name: str) -> Column:
    """The column named ``name``, whatever characters the name holds (Spark would read a dot
    as a field access and choke on a backtick)."""
    quoted = name.replace("`", "``")
    return F.col(f"`{quoted}`")


def as_table_timestamps(df: DataFrame, ctx: TableContext) -> DataFrame:
    """``df`` with each timestamp column of the other flavour than the table column's cast in
    Spark, in the session time zone as Spark's CAST does: a TIMESTAMP written into a zone-less
    column keeps its wall-clock time there, a TIMESTAMP_NTZ written into a zoned one is read as
    a time in the session zone. (The Arrow batches ``mapInArrow`` hands over carry instants, so
    a cast in the tasks would go through UTC instead.)"""
    table = ctx.arrow_schema
    casts = {}
    for field in df.schema.fields:
        if field.name in table.names:
            target = with_table_timestamps(field.dataType, table.field(field.name).type)
            if target != field.dataType:
                casts[field.name] = column(field.name).cast(target)
    return df.withColumns(casts) if casts else df


def commit_batch(df: DataFrame, table: Table, commit_user: str, identifier: int, *,
                 streaming: bool = False) -> list[Snapshot]:
    """Write ``df`` on the executors and commit it once as (``commit_user``, ``identifier``):
    the snapshots that landed ([] when that identifier was committed already). A ``streaming``
    write is one micro-batch of the query ``commit_user``: written by one task (one Spark
    partition), its writer may stay in the task's worker for the next batches, its compactions
    landing with a later batch (:mod:`changelake.streaming.resident_writers`; a batch written by
    several tasks waits for its compactions, since a bucket's next task may run elsewhere)."""
    ctx = table.context
    changelog = producers.for_table(ctx)
    if landing.replayed(ctx, changelog, commit_user, identifier):
        return []
    # A clear error on the driver, before any task runs (the tasks check the values).
    conform.check_columns(ctx, df.columns)
    ctx.check_writable()
    df = as_table_timestamps(df, ctx)
    write_groups = functools.partial(write_tasks.write_groups, ctx, commit_user)
    if not write_tasks.needs_shuffle(ctx) or (not is_connect(df.sparkSession) and df.rdd.getNumPartitions() == 1):
        # One task holds every row (a small micro-batch, typically): each bucket is whole in
        # it already, so the shuffle and its stage are saved. An unaware append table and a
        # postpone-bucket table need no whole buckets: every task writes its own rows.
        write_rows = functools.partial(write_tasks.write_rows, ctx, commit_user, streaming=streaming)
        written = df.mapInArrow(write_rows, f"{MESSAGE_COLUMN} binary")
    else:
        bucketed_schema = StructType([*df.schema.fields, StructField(BUCKET_COLUMN, IntegerType(), nullable=False)])
        bucketed = df.mapInArrow(functools.partial(write_tasks.add_bucket, ctx), bucketed_schema)
        # A cross-partition key's rows of every partition meet in its assigner's task.
        by = [] if ctx.cross_partition else [column(k) for k in ctx.partition_keys]
        grouped = bucketed.repartition(*by, F.col(BUCKET_COLUMN))
        written = grouped.mapInArrow(write_groups, f"{MESSAGE_COLUMN} binary")
    return land_written(ctx, changelog, written, commit_user, identifier)


def land_written(ctx: TableContext, changelog: ChangelogHook, written: DataFrame, commit_user: str,
          identifier: int) -> list[Snapshot]:
    """Run the write job whose rows are the tasks' results (:class:`write_tasks.TaskResult`)
    and commit their messages as one, as (``commit_user``, ``identifier``)."""
    results = [write_tasks.task_result(row[MESSAGE_COLUMN]) for row in collected(written)]
    killpoints.reached(KillPoint.SINK_WRITTEN)
    messages = [m for r in results for m in r.messages]
    if not messages:
        return []
    views = [r.view for r in results if r.view is not None]
    landed = landing.land(ctx, changelog, messages, commit_user, identifier, view=min(views) if views else None)
    killpoints.reached(KillPoint.SINK_COMMITTED)
    return landed
