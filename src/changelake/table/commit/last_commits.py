"""The last commit of each commit user whose snapshots expired: what keeps "a (commit user,
identifier) pair lands at most once" true after expiry.

Exactly-once is checked against the user's newest snapshot (``committer.already_committed``,
as Paimon's ``filterCommitted``): once expiry has deleted every snapshot of a user, a replay of
its last identifier would land again. So changelake's expiry first records, for each commit
user of the snapshots it expires, the newest of them (its identifier and snapshot id), and
only then deletes snapshot files; the check falls back to the record when the user has no
snapshot left. Batch commits (``BATCH_COMMIT_IDENTIFIER``) are not recorded: they always land.

Layout, changelake's own (Paimon's engines neither write nor read it, as ``rollback/``):
``commit-user/user-<quoted user>/snapshot-<id>``, one immutable file per record, created if
absent. Two expiry runs recording the same user at once create different files (or the same
one, with the same bytes), and readers take the newest, so a run that expired less never
lowers what another recorded; older records of a user are deleted once a newer one exists.
A rollback deletes the records of the snapshots it drops, so their identifiers land again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from changelake.errors import CorruptMetadataError
from changelake.table.context import TableContext
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot

_RECORD = re.compile(r"^snapshot-(\d+)$")


class LastCommit(BaseModel):
    """A commit user's newest commit in the snapshots expiry deleted."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    commit_user: str = Field(alias="commitUser")
    commit_identifier: int = Field(alias="commitIdentifier")
    snapshot_id: int = Field(alias="snapshotId")
    time_millis: int = Field(alias="timeMillis")  # when that snapshot was committed


def _ids(ctx: TableContext, directory: str) -> list[int]:
    return sorted(int(m.group(1)) for n in ctx.file_io.list_names(directory) if (m := _RECORD.match(n)))


def record(ctx: TableContext, expiring: Sequence[Snapshot]) -> None:
    """Record the newest commit of each commit user of ``expiring`` (ascending ids), before
    they are deleted."""
    newest = {s.commit_user: s for s in expiring if s.commit_identifier != BATCH_COMMIT_IDENTIFIER}
    for user, snap in newest.items():
        directory = ctx.paths.commit_user(user)
        last = LastCommit(commitUser=user, commitIdentifier=snap.commit_identifier, snapshotId=snap.id,
                          timeMillis=snap.time_millis)
        ctx.file_io.create_if_absent(f"{directory}/snapshot-{snap.id}", last.model_dump_json(by_alias=True).encode())
        for older in _ids(ctx, directory):
            if older < snap.id:
                ctx.file_io.delete(f"{directory}/snapshot-{older}")


def read(ctx: TableContext, commit_user: str) -> LastCommit | None:
    """The newest recorded commit of ``commit_user`` (None: none recorded)."""
    directory = ctx.paths.commit_user(commit_user)
    gone: set[int] = set()
    while ids := [i for i in _ids(ctx, directory) if i not in gone]:
        path = f"{directory}/snapshot-{ids[-1]}"
        try:
            data = ctx.file_io.read_bytes(path)
        except FileNotFoundError:  # replaced by a newer record, or dropped by a rollback, meanwhile
            gone.add(ids[-1])
            continue
        try:
            return LastCommit.model_validate_json(data)
        except ValidationError as exc:
            raise CorruptMetadataError(f"commit user record is corrupt: {exc.errors()[0]['msg']}", table=ctx.name,
                                       file=path) from None
    return None


def after(ctx: TableContext, snapshot_id: int) -> list[str]:
    """The records of commits in snapshots after ``snapshot_id`` (what a rollback to it drops)."""
    root = ctx.paths.commit_user_dir
    return [f"{root}/{user}/snapshot-{i}" for user in sorted(ctx.file_io.list_names(root)) if user.startswith("user-")
            for i in _ids(ctx, f"{root}/{user}") if i > snapshot_id]
