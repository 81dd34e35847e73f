"""Compacting a postpone-bucket table: the rows waiting in each partition's ``bucket-postpone/``
move into real buckets, as Paimon 2.x's postpone compaction does (Flink's ``CompactAction``
with ``PostponeBucketCompactSplitSource``, Spark's ``CompactProcedure``).

Each partition keeps the number of real buckets it has; a partition without any gets
``postpone.default-bucket-num``, else one bucket per ``postpone.target-row-num-per-bucket`` rows
or ``postpone.target-size-per-bucket`` bytes of its postpone files (``PostponeUtils``). The
postpone files are read writer by writer (their names carry the writer), each writer's files by
creation time, and their rows, with their row kinds, are written through the ordinary writer of
those buckets, which numbers them above what the buckets hold, merges them, writes the table's
changelog (``input``: the rows; ``lookup``: the compaction's) and compacts the buckets it
wrote. Everything lands as one COMPACT snapshot: the postpone files removed, the real buckets'
new files added (Paimon's ``RewritePostponeBucketCommittableOperator`` turns the writer's new
files into compaction output), and the other real buckets compacted as usual.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from changelake.errors import CommitConflictError, SnapshotNotFoundError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.commit import committer
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import kv
from changelake.table.format.manifest import DataFileMeta, ManifestEntry
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, CommitKind, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.lsm import compactor
from changelake.table.read import live_files
from changelake.table.write.conform import ROWKIND_COLUMN
from changelake.table.write.postpone import ChangelogFor, estimated_buckets, known_bucket_counts, with_buckets
from changelake.table.write.writer import TableWrite

_POSTPONE_MARK = "-w-"  # a postpone file's name up to and including it names its writer


def compact(ctx: TableContext, commit_user: str, *, full: bool, partitions: Sequence[Mapping[str, Any]] | None,
            changelog_for: ChangelogFor, progress: Callable[[int, int], None] | None = None) -> list[Snapshot]:
    """Compact the table (``partitions`` only, when given) as one COMPACT snapshot: the postpone
    rows moved into real buckets, the other real buckets compacted (``full``: into their top
    level). Returns the snapshot that landed ([] when there was nothing to compact). As Paimon's
    (``commit.strict-mode.last-safe-snapshot``), the commit is a conflict when another user's
    compaction or overwrite, or an append into real buckets, landed after the snapshot it read:
    their rows may be numbered as the moved ones are."""
    latest = ctx.latest_snapshot()
    if latest is None:
        return []
    messages = _messages(ctx, latest, commit_user, full=full, partitions=partitions, changelog_for=changelog_for,
                         progress=progress)
    if not messages:
        return []
    return committer.commit(ctx, messages, commit_user, BATCH_COMMIT_IDENTIFIER, view=latest.id,
                            conflicts=functools.partial(_strict, ctx, latest.id, commit_user))


def _strict(ctx: TableContext, base: int, commit_user: str, latest: Snapshot | None) -> None:
    """CommitConflictError when a snapshot after ``base`` up to ``latest`` is another user's
    COMPACT or OVERWRITE, or APPEND with files in real buckets (Paimon's ``StrictModeChecker``)."""
    for snapshot_id in range(base + 1, (latest.id if latest is not None else base) + 1):
        try:
            landed = ctx.snapshot(snapshot_id)
        except SnapshotNotFoundError:
            raise CommitConflictError(f"snapshot {snapshot_id} landed and expired while this postpone compaction "
                                      "ran; compact again", table=ctx.name) from None
        if landed.commit_user == commit_user:
            continue
        real = landed.commit_kind is not CommitKind.APPEND or any(
            e.bucket != POSTPONE_BUCKET for meta in live_files.manifest_list(ctx, landed.delta_manifest_list)
            for e in live_files.manifest_entries(ctx, meta.file_name))
        if real:
            raise CommitConflictError(f"snapshot {snapshot_id} ({landed.commit_kind.value}) wrote real buckets while "
                                      "this postpone compaction ran; the compaction is void (compact again)",
                                      table=ctx.name)


def _messages(ctx: TableContext, latest: Snapshot, commit_user: str, *, full: bool,
              partitions: Sequence[Mapping[str, Any]] | None, changelog_for: ChangelogFor,
              progress: Callable[[int, int], None] | None) -> list[CommitMessage]:
    """The compaction's messages, its files written."""
    entries = live_files.live_entries(ctx, latest)
    wanted = None if partitions is None else [ctx.partition_of(p) for p in partitions]
    waiting: dict[bytes, list[ManifestEntry]] = defaultdict(list)
    for entry in entries:
        if entry.bucket == POSTPONE_BUCKET and (wanted is None or ctx.partition_values(entry.partition) in wanted):
            waiting[entry.partition].append(entry)
    known = known_bucket_counts(entries)
    by_count: dict[int, list[bytes]] = defaultdict(list)
    for partition, files in waiting.items():
        by_count[known.get(partition) or bucket_count(ctx, files)].append(partition)
    messages = []
    for num_buckets, group in sorted(by_count.items()):
        messages += _move(ctx, commit_user, num_buckets, {p: waiting[p] for p in group}, changelog_for, full=full)
    if messages:
        # The crash test's point: the real buckets' files are written, nothing is committed.
        killpoints.reached(KillPoint.COMPACTION)
    messages += [CommitMessage(p, POSTPONE_BUCKET, POSTPONE_BUCKET, compact_before=tuple(e.file for e in files))
                 for p, files in waiting.items()]
    moved_into = {(m.partition, m.bucket) for m in messages}
    others = {(e.partition, e.bucket) for e in entries if e.bucket != POSTPONE_BUCKET} - moved_into
    messages += compactor.compact_table(ctx, full=full, partitions=partitions, changelog=changelog_for(ctx),
                                        buckets=others, progress=progress)
    return messages


def bucket_count(ctx: TableContext, files: Sequence[ManifestEntry]) -> int:
    """The buckets of a partition that gets real buckets for the first time."""
    default = ctx.options.postpone_default_bucket_num
    if default is not None:
        return default
    return estimated_buckets(ctx, sum(e.file.row_count for e in files), sum(e.file.file_size for e in files))


def writer_order(files: Sequence[DataFileMeta]) -> list[DataFileMeta]:
    """The files in the order their rows were written: writer by writer (the earliest first),
    each writer's files by creation time (Paimon's ``PostponeUtils.groupPostponeFiles``; the
    order between writers is Paimon's scan order, here their first files' creation times)."""
    by_writer: dict[str, list[DataFileMeta]] = defaultdict(list)
    for f in files:
        mark = f.file_name.rfind(_POSTPONE_MARK)
        by_writer[f.file_name[:mark + len(_POSTPONE_MARK)] if mark >= 0 else f.file_name].append(f)
    groups = [sorted(group, key=lambda f: f.creation_time_ms or 0) for group in by_writer.values()]
    groups.sort(key=lambda group: group[0].creation_time_ms or 0)
    return [f for group in groups for f in group]


def _move(ctx: TableContext, commit_user: str, num_buckets: int, waiting: Mapping[bytes, list[ManifestEntry]],
          changelog_for: ChangelogFor, *, full: bool) -> list[CommitMessage]:
    """The postpone rows of partitions of ``num_buckets`` buckets written into those buckets, as
    compaction messages."""
    bucketed = with_buckets(ctx, num_buckets, **{"write-only": "false"})
    names = ctx.arrow_schema.names
    symbols = pa.array(kv.ROW_KIND_SYMBOLS)
    with TableWrite(bucketed, commit_user, changelog=changelog_for(bucketed), wait_compaction=True) as write:
        for partition, entries in waiting.items():
            bucket_dir = ctx.bucket_dir(partition, POSTPONE_BUCKET)
            for f in writer_order([e.file for e in entries]):
                rows = ctx.read_file(bucket_dir, f, [*names, kv.VALUE_KIND])
                kinds = symbols.take(rows.column(kv.VALUE_KIND))
                write.write(rows.select(names).append_column(ROWKIND_COLUMN, kinds))
        return [_as_compaction(ctx, m) for m in write.prepare(full_compaction=full)]


def _as_compaction(ctx: TableContext, message: CommitMessage) -> CommitMessage:
    """A writer's message as compaction output: its new files (those its own compaction did not
    replace, which are deleted) and its changelog land with the COMPACT snapshot."""
    before = {f.file_name for f in message.compact_before}
    after = {f.file_name for f in message.compact_after}  # a new file moved up a level keeps its name
    new = {f.file_name for f in message.new_files}
    dropped = [f for f in message.new_files if f.file_name in before and f.file_name not in after]
    ctx.file_io.discard(ctx.file_paths(message.bucket_dir(ctx), dropped))
    return dataclasses.replace(
        message, new_files=(), changelog_files=(),
        compact_before=tuple(f for f in message.compact_before if f.file_name not in new),
        compact_after=(*(f for f in message.new_files if f.file_name not in before), *message.compact_after),
        compact_changelog_files=(*message.changelog_files, *message.compact_changelog_files),
    )
