"""Follow-up scanners: which snapshots a change stream reads after its start, and which files.

As in Paimon: with producer ``none`` a stream reads the data files each APPEND snapshot adds
(its delta), as stored, and skips COMPACT snapshots (they rewrite rows, they change none);
with any other producer it reads the changelog files of every snapshot that lists a changelog
manifest list (``input``: the APPEND snapshot; ``lookup`` and ``full-compaction``: the COMPACT
snapshot of the same commit). OVERWRITE snapshots are skipped either way.
"""

from __future__ import annotations

import pyarrow.compute as pc

from changelake.changelog.offsets import ChangeKind
from changelake.option_values import ChangelogProducer
from changelake.table.context import TableContext
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.read import live_files, planner
from changelake.table.read.planner import Split


def change_kind(producer: ChangelogProducer, snapshot: Snapshot) -> ChangeKind | None:
    """What a stream reads of ``snapshot`` (None: nothing, the snapshot is skipped)."""
    if snapshot.commit_kind is CommitKind.OVERWRITE:
        return None
    if producer is ChangelogProducer.NONE:
        return ChangeKind.DELTA if snapshot.commit_kind is CommitKind.APPEND else None
    return ChangeKind.CHANGELOG if snapshot.changelog_manifest_list is not None else None


def change_splits(ctx: TableContext, snapshot: Snapshot, kind: ChangeKind,
                  expression: pc.Expression | None) -> list[Split]:
    """One split per delta or changelog file of ``snapshot`` the filter may need, in a fixed
    order (stream positions count rows along it)."""
    if kind is ChangeKind.DELTA:
        manifests = live_files.manifest_list(ctx, snapshot.delta_manifest_list)
    elif kind is ChangeKind.CHANGELOG and snapshot.changelog_manifest_list is not None:
        manifests = live_files.manifest_list(ctx, snapshot.changelog_manifest_list)
    else:
        return []
    return planner.plan_added_files(ctx, manifests, expression)
