"""Bucketing a flush: each row's (partition, bucket), and each bucket's rows sorted by key and
merged within the flush, in data-file layout."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import OptionError
from changelake.table.context import TableContext
from changelake.table.format import binary_row, bucket, kv
from changelake.table.format.manifest import DataFileMeta
from changelake.table.merge import sort
from changelake.table.read import live_files


@dataclass(frozen=True)
class BucketGroups:
    """Rows tagged with their (partition, bucket) group, in input order."""

    codes: np.ndarray
    partitions: list[bytes]
    buckets: list[int]


def group_by_bucket(ctx: TableContext, data: pa.Table) -> BucketGroups:
    """The (partition, bucket) group of every row."""
    num_buckets = ctx.options.bucket
    if num_buckets < 1:
        raise OptionError(
            f"bucket={num_buckets} (dynamic bucket mode) is not supported "
            "for writing; create the table with a fixed 'bucket'",
            table=ctx.name, option="bucket",
        )
    bucket_ids = bucket.buckets([data.column(k) for k in ctx.bucket_key], num_buckets).astype(np.int64)
    codes = bucket_ids
    radix = num_buckets
    partition_columns = [data.column(k) for k in ctx.partition_keys]
    for column in partition_columns:
        encoded = pc.dictionary_encode(column).combine_chunks()
        codes = codes + np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64) * radix
        radix *= max(1, len(encoded.dictionary))
    unique, first_rows, inverse = np.unique(codes, return_index=True, return_inverse=True)
    arity = len(partition_columns)
    if arity:
        encoded_rows = binary_row.encode([c.take(pa.array(first_rows)) for c in partition_columns])
        partitions = [binary_row.serialize(encoded_rows.row(g), arity) for g in range(len(unique))]
    else:
        partitions = [binary_row.serialize(binary_row.to_bytes([], []), 0)] * len(unique)
    return BucketGroups(inverse.astype(np.int64), partitions, [int(bucket_ids[i]) for i in first_rows])


def restored_files(ctx: TableContext, groups: BucketGroups) -> dict[tuple[bytes, int], list[DataFileMeta]]:
    """Live files of every bucket the rows go to (from the latest snapshot)."""
    latest = ctx.latest_snapshot()
    live = live_files.files_by_bucket(live_files.live_entries(ctx, latest) if latest is not None else [])
    return {(p, b): live.get((p, b), []) for p, b in zip(groups.partitions, groups.buckets, strict=True)}


def sort_and_merge(ctx: TableContext, data: pa.Table, kinds: np.ndarray, groups: BucketGroups,
                   first_sequences: np.ndarray, *, merge: bool) -> list[pa.Table]:
    """Each group's rows in file layout, sorted by key and (with ``merge``) merged within the
    batch by the merge engine. Sequence numbers follow input order within every bucket."""
    n = data.num_rows
    position = np.arange(n, dtype=np.int64)
    sequence = first_sequences[groups.codes] + position
    keys = [data.column(k) for k in ctx.key_names]
    order = sort.sort_indices([pa.array(groups.codes), *keys], pa.array(position))
    sorted_codes = groups.codes[order]
    schema = kv.file_schema(ctx.arrow_schema, ctx.key_names)
    columns = [*keys, pa.array(sequence), pa.array(kinds, type=pa.int8()), *data.columns]
    laid_out = pa.Table.from_arrays(columns, schema=schema)
    engine = ctx.merge_engine
    if merge and engine.keeps_last_row:
        # One global pass: the last row of every (group, key) wins.
        ends = sort.group_ends([pa.array(sorted_codes), *(k.take(order) for k in keys)])
        merged, codes = laid_out.take(order[ends]), sorted_codes[ends]
        bounds = np.searchsorted(codes, np.arange(len(groups.partitions) + 1))
        return [merged.slice(bounds[g], bounds[g + 1] - bounds[g]) for g in range(len(groups.partitions))]
    ordered = laid_out.take(order)
    bounds = np.searchsorted(sorted_codes, np.arange(len(groups.partitions) + 1))
    parts = [ordered.slice(bounds[g], bounds[g + 1] - bounds[g]) for g in range(len(groups.partitions))]
    return [ctx.merge_rows(p, drop_deletes=False) for p in parts] if merge else parts
