"""What a Spark write runs in its tasks, on executors: tag each row with its bucket, then write
the rows of whole (partition, bucket) groups as the table's files and return the commit
messages. Nothing here talks to Spark: the functions take and yield Arrow record batches, as
``mapInArrow`` hands them over.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa

from changelake.api.writer import open_write
from changelake.changelog import producers
from changelake.errors import SchemaMismatchError
from changelake.streaming import resident_writers
from changelake.streaming.resident_writers import RESIDENT_WRITERS
from changelake.table.append.definition import UNAWARE_BUCKET
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import bucket
from changelake.table.format.schema import TableKind
from changelake.table.write import assigners, postpone
from changelake.table.write.partitions import partition_groups
from changelake.table.write.writer import TableWrite

BUCKET_COLUMN = "_changelake_bucket"
BUCKETS_COLUMN = "_changelake_buckets"
SIZES_SCHEMA = pa.schema([pa.field("partition", pa.binary()), pa.field("rows", pa.int64()),
                          pa.field("bytes", pa.int64())])
MESSAGE_COLUMN = "message"
_Result = TypeVar("_Result")
_MESSAGE_SCHEMA = pa.schema([pa.field(MESSAGE_COLUMN, pa.binary())])


@dataclass(frozen=True)
class TaskResult:
    """What one write task sends to the driver: its commit messages, and the snapshot its
    compactions looked up (None when none did)."""

    messages: tuple[CommitMessage, ...]
    view: int | None


def needs_shuffle(ctx: TableContext) -> bool:
    """Whether each (partition, bucket) must be written by one task: not for an unaware append
    table, whose rows go anywhere in their partition (as Paimon's Spark writer, every task
    writes its own rows), nor for a postpone-bucket table (each task's rows go to
    bucket-postpone/ as one writer's)."""
    if postpone.is_postpone(ctx):
        return False
    return not (ctx.kind is TableKind.APPEND and ctx.options.bucket == UNAWARE_BUCKET)


def add_bucket(ctx: TableContext, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows with the group one task writes (fixed buckets: the bucket, Paimon's hash of
    the bucket key in the table's types; dynamic buckets: the key's assigner, whose task places
    its new keys in buckets of its own; cross-partition: the assigner of the whole primary key,
    so a key's rows of every partition meet in one task) as a last column ``_changelake_bucket``;
    only for tables that :func:`needs_shuffle`."""
    assigner = assigners.for_table(ctx)
    names = ctx.primary_keys if ctx.cross_partition else ctx.bucket_key
    for batch in batches:
        keys = [as_table_type(ctx, batch, name) for name in names]
        yield batch.append_column(BUCKET_COLUMN, pa.array(assigner.route(keys), pa.int32()))


def partition_sizes(ctx: TableContext, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows and bytes of each partition of a task's rows, as rows ``partition, rows, bytes``
    (a fixed-bucket batch write of a postpone-bucket table plans its buckets from them)."""
    totals: dict[bytes, tuple[int, int]] = {}
    for batch in batches:
        if batch.num_rows:
            groups = partition_groups(ctx, partition_columns(ctx, batch))
            for partition, (rows, size) in postpone.partition_sizes(batch, groups).items():
                before = totals.get(partition, (0, 0))
                totals[partition] = (before[0] + rows, before[1] + size)
    if totals:
        yield pa.RecordBatch.from_pylist([{"partition": p, "rows": n, "bytes": b} for p, (n, b) in totals.items()],
                                         schema=SIZES_SCHEMA)


def add_planned_bucket(ctx: TableContext, plan: Mapping[bytes, int],
                       batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of a postpone-bucket table's fixed-bucket batch write with their real bucket
    (Paimon's hash of the bucket key modulo the partition's buckets in ``plan``) and that
    number of buckets, as last columns ``_changelake_bucket`` and ``_changelake_buckets``."""
    for batch in batches:
        groups = partition_groups(ctx, partition_columns(ctx, batch))
        counts = np.array([plan[p] for p in groups.partitions], dtype=np.int64)[groups.codes]
        buckets = bucket.buckets([as_table_type(ctx, batch, k) for k in ctx.bucket_key], counts)
        yield batch.append_column(BUCKET_COLUMN, pa.array(buckets, pa.int32())).append_column(
            BUCKETS_COLUMN, pa.array(counts, pa.int32()))


def write_planned(ctx: TableContext, commit_user: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write rows tagged by :func:`add_planned_bucket` (every row of each of their buckets is
    here) into real buckets, write-only, as Paimon's fixed-bucket batch writer; yields one row
    holding the pickled :class:`TaskResult` (none when there were no rows)."""
    by_count: dict[int, list[pa.Table]] = {}
    for batch in batches:
        if batch.num_rows:
            rows = pa.Table.from_batches([batch])
            counts = rows.column(BUCKETS_COLUMN).to_numpy()
            for n in np.unique(counts).tolist():
                part = rows.filter(pa.array(counts == n)).drop_columns([BUCKET_COLUMN, BUCKETS_COLUMN])
                by_count.setdefault(n, []).append(part)
    if not by_count:
        return
    messages: list[CommitMessage] = []
    for n, parts in sorted(by_count.items()):
        with open_write(postpone.with_buckets(ctx, n, **{"write-only": "true"}), commit_user, one_shot=True) as write:
            for part in parts:
                write.write(part)
            messages += write.prepare()
    result = TaskResult(tuple(messages), None)
    yield result_row(result)


def partition_columns(ctx: TableContext, batch: pa.RecordBatch) -> pa.Table:
    """The batch's partition columns in the table's types (no column, but the rows, when the
    table has no partition)."""
    columns = pa.Table.from_batches([batch]).select(ctx.partition_keys)
    for i, name in enumerate(ctx.partition_keys):
        columns = columns.set_column(i, name, as_table_type(ctx, batch, name))
    return columns


def as_table_type(ctx: TableContext, batch: pa.RecordBatch, name: str) -> pa.Array:
    """Column ``name`` of the batch in the table's type (SchemaMismatchError if it does not
    cast safely)."""
    target = ctx.arrow_schema.field(name).type
    column = batch.column(name)
    try:
        return column if column.type.equals(target) else column.cast(target, safe=True)
    except pa.ArrowException as exc:
        raise SchemaMismatchError(f"of type {column.type} does not cast safely to the table's {target}: {exc}",
                                  table=ctx.name, column=name) from None


def write_groups(ctx: TableContext, commit_user: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write rows tagged by :func:`add_bucket`, every row of each of their buckets here and
    none elsewhere: see :func:`write_rows`."""
    return write_rows(ctx, commit_user, (b.drop_columns([BUCKET_COLUMN]) for b in batches))


def write_rows(ctx: TableContext, commit_user: str, batches: Iterator[pa.RecordBatch], *,
               streaming: bool = False) -> Iterator[pa.RecordBatch]:
    """Write the rows (every row of each of their buckets is here, none elsewhere) with the
    table's merge engine, compaction and changelog producer; yields one row holding the pickled
    :class:`TaskResult` (none when there is nothing to commit). A ``streaming`` write (a whole
    micro-batch of a query in this one task, ``commit_user`` the query's id) keeps its writer in
    this worker for the next batches where the table allows (:mod:`resident_writers`), and
    hands over the compactions finished since; any other write waits for its compactions."""
    if streaming:
        changelog = producers.for_table(ctx)
        if resident_writers.lives_on(ctx, changelog):
            yield from _write_resident(ctx, commit_user, changelog, batches)
            return
    with open_write(ctx, commit_user, one_shot=True) as write:
        wrote = False
        for batch in batches:
            if batch.num_rows:
                write.write(pa.Table.from_batches([batch]))
                wrote = True
        if not wrote:
            return
        # prepare() hands the files over to the messages: closing the writer afterwards deletes
        # nothing of them.
        result = TaskResult(tuple(write.prepare()), write.view)
    yield result_row(result)


def _write_resident(ctx: TableContext, commit_user: str, changelog: ChangelogHook,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """:func:`write_rows` with the writer this worker kept for the table and query (or a new
    one), kept again for the next micro-batch; a task that fails closes it."""
    write = RESIDENT_WRITERS.take(ctx, commit_user) or TableWrite(ctx, commit_user, changelog=changelog)
    try:
        looked = write.forget_stale()
        for batch in batches:
            if batch.num_rows:
                write.write(pa.Table.from_batches([batch]))
        messages = write.prepare()
    except BaseException:
        write.close()
        raise
    RESIDENT_WRITERS.keep(write)
    if messages:
        # The compactions handed over looked the table up as of ``looked`` at the latest: the
        # buckets they compact were checked unchanged then.
        view = write.view if write.view is None or looked is None else min(write.view, looked)
        yield result_row(TaskResult(tuple(messages), view))


def result_row(result: object) -> pa.RecordBatch:
    """A task's result (pickled) as the one row it sends to the driver."""
    return pa.RecordBatch.from_pylist([{MESSAGE_COLUMN: pickle.dumps(result)}], schema=_MESSAGE_SCHEMA)


def task_result(payload: bytes) -> TaskResult:
    """A task's result from what it sent."""
    return unpickled(payload, TaskResult)


def unpickled(payload: bytes, kind: type[_Result]) -> _Result:
    """What a task sent, which must be a ``kind``."""
    result = pickle.loads(payload)
    if not isinstance(result, kind):
        raise TypeError(f"not a changelake {kind.__name__}: {type(result).__name__}")
    return result
