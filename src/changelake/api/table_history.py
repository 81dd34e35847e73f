"""What a table keeps of its past and its lines: snapshots, tags, branches, and the maintenance
that removes or rolls back history (the part of :class:`~changelake.Table` about them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Self, TypeAlias

from changelake.table import branches, metadata, snapshot_expiry
from changelake.table.context import TableContext
from changelake.table.format.snapshot import Snapshot
from changelake.table.maintenance import rollback
from changelake.table.snapshot_expiry import ExpireResult, Retention

# A callback of long maintenance work, called with (done, total) as the work advances.
Progress: TypeAlias = Callable[[int, int], None]


class TableHistory:
    """Snapshots, tags and branches of a table, and their expiry and rollback."""

    def __init__(self, context: TableContext) -> None:
        self._context = context

    def _use(self, context: TableContext) -> None:
        self._context = context

    # -- snapshots --------------------------------------------------------------------------

    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot, or None for a table never written."""
        return self._context.latest_snapshot()

    def snapshot(self, snapshot_id: int) -> Snapshot:
        """Snapshot ``snapshot_id`` (SnapshotNotFoundError if absent)."""
        return self._context.snapshot(snapshot_id)

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot still present, oldest first."""
        return metadata.snapshots(self._context)

    def snapshot_at(self, timestamp_ms: int) -> Snapshot:
        """The newest snapshot committed at or before ``timestamp_ms``."""
        return metadata.snapshot_at(self._context, timestamp_ms)

    # -- tags -------------------------------------------------------------------------------

    def create_tag(self, name: str, snapshot_id: int | None = None, *,
                   time_retained: dt.timedelta | None = None) -> Snapshot:
        """Tag a snapshot (default: the latest) so it can be read by name; ``time_retained``
        records the tag's creation time and retention in the tag file (Paimon's tag TTL)."""
        return metadata.create_tag(self._context, name, snapshot_id, time_retained=time_retained)

    def tag(self, name: str) -> Snapshot:
        """The snapshot a tag points to."""
        return metadata.tag(self._context, name)

    def tags(self) -> dict[str, Snapshot]:
        """Every tag and its snapshot."""
        return dict(metadata.tags(self._context))

    def delete_tag(self, name: str) -> None:
        """Remove a tag (the snapshot it named is unaffected). When that snapshot has expired,
        the files only the tag kept are deleted too."""
        tagged = metadata.tag(self._context, name)
        metadata.delete_tag(self._context, name)
        snapshot_expiry.release_tag(self._context, tagged)

    # -- branches (docs/branches.md) --------------------------------------------------------

    @property
    def branch_name(self) -> str:
        """The branch this Table reads and writes: ``main`` for the table itself."""
        return self._context.paths.branch or branches.MAIN

    def branch(self, name: str) -> Self:
        """Branch ``name`` as a Table (``database.table$branch_<name>``) whose every operation
        stays within the branch; ``main`` is the table. BranchNotFoundError if absent."""
        return type(self)(branches.checked(self._context, name))

    def list_branches(self) -> list[str]:
        """The names of the table's branches, sorted (``main`` not among them)."""
        return metadata.branch_names(self._context)

    def create_branch(self, name: str, *, from_tag: str | None = None, from_snapshot: int | None = None) -> Self:
        """Create branch ``name`` (Paimon's ``createBranch``) and return it: empty (the latest
        schema only), or from a tag or snapshot (copied with its schemas into the branch).
        InvalidBranchNameError (``main``, blank, all digits), BranchAlreadyExistsError,
        TagNotFoundError or SnapshotNotFoundError change nothing."""
        branches.create(self._context, name, from_tag=from_tag, from_snapshot=from_snapshot)
        return self.branch(name)

    def delete_branch(self, name: str) -> None:
        """Delete branch ``name``; files only it named go with the next orphan cleanup."""
        branches.delete(self._context, name)

    def fast_forward(self, name: str) -> None:
        """Replace this table's (or branch's) snapshots, schemas and tags from branch ``name``'s
        earliest snapshot on with the branch's (Paimon's ``fast_forward``). Stop writers first;
        after a crash, run it again."""
        branches.fast_forward(self._context, name)
        self._use(metadata.reopened(self._context))

    # -- maintenance ------------------------------------------------------------------------

    def expire_snapshots(
        self,
        *,
        older_than_ms: int | None = None,
        retain_min: int | None = None,
        retain_max: int | None = None,
        max_deletes: int | None = None,
        progress: Progress | None = None,
    ) -> ExpireResult:
        """Expire snapshots now, as writers do after each commit: keep at least ``retain_min``
        (``snapshot.num-retained.min``) and at most ``retain_max``
        (``snapshot.num-retained.max``) snapshots, and between the two those committed at or
        after ``older_than_ms`` (default: now minus ``snapshot.time-retained``); expire at most
        ``max_deletes`` (``snapshot.expire.limit``). Consumers hold back the snapshots they
        have yet to read; tags and branches keep their snapshots' files; the last commit of
        each commit user of the expired snapshots is recorded first, so replays of it stay
        skipped (docs/maintenance.md). Returns what was removed. ``progress`` gets (files
        deleted, files to delete)."""
        retention = Retention.of(self._context, older_than_ms=older_than_ms, retain_min=retain_min,
                                 retain_max=retain_max, max_deletes=max_deletes)
        return snapshot_expiry.expire_alongside_others(self._context, retention, progress=progress)

    def rollback_to(self, *, snapshot_id: int | None = None, tag: str | None = None) -> Snapshot:
        """Make a snapshot (by id, or a tag's) the latest again: later snapshots and tags go,
        then the files only they named (not those a branch names). Stop writers first. Stream
        offsets past the target then raise RolledBackOffsetError; consumers past it read the
        snapshot after it next; commits after it may land again. After a crash, run it again
        to complete it (docs/maintenance.md)."""
        if (snapshot_id is None) == (tag is None):
            raise ValueError("rollback_to takes exactly one of snapshot_id and tag")
        target = self._context.snapshot(snapshot_id) if snapshot_id is not None else self.tag(str(tag))
        return rollback.rollback_to(self._context, target)
