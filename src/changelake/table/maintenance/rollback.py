"""Rolling a table back to a snapshot or tag (Paimon's ``RollbackHelper``): the later
snapshots, tags and long-lived changelogs go, then the files only they named.

Order, so that a crash anywhere leaves a readable table: a rollback record first (streams use
it to refuse offsets from the abandoned history), then the consumers that read past the target
move back to the snapshot after it, then later tags and changelogs, then ``LATEST`` moves back
and the later snapshot files are deleted newest first (every state in between is a contiguous
history ending at some snapshot), then the commit user records of the dropped snapshots, and
only then the files nothing retained names any more (what a branch names is retained). A crash
before those files are gone leaves them as orphans for
:func:`~changelake.table.maintenance.orphans.remove_orphan_files`; running the same rollback
again completes it. Writers must be stopped while a table rolls back (as in Paimon).

Unlike Paimon, the record ``rollback/rollback-N`` (N counting from 0) lets a stream tell an
offset taken before a rollback from one taken after: snapshot ids past the target are reused
by the next commits, so such an offset would otherwise silently read different data. For the
same reason a consumer (``consumer/consumer-<id>``) past the target is moved back to the
snapshot after it: a stream resumed from it reads every commit made after the rollback
(Paimon leaves it where it was, and the stream skips the commits that reuse those ids). The
changes it had read from the abandoned snapshots are not undone for it. And a commit user's
last commit recorded by expiry in a dropped snapshot goes (``table.commit.last_commits``), so
a replay of a rolled-back commit lands again, as it does while the snapshot is retained.
"""

from __future__ import annotations

import re
import threading
import time

from pydantic import BaseModel, ConfigDict, Field

from changelake.table import metadata
from changelake.table.commit import last_commits
from changelake.table.context import TableContext
from changelake.table.format import consumer
from changelake.table.format import snapshot as snapshots
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.maintenance import references

_RECORD = re.compile(r"^rollback-(\d+)$")


class RollbackRecord(BaseModel):
    """One rollback: to snapshot ``snapshot_id`` from latest ``latest_before``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    snapshot_id: int = Field(alias="snapshotId")
    latest_before: int = Field(alias="latestBefore")
    time_millis: int = Field(alias="timeMillis")


def _record_dir(ctx: TableContext) -> str:
    return f"{ctx.paths.metadata_root}/rollback"


def _ids(ctx: TableContext) -> list[int]:
    """The numbers of the table's rollback records, in order (one listing)."""
    return sorted(int(m.group(1)) for n in ctx.file_io.list_names(_record_dir(ctx)) if (m := _RECORD.match(n)))


