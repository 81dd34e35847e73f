"""Spark's own writers on changelake tables: ``df.write.format("changelake")`` (and SQL
``INSERT INTO`` a catalog table over one) and ``df.writeStream.format("changelake")``, through
pyspark's Python data source writer API.

That API hands each task whatever rows Spark's plan left in it: it has no say in how rows reach
tasks. A table whose buckets must each be written whole by one task (fixed and dynamic buckets,
cross-partition upsert, an append table with fixed buckets) cannot be written that way: a
bucket numbers its rows, and two tasks writing one bucket would number theirs alike, leaving
which row of a key wins to chance. Those tables are refused, with a line that points at
``changelake.streaming.write`` and ``write_stream``, which route the rows by bucket. The tables
whose rows may land from any task are written: postpone-bucket tables (Paimon's own answer to
writers that cannot route; each task's rows go to ``bucket-postpone/`` as one writer's, and
compaction puts them in buckets) and bucket-unaware append tables. Every task writes its own
rows; the driver commits once.

A streaming write is exactly once as the ``foreachBatch`` sink is: commit user = the query id,
read from the checkpoint's ``metadata`` file (Spark gives the writer ``checkpointLocation``
among its options), commit identifier = the batch id; a replayed batch lands nothing and its
files are deleted. A batch write commits once under a fresh commit user. ``mode("overwrite")``
(``INSERT OVERWRITE``) is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from changelake.api.table import Table
from changelake.changelog import producers
from changelake.errors import OptionError, SchemaMismatchError, StreamingError
from changelake.streaming import write_tasks
from changelake.streaming.sink import checkpoint_query_id
from changelake.streaming.spark_schema import with_table_timestamps
from changelake.table.context import TableContext
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER
from changelake.table.write import conform, landing

CHECKPOINT_OPTION = "checkpointlocation"


@dataclass(frozen=True)
class TaskWritten(WriterCommitMessage):
    """What a write task sends the driver: its pickled :class:`write_tasks.TaskResult` (None
    when it had no rows)."""

    payload: bytes | None


def check_writable(table: Table, schema: StructType, *, overwrite: bool) -> TableContext:
    """The table's context when Spark's writers can write ``schema``'s rows into it; else an
    error naming the table that says why (and what writes it instead). Runs on the driver,
    before any task."""
    ctx = table.context
    if overwrite:
        raise StreamingError("mode('overwrite') / INSERT OVERWRITE is not supported by the changelake data source: "
                             "write with mode('append')", table=table.name)
    if write_tasks.needs_shuffle(ctx):
        raise StreamingError("Spark's writers cannot route rows to their buckets, which this table needs (fixed or "
                             "dynamic buckets, or an append table with fixed buckets): write it with "
                             "changelake.streaming.write(df, table) or write_stream(df, table, ...)", table=table.name)
    conform.check_columns(ctx, schema.names)
    ctx.check_writable()
    arrow = ctx.arrow_schema
    for field in schema.fields:
        if field.name in arrow.names and with_table_timestamps(field.dataType, arrow.field(field.name).type) \
                != field.dataType:
            # the sink casts in Spark, in the session time zone; a task would cast through UTC
            raise SchemaMismatchError(f"is a {field.dataType.simpleString()} and the table's column the other kind "
                                      "of timestamp: cast it in Spark first, or write with changelake.streaming.write",
                                      table=table.name, column=field.name)
    return ctx


def _write(ctx: TableContext, commit_user: str, batches: Iterator[pa.RecordBatch]) -> TaskWritten:
    payloads = [row for batch in write_tasks.write_rows(ctx, commit_user, batches)
                for row in batch.column(write_tasks.MESSAGE_COLUMN).to_pylist()]
    return TaskWritten(payloads[0] if payloads else None)


def _commit(ctx: TableContext, messages: Sequence[WriterCommitMessage | None], commit_user: str,
            identifier: int) -> None:
    results = [write_tasks.task_result(m.payload) for m in messages
               if isinstance(m, TaskWritten) and m.payload is not None]
    written = [m for r in results for m in r.messages]
    if written:
        views = [r.view for r in results if r.view is not None]
        landing.land(ctx, producers.for_table(ctx), written, commit_user, identifier,
                     view=min(views) if views else None)


def _abort(ctx: TableContext, messages: Sequence[WriterCommitMessage | None]) -> None:
    """Delete the files of tasks that finished, when Spark gives the write up."""
    for m in messages:
        if isinstance(m, TaskWritten) and m.payload is not None:
            for message in write_tasks.task_result(m.payload).messages:
                ctx.file_io.discard(message.written(ctx))


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("changelake").mode("append").save(path)`` and SQL ``INSERT INTO``:
    one commit under a fresh commit user."""

    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx
        self.commit_user = str(uuid.uuid4())

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWritten:
        return _write(self.ctx, self.commit_user, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.ctx, messages, self.commit_user, BATCH_COMMIT_IDENTIFIER)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.ctx, messages)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("changelake")``: each micro-batch committed once, as (query id,
    batch id)."""

    def __init__(self, ctx: TableContext, commit_user: str) -> None:
        self.ctx = ctx
        self.commit_user = commit_user

    @staticmethod
    def of(ctx: TableContext, options: Mapping[str, str]) -> StreamWriter:
        """The writer of a query whose options (Spark's, any case) name its checkpoint."""
        location = next((v for k, v in options.items() if k.lower() == CHECKPOINT_OPTION), None)
        if not location:
            raise OptionError("a streaming write into a changelake table needs the query's checkpointLocation option "
                              "(its query id, the commit user, is read from there)", option="checkpointLocation")
        return StreamWriter(ctx, checkpoint_query_id(location, ctx.file_io))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskWritten:
        return _write(self.ctx, self.commit_user, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # Spark's name
        _commit(self.ctx, messages, self.commit_user, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.ctx, messages)
