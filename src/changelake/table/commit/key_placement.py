"""Cross-partition upsert's commit check: a writer places each key by its key index, which knows
the table's keys as of a snapshot plus the writer's own commits; when another writer's rows
landed since, a key of theirs may be in another partition than the index says, and landing
this commit could leave the key in two partitions. Paimon leaves this to the user (one writer
job per table); changelake voids the later commit instead."""

from __future__ import annotations

from collections.abc import Sequence

from changelake.errors import CommitConflictError, SnapshotNotFoundError
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format.snapshot import CommitKind, Snapshot


def rows_landed(ctx: TableContext, base: int, latest: Snapshot | None, *,
                but_of: str | None = None) -> tuple[int, Snapshot | None] | None:
    """The first snapshot after ``base`` up to ``latest`` that may have moved keys (an APPEND or
    OVERWRITE, not one of ``but_of``'s), with the snapshot (None: it expired); None when none."""
    for snapshot_id in range(base + 1, (latest.id if latest is not None else base) + 1):
        try:
            landed = ctx.snapshot(snapshot_id)
        except SnapshotNotFoundError:
            return snapshot_id, None
        if landed.commit_user != but_of and landed.commit_kind is not CommitKind.COMPACT:
            return snapshot_id, landed
    return None


def check(ctx: TableContext, messages: Sequence[CommitMessage], commit_user: str, latest: Snapshot | None) -> None:
    """CommitConflictError when a snapshot after the messages' key base up to ``latest`` is
    another user's APPEND or OVERWRITE (a compaction moves no key)."""
    bases = [m.key_base for m in messages if m.key_base is not None]
    if not bases or latest is None:
        return
    found = rows_landed(ctx, min(bases), latest, but_of=commit_user)
    if found is None:
        return
    snapshot_id, landed = found
    if landed is None:
        raise CommitConflictError(f"snapshot {snapshot_id} landed and expired after this writer placed its "
                                  "keys across partitions; this commit is void (write its rows again)",
                                  table=ctx.name)
    raise CommitConflictError(
        f"snapshot {snapshot_id} ({landed.commit_kind.value}) of another writer landed after this writer "
        "placed its keys across partitions (cross-partition upsert's key index did not know its keys); "
        "this commit is void (write its rows again)", table=ctx.name)
