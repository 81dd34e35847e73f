"""Bucketing a flush: each row's (partition, bucket), and each bucket's rows sorted by key and
merged within the flush, in data-file layout."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from changelake.errors import BucketRescaleError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.context import TableContext
from changelake.table.format import binary_row, kv
from changelake.table.format.manifest import DataFileMeta, ManifestEntry
from changelake.table.merge import sort
from changelake.table.read import live_files
from changelake.table.write.partitions import value_codes


class Assigns(Protocol):
    """What bucketing needs of an assigner: the bucket of every row."""

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        """The bucket of every row (int64); ``partition_of_row`` indexes ``partitions`` (serialized)."""
        ...


@dataclass(frozen=True)
class BucketGroups:
    """Rows tagged with their (partition, bucket) group, in input order."""

    codes: np.ndarray
    partitions: list[bytes]
    buckets: list[int]


def group_by_bucket(ctx: TableContext, data: pa.Table, assigner: Assigns) -> BucketGroups:
    """The (partition, bucket) group of every row, its bucket as ``assigner`` says."""
    partition_columns = [data.column(k) for k in ctx.partition_keys]
    codes, radix = value_codes(partition_columns, np.zeros(data.num_rows, dtype=np.int64), 1)
    distinct, partition_rows, partition_of_row = _groups(codes, radix)
    arity = len(partition_columns)
    if arity:
        encoded_rows = binary_row.encode([c.take(pa.array(partition_rows)) for c in partition_columns])
        partitions = [binary_row.serialize(encoded_rows.row(g), arity) for g in range(len(distinct))]
    else:
        partitions = [binary_row.serialize(binary_row.to_bytes([], []), 0)] * len(distinct)
    bucket_ids = assigner.assign(data, partition_of_row, partitions)
    num_buckets = int(bucket_ids.max()) + 1 if len(bucket_ids) else 1
    _, group_rows, inverse = _groups(bucket_ids + partition_of_row * num_buckets, num_buckets * len(distinct))
    return BucketGroups(inverse.astype(np.int64), [partitions[partition_of_row[i]] for i in group_rows],
                        [int(bucket_ids[i]) for i in group_rows])


def _groups(codes: np.ndarray, radix: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct codes (ascending), a row of each, and every row's index among them, as
    ``np.unique`` gives them; codes below a small ``radix`` are counted instead of sorted."""
    if radix > max(len(codes), 1 << 16):
        unique, rows, inverse = np.unique(codes, return_index=True, return_inverse=True)
        return unique, rows, inverse
    unique = np.flatnonzero(np.bincount(codes, minlength=radix))
    index = np.zeros(radix, dtype=np.int64)
    index[unique] = np.arange(len(unique))
    # Any row of a group will do (they share partition and bucket): the one assigned last.
    some_row = np.zeros(radix, dtype=np.int64)
    some_row[codes] = np.arange(len(codes))
    return unique, some_row[unique], index[codes]


def restored_files(ctx: TableContext, groups: BucketGroups) -> dict[tuple[bytes, int], list[DataFileMeta]]:
    """Live files of every bucket the rows go to (from the latest snapshot); BucketRescaleError
    when a partition the rows go to holds files of another number of buckets."""
    latest = ctx.latest_snapshot()
    entries = live_files.live_entries(ctx, latest) if latest is not None else []
    _check_bucket_counts(ctx, entries, set(groups.partitions))
    live = live_files.files_by_bucket(entries)
    return {(p, b): live.get((p, b), []) for p, b in zip(groups.partitions, groups.buckets, strict=True)}


def _check_bucket_counts(ctx: TableContext, entries: Iterable[ManifestEntry], partitions: Collection[bytes]) -> None:
    """BucketRescaleError when an entry of one of ``partitions`` was written with another number
    of buckets than the table's ``bucket``: Paimon refuses such a write (``AbstractFileStoreWrite``'s
    check, worded as here), since a rescale (``ALTER TABLE ... SET ('bucket' = 'N')``) leaves the
    old partitions bucketed as they were until an INSERT OVERWRITE rewrites them."""
    total_buckets = ctx.options.bucket
    for entry in entries:
        # A postpone-bucket table's partition holds its real buckets and bucket-postpone/.
        if entry.partition in partitions and entry.total_buckets not in (total_buckets, POSTPONE_BUCKET):
            raise BucketRescaleError(
                f"try to write {ctx.describe_partition(entry.partition)} with a new bucket num {total_buckets}, "
                f"but the previous bucket num is {entry.total_buckets}: rescale the partition first "
                "(table.rescale(), or Paimon's rescale procedure or INSERT OVERWRITE)",
                table=ctx.name, option="bucket")


