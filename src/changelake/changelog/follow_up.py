"""Follow-up scanners: which snapshots a change stream reads after its start, and which files.

As in Paimon: with producer ``none`` a stream reads the data files each APPEND snapshot adds
(its delta), as stored, and skips COMPACT snapshots (they rewrite rows, they change none);
with any other producer it reads the changelog files of every snapshot that lists a changelog
manifest list (``input``: the APPEND snapshot; ``lookup`` and ``full-compaction``: the COMPACT
snapshot of the same commit). OVERWRITE snapshots are skipped, as Paimon's streams skip them,
unless ``streaming-read-overwrite`` (primary-key tables: per bucket, the merged rows of the files
it removed as -D, then the merged rows of the files it added) or ``streaming-read-append-overwrite`` (append tables: the
rows of the files it added, as +I).
"""

from __future__ import annotations

import pyarrow.compute as pc

from changelake.changelog.offsets import ChangeKind
from changelake.errors import SnapshotExpiredError, SnapshotNotFoundError
from changelake.option_values import ChangelogProducer
from changelake.options import TableOptions
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.read import live_files, planner
from changelake.table.read.planner import Split


def change_kind(ctx: TableContext, options: TableOptions, snapshot: Snapshot) -> ChangeKind | None:
    """What a stream reads of ``snapshot`` (None: nothing, the snapshot is skipped)."""
    producer = options.changelog_producer
    if snapshot.commit_kind is CommitKind.OVERWRITE:
        if ctx.kind is TableKind.APPEND:
            return ChangeKind.DELTA if options.streaming_read_append_overwrite else None
        return ChangeKind.OVERWRITE if options.streaming_read_overwrite else None
    if producer is ChangelogProducer.NONE:
        return ChangeKind.DELTA if snapshot.commit_kind is CommitKind.APPEND else None
    return ChangeKind.CHANGELOG if snapshot.changelog_manifest_list is not None else None


def change_splits(ctx: TableContext, snapshot: Snapshot, kind: ChangeKind,
                  expression: pc.Expression | None) -> list[Split]:
    """One split per delta or changelog file of ``snapshot`` the filter may need, in a fixed
    order (stream positions count rows along it)."""
    if kind is ChangeKind.OVERWRITE:
        try:
            before = ctx.snapshot(snapshot.id - 1) if snapshot.id > 1 else None
        except SnapshotNotFoundError:
            # Expiring it deleted the files the overwrite removed (unless a tag keeps them), and
            # with them the rows to retract: an error, not a stream that silently lacks them.
            raise SnapshotExpiredError(
                f"the changes of OVERWRITE snapshot {snapshot.id} (streaming-read-overwrite) are the rows it "
                f"replaced, of snapshot {snapshot.id - 1}, which has expired", table=ctx.name) from None
        return planner.plan_overwritten_files(ctx, snapshot, before, expression)
    if kind is ChangeKind.DELTA:
        manifests = live_files.manifest_list(ctx, snapshot.delta_manifest_list)
    elif kind is ChangeKind.CHANGELOG and snapshot.changelog_manifest_list is not None:
        manifests = live_files.manifest_list(ctx, snapshot.changelog_manifest_list)
    else:
        return []
    return planner.plan_added_files(ctx, manifests, expression)
