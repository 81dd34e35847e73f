"""``INSERT OVERWRITE``: rows that replace partitions of a table (or all of it) as one
OVERWRITE snapshot, as Paimon defines it.

Which partitions go: the ones ``partitions`` names (a static overwrite; a partial spec names
every partition that matches it; rows outside it are refused), else, on a partitioned table
with ``dynamic-partition-overwrite`` (Paimon's default), only the partitions the rows are in,
else the whole table. The rows do not merge with what they replace: a primary-key table's rows
are merged among themselves (its merge engine; deletes and retractions dropped) and written as
one sorted run at the top level of each bucket, numbered from 0 as the partition's files are all
new; an append table's rows are written in input order. Streams skip the snapshot, as in Paimon.

Every bucket mode: the replaced partitions' keys are placed anew (see
:mod:`.overwrite_buckets`). On a cross-partition table a key lives in one partition, so rows
whose key lives in a partition the overwrite keeps are a DataError.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError, OptionError
from changelake.table.append import writer as append_writer
from changelake.table.commit import overwrite
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file, kv
from changelake.table.format.manifest import FileSource
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints
from changelake.table.read import live_files, planner, reader
from changelake.table.write import bucketing, conform, postpone
from changelake.table.write.overwrite_buckets import Placement


def overwrite_rows(ctx: TableContext, data: conform.WriteInput, partitions: Mapping[str, Any] | None,
                   commit_user: str) -> Snapshot | None:
    """Replace the partitions the rules above pick with the rows of ``data``; the snapshot, or
    None when there was nothing to replace and nothing to write."""
    check(ctx, partitions)
    tables = list(conform.input_tables(data, ctx.name))
    rows = pa.concat_tables(tables) if tables else ctx.arrow_schema.empty_table()
    written: list[str] = []
    try:
        messages, in_data = write_files(ctx, rows, written)
        chosen, rule = targets(ctx, in_data, partitions)
        if not chosen:
            return None
        if ctx.cross_partition:
            check_keys_kept(ctx, rows.select(ctx.primary_keys), chosen)
        killpoints.reached(killpoints.KillPoint.OVERWRITE_WRITTEN)
        return overwrite.commit_overwrite(ctx, rule, messages, commit_user, BATCH_COMMIT_IDENTIFIER, base=None)
    except BaseException:
        ctx.file_io.discard(written)
        raise


def check(ctx: TableContext, partitions: Mapping[str, Any] | None) -> None:
    """OptionError for a ``partitions`` that is not one dict of partition values, or a
    postpone-bucket table whose batch writes leave rows in ``bucket-postpone/`` (an overwrite
    writes real buckets, as Paimon's batch writes do by default)."""
    if postpone.is_postpone(ctx) and not ctx.options.postpone_batch_write_fixed_bucket:
        raise OptionError("an overwrite of a postpone-bucket table writes real buckets; this table sets this "
                          "false", table=ctx.name, option="postpone.batch-write-fixed-bucket")
    if partitions is not None and not isinstance(partitions, Mapping):
        raise OptionError("partitions of an overwrite is one dict of partition values (a static partition)",
                          table=ctx.name)


def check_keys_kept(ctx: TableContext, keys: pa.Table, chosen: frozenset[bytes]) -> None:
    """DataError when a key of a cross-partition table's overwrite rows lives in a partition
    the overwrite keeps (it would then live in two)."""
    latest = ctx.latest_snapshot()
    if latest is None or not keys.num_rows:
        return
    names = list(ctx.primary_keys)
    keys = keys.cast(pa.schema([ctx.arrow_schema.field(k) for k in names])).group_by(names).aggregate([])
    expression = functools.reduce(operator.and_, [pc.field(k).isin(keys.column(k)) for k in names])
    kept = [s for s in planner.plan(ctx, latest, expression, planner.batch_levels(ctx)) if s.partition not in chosen]
    for part in reader.read_splits(ctx, kept, [*names, *ctx.partition_keys], expression):
        found = part.join(keys, keys=names, join_type="left semi")
        if found.num_rows:
            row = found.slice(0, 1).to_pylist()[0]
            raise DataError(f"key {({k: row[k] for k in names})} lives in partition "
                            f"{({k: row[k] for k in ctx.partition_keys})}, which the overwrite keeps (a key lives "
                            "in one partition of a cross-partition table): overwrite that partition too",
                            table=ctx.name)


def write_files(ctx: TableContext, data: pa.Table, written: list[str], *,
                plan: Mapping[bytes, int] | None = None) -> tuple[list[CommitMessage], set[bytes]]:
    """The rows (every row of each of their buckets) written as new files, their paths added
    to ``written`` as they land: the commit messages, and the partitions the rows are in. A
    postpone-bucket table's rows go to the real buckets ``plan`` gives each partition (default:
    planned from these rows)."""
    placement: Placement | None = None
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
        placement = Placement.of(ctx, conformed, plan=plan)
        # A cross-partition table's key in several partitions of the rows lives in one of them.
        conformed, kinds = placement.assigner.relocate(conformed, kinds)
        groups = bucketing.group_by_bucket(ctx, conformed, placement.assigner)
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
        written.extend(ctx.file_paths(bucket_dir, files))
        total = ctx.options.bucket if placement is None else placement.total_buckets(where[0])
        return CommitMessage(*where, total, new_files=tuple(files))

    try:
        messages = [m for m in map_all(write, range(len(groups.partitions))) if m.new_files]
        if placement is not None:
            messages = placement.finish(messages)
    except BaseException:
        if placement is not None:
            placement.abandon()
        raise
    written.extend(ctx.paths.index(m.hash_index.file_name) for m in messages if m.hash_index is not None)
    return messages, set(groups.partitions)


def targets(ctx: TableContext, in_data: set[bytes],
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
