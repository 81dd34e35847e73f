"""Writing postpone-bucket tables (``bucket = -2``), as Paimon 1.1+ writes them.

A long-lived writer (and the Spark sink) puts each partition's rows into ``bucket-postpone/``,
as Paimon's ``PostponeBucketWriter`` does: in arrival order, neither sorted nor merged, every row
numbered -1 (Java Paimon's ``KeyValue.UNKNOWN_SEQUENCE``; pypaimon numbers them from 0 per writer:
the numbers mean nothing, since the compaction reads the files writer by writer and numbers the
rows anew), in files named
``data--u-<commit user>-s-<write id>-w-<uuid>-0.<format>`` so that the compaction can tell the
writers apart, at level 0, with ``_TOTAL_BUCKETS`` -2. Readers skip these files until
:mod:`.postpone_compaction` moves their rows into real buckets.

A batch write (``Table.write``) with ``postpone.batch-write-fixed-bucket`` (the default) puts its
rows straight into real buckets instead, as Paimon's batch writers do: a partition keeps the
number of buckets it has, a new one gets ``postpone.default-bucket-num``, else a number inferred
from the batch (Paimon's ``PostponeUtils.decideFixedBucketNum``, without its rescale of existing
partitions).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping
from functools import cached_property

import numpy as np
import pyarrow as pa

from changelake.errors import CommitOutcomeUnknownError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file, kv
from changelake.table.format.file_settings import FileSettings
from changelake.table.format.manifest import DataFileMeta, ManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.lsm.levels import Levels
from changelake.table.read import live_files
from changelake.table.write import conform as rows
from changelake.table.write import landing
from changelake.table.write.bucket_state import BucketState
from changelake.table.write.conform import ROWKIND_COLUMN, WriteInput
from changelake.table.write.partitions import PartitionGroups, partition_groups
from changelake.table.write.writer import TableWrite

# The sequence number of every row in a postpone file, as Java Paimon writes them.
UNKNOWN_SEQUENCE = -1
# The changelog producer of a table context (the caller's: producers live above the engine).
ChangelogFor = Callable[[TableContext], ChangelogHook]


def is_postpone(ctx: TableContext) -> bool:
    """Whether the table is a postpone-bucket table."""
    return ctx.options.bucket == POSTPONE_BUCKET


def table_write(ctx: TableContext, commit_user: str, *, changelog: ChangelogHook,
                wait_compaction: bool = False) -> TableWrite:
    """The writer of the table's rows: :class:`PostponeWrite` for postpone-bucket tables, else
    the LSM writer of fixed buckets."""
    if is_postpone(ctx):
        return PostponeWrite(ctx, commit_user, changelog=changelog)
    return TableWrite(ctx, commit_user, changelog=changelog, wait_compaction=wait_compaction)


class PostponeWrite(TableWrite):
    """A writer of a postpone-bucket table: rows go to their partition's ``bucket-postpone/``
    as they come (see the module's docstring), flushed at ``write-buffer-size`` and at commit.
    It never compacts and writes no changelog (Paimon's postpone writer writes none: the
    compaction that moves the rows into real buckets writes the producer's)."""

    def __init__(self, ctx: TableContext, commit_user: str, *, changelog: ChangelogHook) -> None:
        super().__init__(ctx, commit_user, changelog=changelog)
        # Paimon's writer id: a random one when the engine gives none (its Flink and Spark
        # writers give the subtask's index).
        self.write_id = random.randrange(2**31 - 1)

    @cached_property
    def _settings(self) -> FileSettings:
        options = self.ctx.options
        prefix = f"{options.data_file_prefix}-u-{self.commit_user}-s-{self.write_id}-w-"
        return dataclasses.replace(self.ctx.file_settings, prefix=prefix, ordered=False)

    def _flush(self, *, final: bool) -> None:
        if not self._pending:
            return
        data = pa.concat_tables([t for t, _ in self._pending])
        kinds = np.concatenate([k for _, k in self._pending])
        groups = partition_groups(self.ctx, data)
        order = np.argsort(groups.codes, kind="stable")  # each partition's rows in arrival order
        bounds = np.searchsorted(groups.codes[order], np.arange(len(groups.partitions) + 1))
        states = []
        for partition in groups.partitions:
            key = (partition, POSTPONE_BUCKET)
            if key not in self._buckets:
                self._buckets[key] = BucketState(partition, POSTPONE_BUCKET, Levels((), self.ctx.options.num_levels), 0)
            states.append(self._buckets[key])

        done: list[str] = []

        def write(group: int) -> list[DataFileMeta]:
            taken = order[bounds[group]:bounds[group + 1]]
            part = data.take(taken)
            sequence = pa.array(np.full(len(taken), UNKNOWN_SEQUENCE, dtype=np.int64))
            laid_out = pa.Table.from_arrays(
                [*(part.column(k) for k in self.ctx.key_names), sequence, pa.array(kinds[taken], pa.int8()),
                 *part.columns], schema=self.ctx.file_schema)
            bucket_dir = self.ctx.bucket_dir(groups.partitions[group], POSTPONE_BUCKET)
            files = data_file.write(self.ctx.file_io, bucket_dir, [laid_out], self._settings, level=0)
            done.extend(self.ctx.file_paths(bucket_dir, files))
            return files

        # Partitions are written in parallel on the shared pool, as the LSM writer writes buckets.
        try:
            written = map_all(write, range(len(states)))
        except BaseException:
            # The partitions written before the failure: their rows stay buffered, to be
            # written again.
            self.ctx.file_io.discard(done)
            raise
        for state, files in zip(states, written, strict=True):
            state.new_files += files
        self._pending.clear()
        self._pending_bytes = 0

    def _compact(self, state: BucketState, *, full: bool, committed: object) -> None:
        """Postpone buckets are compacted into real buckets by the table's compaction only."""


def known_bucket_counts(entries: list[ManifestEntry]) -> dict[bytes, int]:
    """Each partition's number of real buckets, by its files (Paimon's ``getKnownNumBuckets``)."""
    return {e.partition: e.total_buckets for e in entries if e.bucket != POSTPONE_BUCKET and e.total_buckets > 0}


def estimated_buckets(ctx: TableContext, rows: int, size: int) -> int:
    """Buckets for ``rows`` rows of ``size`` bytes: one per ``postpone.target-row-num-per-bucket``
    rows when set, else one per ``postpone.target-size-per-bucket`` bytes, at least one."""
    options = ctx.options
    target_rows = options.postpone_target_row_num_per_bucket
    if target_rows is not None:
        return max(1, math.ceil(rows / target_rows))
    return max(1, math.ceil(size / options.postpone_target_size_per_bucket))


def batch_bucket_count(ctx: TableContext, rows: int, size: int) -> int:
    """A new partition's buckets in a fixed-bucket batch write: ``postpone.default-bucket-num``,
    else the estimate rounded up to a power of two and capped at
    ``postpone.batch-write-fixed-bucket.max-parallelism`` (Paimon's ``decideFixedBucketNum``)."""
    options = ctx.options
    if options.postpone_default_bucket_num is not None:
        return options.postpone_default_bucket_num
    cap = options.postpone_batch_write_fixed_bucket_max_parallelism
    wanted = min(estimated_buckets(ctx, rows, size), cap)
    return min(1 << (wanted - 1).bit_length(), cap)


def partition_sizes(data: pa.Table | pa.RecordBatch, groups: PartitionGroups) -> dict[bytes, tuple[int, int]]:
    """The rows and bytes of each partition's rows in ``data`` (bytes in proportion to rows)."""
    counts = np.bincount(groups.codes, minlength=len(groups.partitions))
    per_row = data.nbytes / data.num_rows if data.num_rows else 0.0
    return {p: (int(n), int(n * per_row)) for p, n in zip(groups.partitions, counts, strict=True)}


def fixed_bucket_plan(ctx: TableContext, sizes: Mapping[bytes, tuple[int, int]]) -> dict[bytes, int]:
    """The real buckets of each partition a fixed-bucket batch write of ``sizes`` (rows, bytes
    per partition) writes: the number a partition has, else :func:`batch_bucket_count`."""
    latest = ctx.latest_snapshot()
    known = known_bucket_counts(live_files.live_entries(ctx, latest)) if latest is not None else {}
    return {p: known.get(p) or batch_bucket_count(ctx, n, size) for p, (n, size) in sizes.items()}


def with_buckets(ctx: TableContext, num_buckets: int, **options: str) -> TableContext:
    """The table as a fixed-bucket table of ``num_buckets`` buckets (a partition's real buckets)."""
    schema = ctx.schema.model_copy(update={"options": {**ctx.schema.options, "bucket": str(num_buckets), **options}})
    return dataclasses.replace(ctx, schema=schema)


def write_fixed_buckets(ctx: TableContext, data: WriteInput, commit_user: str, identifier: int, *,
                        changelog_for: ChangelogFor) -> Snapshot | None:
    """A batch write of a postpone-bucket table into real buckets, as one commit (see the
    module's docstring); None when there were no rows."""
    arrow = rows.to_arrow(data, ctx.name)
    conformed, kinds = rows.conform(ctx, arrow)
    if not conformed.num_rows:
        return None
    groups = partition_groups(ctx, conformed)
    plan = fixed_bucket_plan(ctx, partition_sizes(conformed, groups))
    buckets = [plan[p] for p in groups.partitions]
    # The rows go through the fixed-bucket writers as conformed, with their row kinds (from
    # the ``rowkind.field`` column, when the table has one, else in a ``rowkind`` column).
    tagged = conformed if ctx.options.rowkind_field is not None else conformed.append_column(
        ROWKIND_COLUMN, pa.array(kv.ROW_KIND_SYMBOLS).take(pa.array(kinds)))
    messages: list[CommitMessage] = []
    writers: list[TableWrite] = []
    try:
        for num_buckets in sorted(set(buckets)):
            # Paimon's fixed-bucket batch writer is write-only: compaction is left to later writers.
            bucketed = with_buckets(ctx, num_buckets, **{"write-only": "true"})
            write = TableWrite(bucketed, commit_user, changelog=changelog_for(bucketed), wait_compaction=True)
            writers.append(write)
            wanted = np.flatnonzero(np.array(buckets) == num_buckets)
            write.write(tagged.filter(pa.array(np.isin(groups.codes, wanted))))
            messages += write.prepare()
        try:
            landed = landing.land(ctx, changelog_for(ctx), messages, commit_user, identifier, view=None)
        except CommitOutcomeUnknownError:
            raise  # the snapshot may name the files
        except Exception:
            ctx.file_io.discard(path for m in messages for path in m.written(ctx))  # no one retries them
            raise
    finally:
        for write in writers:
            write.close()
    return landed[0] if landed else None

