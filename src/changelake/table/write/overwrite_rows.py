"""``INSERT OVERWRITE``: rows that replace partitions of a table (or all of it) as one
OVERWRITE snapshot, as Paimon defines it.

Which partitions go: the ones ``partitions`` names (a static overwrite; a partial spec names
every partition that matches it; rows outside it are refused), else, on a partitioned table
with ``dynamic-partition-overwrite`` (Paimon's default), only the partitions the rows are in,
else the whole table. The rows do not merge with what they replace: a primary-key table's rows
are merged among themselves (its merge engine; deletes and retractions dropped) and written as
one sorted run at the top level of each bucket, numbered from 0 as the partition's files are all
new; an append table's rows are written in input order. Streams skip the snapshot, as in Paimon.

Bucket modes: fixed buckets and, on append tables, unaware buckets. Dynamic-bucket,
cross-partition and postpone tables are refused for now: their overwrite has to write the
partition's key index anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from changelake.errors import DataError, OptionError
from changelake.table.append import writer as append_writer
from changelake.table.append.definition import UNAWARE_BUCKET
from changelake.table.commit import overwrite
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file, kv
from changelake.table.format.manifest import FileSource
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints
from changelake.table.read import live_files
from changelake.table.write import bucketing, conform
from changelake.table.write.assigners.fixed import FixedBuckets


def overwrite_rows(ctx: TableContext, data: conform.WriteInput, partitions: Mapping[str, Any] | None,
                   commit_user: str) -> Snapshot | None:
    """Replace the partitions the rules above pick with the rows of ``data``; the snapshot, or
    None when there was nothing to replace and nothing to write."""
    _check_mode(ctx)
    if partitions is not None and not isinstance(partitions, Mapping):
        raise OptionError("partitions of an overwrite is one dict of partition values (a static partition)",
                          table=ctx.name)
    tables = list(conform.input_tables(data, ctx.name))
    rows = pa.concat_tables(tables) if tables else ctx.arrow_schema.empty_table()
    written: list[str] = []
    try:
        messages, in_data = _write(ctx, rows, written)
        targets, rule = _targets(ctx, in_data, partitions)
        if not targets:
            return None
        killpoints.reached(killpoints.KillPoint.OVERWRITE_WRITTEN)
        return overwrite.commit_overwrite(ctx, rule, messages, commit_user, BATCH_COMMIT_IDENTIFIER, base=None)
    except BaseException:
        ctx.file_io.discard(written)
        raise


def _check_mode(ctx: TableContext) -> None:
    bucket = ctx.options.bucket
    if bucket >= 1 or (ctx.kind is TableKind.APPEND and bucket == UNAWARE_BUCKET):
        return
    raise OptionError(f"changelake overwrites tables of fixed buckets (and unaware append tables) so far; this "
                      f"table has bucket={bucket}: delete_partitions() then write() replaces rows in two commits",
                      table=ctx.name, option="bucket")


def _write(ctx: TableContext, data: pa.Table, written: list[str]) -> tuple[list[CommitMessage], set[bytes]]:
    """The rows written as new files: the commit messages, and the partitions the rows are in."""
    if ctx.kind is TableKind.APPEND:
        rows = append_writer.inserts(ctx, data)
        if not rows.num_rows:
            return [], set()
        groups, order, bounds = append_writer.group_rows(ctx, rows)
        settings, level = ctx.file_settings, 0

        def part(group: int) -> pa.Table:
            return rows.take(order[bounds[group]:bounds[group + 1]])
    else:
        conformed, kinds = conform.conform(ctx, data)
        if not conformed.num_rows:
            return [], set()
        groups = bucketing.group_by_bucket(ctx, conformed, FixedBuckets(ctx))
        flush = bucketing.sort_flush(ctx, conformed, kinds, groups, np.zeros(len(groups.partitions), dtype=np.int64))
        merged = bucketing.merge_flush(ctx, flush)
        settings, level = ctx.file_settings, ctx.options.num_levels - 1

        def part(group: int) -> pa.Table:
            return kv.drop_retractions(merged.group(group))

    def write(group: int) -> CommitMessage:
        where = (groups.partitions[group], groups.buckets[group])
        bucket_dir = ctx.bucket_dir(*where)
        files = data_file.write(ctx.file_io, bucket_dir, [part(group)], settings, level, FileSource.APPEND,
                                first_sequence=0 if ctx.kind is TableKind.APPEND else None)
        written.extend(f"{bucket_dir}/{f.file_name}" for f in files)
        return CommitMessage(*where, ctx.options.bucket, new_files=tuple(files))

    messages = [m for m in map_all(write, range(len(groups.partitions))) if m.new_files]
    return messages, set(groups.partitions)


def _targets(ctx: TableContext, in_data: set[bytes],
             partitions: Mapping[str, Any] | None) -> tuple[frozenset[bytes], overwrite.PartitionRule]:
    """The serialized partitions the overwrite replaces as the table is now, and the rule that
    picks them when it lands (a partition another commit made meanwhile goes too if the rule
    matches it, as under Paimon's partition filter); DataError for rows outside a static
    partition."""
    latest = ctx.latest_snapshot()
    present = {e.partition for e in live_files.live_entries(ctx, latest)} if latest is not None else set()
    if partitions is not None:
        given = ctx.partition_of(partitions)
        named = [i for i, key in enumerate(ctx.partition_keys) if key in partitions]

        def matches(partition: bytes) -> bool:
            values = ctx.partition_values(partition)
            return all(values[i] == given[i] for i in named)

        outside = sorted(ctx.describe_partition(p) for p in in_data if not matches(p))
        if outside:
            raise DataError(f"rows of {outside[0]} (and {len(outside) - 1} more) lie outside the partition "
                            f"{dict(partitions)} the overwrite names", table=ctx.name)
        return frozenset({p for p in present if matches(p)} | in_data), matches
    if ctx.partition_keys and ctx.options.dynamic_partition_overwrite:
        return frozenset(in_data), frozenset(in_data).__contains__
    return frozenset(present | in_data), lambda _: True
