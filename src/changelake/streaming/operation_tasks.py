"""What Spark's table operations (DELETE, UPDATE, MERGE INTO, INSERT OVERWRITE) run in their
tasks, on executors. Nothing here talks to Spark: the functions take and yield Arrow record
batches, as ``mapInArrow`` hands them over.

Between stages, rows travel as Arrow IPC blobs, each tagged with its write group (the
partition and the group :func:`write_tasks.add_bucket` would give the rows of a write: a fixed
bucket, a dynamic bucket's assigner, a cross-partition key's assigner), never as Spark rows:
values keep their exact types (a nanosecond timestamp stays one) and no column is converted to
Spark and back. A shuffle by group then hands every row of a group to one task, which writes
them as :func:`write_tasks.write_rows` writes a micro-batch. A MERGE routes its source rows and
the table's rows alike, so a key's source and table rows meet in the task that writes the key.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.streaming import write_tasks
from changelake.streaming.write_tasks import BUCKET_COLUMN, BUCKETS_COLUMN
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import binary_row, bucket
from changelake.table.read import reader
from changelake.table.read.planner import Split
from changelake.table.write import assigners, merge_rows, overwrite_rows, postpone, row_level
from changelake.table.write.merge_rows import Clause
from changelake.table.write.partitions import partition_groups

SPLIT_COLUMN = "split"
# Which rows a blob holds: a merge's source rows, or table rows (a merge's, or an operation's changes).
SOURCE_SIDE, TABLE_SIDE = 0, 1
ROUTED_DDL = "side tinyint, partition binary, `group` long, rows binary"
_ROUTED_SCHEMA = pa.schema([pa.field("side", pa.int8()), pa.field("partition", pa.binary()),
                            pa.field("group", pa.int64()), pa.field("rows", pa.binary())])
# Rows a blob holds at most: Spark's Arrow batches hold binary values of 2 GiB at most together.
_BLOB_ROWS = 1 << 16


def splits_table(splits: Sequence[Split]) -> pa.Table:
    """The rows a job over ``splits`` starts from: one pickled split a row."""
    return pa.table({SPLIT_COLUMN: pa.array([pickle.dumps(s) for s in splits], pa.binary())})


def _splits(batches: Iterator[pa.RecordBatch]) -> Iterator[Split]:
    for batch in batches:
        for blob in batch.column(SPLIT_COLUMN).to_pylist():
            yield write_tasks.unpickled(blob, Split)


def _blob(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    return bytes(sink.getvalue())


def _rows(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


def routed(ctx: TableContext, rows: pa.Table, side: int, spread: int) -> Iterator[pa.RecordBatch]:
    """``rows`` (the table's key and partition columns among theirs) cut by write group into
    blobs, as rows ``side, partition, group, rows``. A postpone-bucket table's rows, which any
    task may write, are spread over ``spread`` groups by key (a merge needs a key's rows in
    one task)."""
    if not rows.num_rows:
        return
    whole = rows.combine_chunks().to_batches()[0]
    is_postpone = postpone.is_postpone(ctx)
    if is_postpone:
        groups = hashed_groups(ctx, whole, ctx.primary_keys, spread)
    else:
        names = ctx.primary_keys if ctx.cross_partition else ctx.bucket_key
        groups = assigners.for_table(ctx).route([write_tasks.as_table_type(ctx, whole, n) for n in names])
    if ctx.cross_partition or is_postpone:
        yield from blobs(rows, side, groups)
        return
    by_partition = partition_groups(ctx, write_tasks.partition_columns(ctx, whole))
    yield from blobs(rows, side, groups, by_partition.codes, by_partition.partitions)


def hashed_groups(ctx: TableContext, rows: pa.RecordBatch, names: Sequence[str], spread: int) -> np.ndarray:
    """Every row's group of ``spread``: Paimon's hash of its ``names`` columns in the table's
    types, so that the rows of one key, from any source, meet in one group."""
    encoded = binary_row.encode([write_tasks.as_table_type(ctx, rows, name) for name in names])
    return np.abs(np.fmod(bucket.hash_rows(encoded).astype(np.int64), max(1, spread)))


def blobs(rows: pa.Table, side: int, groups: np.ndarray, codes: np.ndarray | None = None,
          partitions: Sequence[bytes] = (b"",)) -> Iterator[pa.RecordBatch]:
    """``rows`` cut by (partition, group) into blobs of at most ``_BLOB_ROWS`` rows, as rows
    ``side, partition, group, rows``; ``codes`` index each row's partition in ``partitions``
    (None: all in the first)."""
    radix = int(groups.max()) + 1
    combined = groups if codes is None else codes * radix + groups
    order = np.argsort(combined, kind="stable")
    values, starts = np.unique(combined[order], return_index=True)
    ends = [*starts[1:].tolist(), rows.num_rows]
    for value, start, end in zip(values.tolist(), starts.tolist(), ends, strict=True):
        partition, group = partitions[value // radix], value % radix
        for first in range(start, end, _BLOB_ROWS):
            part = rows.take(pa.array(order[first:min(end, first + _BLOB_ROWS)]))
            yield pa.RecordBatch.from_pylist([{"side": side, "partition": partition, "group": group,
                                               "rows": _blob(part)}], schema=_ROUTED_SCHEMA)


def changed_rows(ctx: TableContext, row_filter: pc.Expression, change: Callable[[pa.Table], pa.Table], spread: int,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """For each split a task got (rows ``split``): the merged rows ``row_filter`` matches,
    turned by ``change`` into the rows to write (a DELETE's -D, an UPDATE's -U/+U), routed."""
    for split in _splits(batches):
        rows = row_level.matching_rows(ctx, [split], row_filter)
        if rows is not None:
            yield from routed(ctx, change(rows), TABLE_SIDE, spread)


def table_rows(ctx: TableContext, spread: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Every merged row of the splits a task got (rows ``split``), routed (a merge's table side)."""
    for split in _splits(batches):
        for rows in reader.read_splits(ctx, [split], ctx.arrow_schema.names, None):
            yield from routed(ctx, rows.cast(ctx.arrow_schema), TABLE_SIDE, spread)


def source_rows(ctx: TableContext, spread: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A merge's source rows, routed as the table rows of their keys are."""
    for batch in batches:
        yield from routed(ctx, pa.Table.from_batches([batch]), SOURCE_SIDE, spread)


def sides(batches: Iterator[pa.RecordBatch]) -> tuple[list[pa.Table], list[pa.Table]]:
    """The source rows and the table rows of the blobs a task got (rows ``side, ..., rows``)."""
    sources: list[pa.Table] = []
    tables: list[pa.Table] = []
    for batch in batches:
        for side, blob in zip(batch.column("side").to_pylist(), batch.column("rows").to_pylist(), strict=True):
            (sources if side == SOURCE_SIDE else tables).append(_rows(blob))
    return sources, tables


def write_routed(ctx: TableContext, commit_user: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write the routed rows a task got (every row of each of their groups) with the table's
    merge engine, compaction and changelog producer: see :func:`write_tasks.write_rows`."""
    _, tables = sides(batches)
    return write_tasks.write_rows(ctx, commit_user, (b for t in tables for b in t.to_batches()))


def merge_groups(ctx: TableContext, commit_user: str, clauses: Sequence[Clause], source_schema: pa.Schema,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A merge of the source and table rows a task got (every row of each of their groups):
    the clauses carried out on them and written, as :func:`write_routed` writes."""
    sources, tables = sides(batches)
    if not sources and not merge_rows.reads_unmatched(clauses):
        return iter(())
    source = pa.concat_tables(sources) if sources else source_schema.empty_table()
    # The driver checked the source; one that changed since (a source read anew) is caught here.
    merge_rows.check_unique(ctx, source, ctx.primary_keys)
    target = pa.concat_tables(tables) if tables else ctx.arrow_schema.empty_table()
    changes = merge_rows.changes(ctx, source, target, clauses)
    if changes is None:
        return iter(())
    return write_tasks.write_rows(ctx, commit_user, iter(changes.to_batches()))


@dataclass(frozen=True)
class OverwriteResult:
    """What one overwrite task sends to the driver: its commit messages (files at the top
    level of their buckets) and the partitions its rows are in."""

    messages: tuple[CommitMessage, ...]
    partitions: frozenset[bytes]


def overwrite_groups(ctx: TableContext, plan: Mapping[bytes, int] | None,
                     batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Write the rows a task got (every row of each of their buckets) as an overwrite's new
    files (:func:`overwrite_rows.write_files`; a postpone-bucket table's in the real buckets of
    ``plan``); one row holding the pickled :class:`OverwriteResult` (none when there were no
    rows)."""
    tags = [BUCKET_COLUMN, BUCKETS_COLUMN]
    parts = [pa.Table.from_batches([b.drop_columns([t for t in tags if t in b.schema.names])])
             for b in batches if b.num_rows]
    if not parts:
        return
    written: list[str] = []
    try:
        messages, partitions = overwrite_rows.write_files(ctx, pa.concat_tables(parts), written, plan=plan)
    except BaseException:
        ctx.file_io.discard(written)
        raise
    result = OverwriteResult(tuple(messages), frozenset(partitions))
    yield write_tasks.result_row(result)


def overwrite_result(payload: bytes) -> OverwriteResult:
    """An overwrite task's result from what it sent."""
    return write_tasks.unpickled(payload, OverwriteResult)