@dataclass(frozen=True)
class SortedFlush:
    """A flush's rows in data-file layout (input order) and the order that sorts them by
    (bucket group, key, sequence): group ``g`` is ``order[bounds[g]:bounds[g + 1]]``."""

    rows: pa.Table
    order: np.ndarray
    sorted_codes: np.ndarray
    bounds: np.ndarray
    key_names: tuple[str, ...]

    def raw(self, group: int) -> pa.Table:
        """The group's rows sorted by key then sequence number, not merged."""
        return self.take(self.order[self.bounds[group]:self.bounds[group + 1]])

    def raw_if_read(self, group: int) -> Iterator[pa.Table]:
        """:meth:`raw` of the group, taken only if the changelog producer reads it."""
        yield self.raw(group)

    def take(self, positions: np.ndarray) -> pa.Table:
        """The rows at ``positions``; a key column is the array of its value column (as in
        ``rows``), taken once for both."""
        keys = len(self.key_names)
        taken = self.rows.select(range(keys, self.rows.num_columns)).take(positions)
        return pa.Table.from_arrays([taken.column(k) for k in self.key_names] + taken.columns,
                                    schema=self.rows.schema)


def sort_flush(ctx: TableContext, data: pa.Table, kinds: np.ndarray, groups: BucketGroups,
               first_sequences: np.ndarray) -> SortedFlush:
    """The rows laid out as data files, numbered in input order within every bucket (each
    group from its first sequence number), and sorted by group, key and sequence."""
    n = data.num_rows
    position = np.arange(n, dtype=np.int64)
    sequence = first_sequences[groups.codes] + position
    keys = [data.column(k) for k in ctx.key_names]
    # By key and position first, then a stable sort by group: group codes are small integers,
    # which numpy sorts by radix, and keys within a batch often come in ascending runs.
    by_key = sort.sort_indices(keys, pa.array(position))
    codes = groups.codes[by_key].astype(np.min_scalar_type(len(groups.partitions)))
    order = by_key[np.argsort(codes, kind="stable")]
    sorted_codes = groups.codes[order]
    schema = kv.file_schema(ctx.arrow_schema, ctx.key_names)
    columns = [pa.array(sequence), pa.array(kinds, type=pa.int8()), *data.columns]
    # One chunk per column (a buffer of many writes has many): each group's rows are taken
    # from it separately, and a take from a chunked column concatenates the chunks first.
    values = pa.Table.from_arrays(columns, schema=pa.schema(list(schema)[len(keys):])).combine_chunks()
    laid_out = pa.Table.from_arrays([values.column(k) for k in ctx.key_names] + values.columns, schema=schema)
    bounds = np.searchsorted(sorted_codes, np.arange(len(groups.partitions) + 1))
    return SortedFlush(laid_out, order, sorted_codes, bounds, tuple(ctx.key_names))


@dataclass(frozen=True)
class MergedFlush:
    """Each group's rows of a flush merged within the flush, in key order, made when asked
    for: the pool's workers make them in parallel, each its group's, before writing them."""

    ctx: TableContext
    flush: SortedFlush
    # With a merge engine that keeps each key's last row: the rows that are a key's last, in
    # group and key order, and where each group's start (else the engine merges each group).
    last_rows: np.ndarray | None
    bounds: np.ndarray | None

    def group(self, group: int) -> pa.Table:
        """The group's rows merged by the merge engine."""
        if self.last_rows is None or self.bounds is None:
            return self.ctx.merge_rows(self.flush.raw(group), drop_deletes=False)
        return self.flush.take(self.last_rows[self.bounds[group]:self.bounds[group + 1]])


def merge_flush(ctx: TableContext, flush: SortedFlush) -> MergedFlush:
    """The flush's rows merged within the flush by the merge engine, per group."""
    if not ctx.merge_engine.keeps_last_row:
        return MergedFlush(ctx, flush, None, None)
    # One global pass: the last row of every (group, key) wins.
    keys = [flush.rows.column(kv.key_column(k)) for k in ctx.key_names]
    ends = sort.ordered_group_ends(keys, flush.order)
    ends[:-1] |= flush.sorted_codes[1:] != flush.sorted_codes[:-1]  # the same key in two partitions
    codes = flush.sorted_codes[ends]
    return MergedFlush(ctx, flush, flush.order[ends], np.searchsorted(codes, np.arange(len(flush.bounds))))