class RecordCache:
    """The rollback records read so far, by (filesystem, ``rollback/`` directory, table identity).

    A record never changes once written (created if absent; nothing rewrites or deletes it, as
    expiry and orphan cleanup leave ``rollback/`` alone), so each is read once; every call still
    lists the directory, to see the rollbacks made since. The table identity in the key keeps a
    table made anew at the same location (whose records restart at 0) from being served the
    old table's records. Safe to share between threads."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str, str], dict[int, RollbackRecord]] = {}
        self._lock = threading.Lock()

    def records(self, ctx: TableContext, identity: str) -> list[RollbackRecord]:
        """Every rollback of the table whose identity is ``identity``, oldest first: one
        listing, and one read per record not read before."""
        directory = _record_dir(ctx)
        key = (ctx.file_io.protocol, directory, identity)
        ids = _ids(ctx)
        with self._lock:
            known = dict(self._records.get(key, {}))
        current = {i: known[i] if i in known else _read(ctx, i) for i in ids}
        with self._lock:
            self._records[key] = current  # a record no longer listed (deleted by hand) is forgotten
        return list(current.values())

    def clear(self) -> None:
        """Forget every record read."""
        with self._lock:
            self._records.clear()


RECORDS = RecordCache()


def _read(ctx: TableContext, number: int) -> RollbackRecord:
    return RollbackRecord.model_validate_json(ctx.file_io.read_bytes(f"{_record_dir(ctx)}/rollback-{number}"))


def _write_record(ctx: TableContext, record: RollbackRecord) -> None:
    data = record.model_dump_json(by_alias=True).encode("utf-8")
    # Records are numbered 0, 1, ... without gaps (each created only once its number is free).
    while not ctx.file_io.create_if_absent(f"{_record_dir(ctx)}/rollback-{len(_ids(ctx))}", data):
        pass  # another rollback took that number: take the next


def _delete(ctx: TableContext, path: str) -> None:
    killpoints.reached(KillPoint.ROLLBACK)
    ctx.file_io.delete(path)


def _consumers_past(ctx: TableContext, next_snapshot: int) -> list[str]:
    """The consumers whose next snapshot lies past ``next_snapshot`` (CorruptMetadataError,
    before anything changed, when a consumer file is unreadable)."""
    return [i for i in consumer.ids(ctx.file_io, ctx.paths)
            if (consumer.read(ctx.file_io, ctx.paths, i, ctx.name) or 0) > next_snapshot]


def rollback_to(ctx: TableContext, target: Snapshot) -> Snapshot:
    """Make ``target`` (a snapshot, or a tag's snapshot) the latest snapshot again."""
    # None: a rollback to a tag of an expired snapshot crashed before restoring the snapshot.
    latest = snapshots.latest_id(ctx.file_io, ctx.paths) or target.id
    later = [ctx.snapshot(i) for i in snapshots.list_ids(ctx.file_io, ctx.paths) if i > target.id]
    later_tags = {name: snap for name, snap in metadata.tags(ctx).items() if snap.id > target.id}
    later_changelogs = [c for c in references.long_lived_changelogs(ctx) if c.id > target.id]
    ahead = _consumers_past(ctx, target.id + 1)
    if later or later_tags or later_changelogs:
        _write_record(ctx, RollbackRecord(snapshotId=target.id, latestBefore=latest,
                                          timeMillis=int(time.time() * 1000)))
    for consumer_id in ahead:
        killpoints.reached(KillPoint.ROLLBACK_CONSUMER)
        consumer.write(ctx.file_io, ctx.paths, consumer_id, target.id + 1)
    removed = references.files_of_all(ctx, [*later, *later_tags.values()])
    for changelog in later_changelogs:
        removed |= references.files_of_changelog(ctx, changelog)
    for name in sorted(later_tags, key=lambda n: later_tags[n].id, reverse=True):
        _delete(ctx, ctx.paths.tag(name))
    for changelog in reversed(later_changelogs):
        _delete(ctx, ctx.paths.changelog(changelog.id))
    if later_changelogs:
        remaining = references.long_lived_changelogs(ctx)
        hint = f"{ctx.paths.changelog_dir}/LATEST"
        if remaining:
            ctx.file_io.overwrite_hint(hint, str(remaining[-1].id))
        else:
            ctx.file_io.delete(hint)
    ctx.file_io.overwrite_hint(f"{ctx.paths.snapshot_dir}/LATEST", str(target.id))
    for snap in reversed(later):
        _delete(ctx, ctx.paths.snapshot(snap.id))
    if not ctx.file_io.exists(ctx.paths.snapshot(target.id)):
        # A tag of an expired snapshot: the snapshot comes back from the tag, as in Paimon.
        ctx.file_io.create_if_absent(ctx.paths.snapshot(target.id), target.to_json().encode("utf-8"))
        ctx.file_io.overwrite_hint(f"{ctx.paths.snapshot_dir}/EARLIEST", str(target.id))
        ctx.file_io.overwrite_hint(f"{ctx.paths.snapshot_dir}/LATEST", str(target.id))
    for path in last_commits.after(ctx, target.id):
        _delete(ctx, path)
    if removed:
        for path in sorted(removed - references.files_in_use(ctx)):
            _delete(ctx, path)
    return ctx.snapshot(target.id)
