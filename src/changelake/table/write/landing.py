"""Landing prepared commit messages exactly once, for any writer: a long-lived
:class:`~changelake.table.write.writer.TableWrite`, or a Spark driver whose tasks prepared the
messages elsewhere.

Beyond the committer's exactly-once check this covers what a commit owes a table whose every
commit moves level 0 up (first-row, and the ``lookup`` producer with ``lookup-wait``): when the
commit's own compaction was void in some or all of its buckets (another writer compacted the
bucket first, or landed rows there first, so that the commit renumbered its own) or lost (a crash
between the APPEND and the COMPACT snapshot of an identifier), level 0 of those buckets is moved
up from the table as it is now.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence

from changelake.errors import CommitConflictError
from changelake.option_values import LookupCompactMode
from changelake.table import snapshot_expiry
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.commit import committer as commit
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, CommitKind, Snapshot
from changelake.table.lsm import compactor as compaction
from changelake.table.read import live_files

Buckets = set[tuple[bytes, int]]

_log = logging.getLogger(__name__)


def waits_for_lookup(ctx: TableContext, changelog: ChangelogHook) -> bool:
    """Commits wait for the lookup compaction (``lookup-wait``): Paimon's readers skip level 0
    of first-row tables and of tables with deletion vectors, and a waiting lookup producer lands
    each commit's changelog with it (``write-only`` writers never compact: a later
    ``table.compact()`` does). Without waiting, it runs in the background and lands later."""
    if ctx.options.write_only:
        return False
    return compaction.forces_level0_up(ctx, changelog) and ctx.options.lookup_wait


def level0_goes_up(ctx: TableContext, changelog: ChangelogHook) -> bool:
    """Every commit moves level 0 up: commits wait for the lookup compaction, and it is
    ``radical`` (``gentle`` leaves level 0 where universal compaction does)."""
    return waits_for_lookup(ctx, changelog) and ctx.options.lookup_compact is LookupCompactMode.RADICAL


def replayed(ctx: TableContext, changelog: ChangelogHook, commit_user: str, identifier: int) -> bool:
    """Whether ``commit_user`` already committed ``identifier`` (then nothing may land again).
    A crash between that commit's APPEND and COMPACT snapshots may have left level 0 behind:
    the replay moves it up, as the lost commit would have."""
    if not commit.already_committed(ctx, commit_user, identifier, ctx.latest_snapshot()):
        return False
    if level0_goes_up(ctx, changelog):
        compact_level0_up(ctx, changelog, None)
    return True


def land(
    ctx: TableContext,
    changelog: ChangelogHook,
    messages: Sequence[CommitMessage],
    commit_user: str,
    identifier: int,
    *,
    view: int | None,
    on_renumber: Callable[[], None] | None = None,
) -> list[Snapshot]:
    """Commit prepared ``messages`` as (``commit_user``, ``identifier``): the snapshots that
    landed ([] when the identifier was committed already: the messages' files are deleted).
    ``view`` is the oldest snapshot the messages' compactions looked up. A compaction lost to
    another committer (in every bucket or some) is not fatal: the new files land, and level 0 of
    the buckets it left is moved up again when every commit must move it. Then snapshots expire
    as the table's retention options say. Once a snapshot landed, nothing here raises: a failure
    after it is logged."""
    landed = commit.commit(ctx, messages, commit_user, identifier, compact_conflicts_fatal=False,
                           on_renumber=on_renumber, view=view)
    left = _level0_left(ctx, messages, landed) if level0_goes_up(ctx, changelog) else set()
    if left:
        try:
            compact_level0_up(ctx, changelog, left)
        except Exception:
            # The commit landed and must not be reported as failed; its level 0 goes up with
            # the next commit or its replay, as after a crash here.
            _log.warning("table %s: snapshot %d landed; moving its level 0 up failed", ctx.name, landed[-1].id,
                         exc_info=True)
    if landed:
        snapshot_expiry.expire_after_commit(ctx)
    return landed


def _level0_left(ctx: TableContext, messages: Sequence[CommitMessage], landed: Sequence[Snapshot]) -> Buckets:
    """The buckets of ``messages`` whose level 0 the ``landed`` snapshots left: every bucket
    when the APPEND landed alone (the compaction was void), else those the COMPACT snapshot
    does not touch (renumbering a bucket's new rows, after another commit landed rows there,
    voids that bucket's compaction alone)."""
    if not landed or landed[0].commit_kind is not CommitKind.APPEND:
        return set()
    buckets = {(m.partition, m.bucket) for m in messages}
    if landed[-1].commit_kind is CommitKind.COMPACT:
        # the manifests this process just wrote: remembered, not read again
        buckets -= {(e.partition, e.bucket) for meta in live_files.manifest_list(ctx, landed[-1].delta_manifest_list)
                    for e in live_files.manifest_entries(ctx, meta.file_name)}
    return buckets


def compact_level0_up(ctx: TableContext, changelog: ChangelogHook, buckets: Buckets | None) -> None:
    """Move level-0 files of ``buckets`` (None: every bucket that has some) up, from the table
    as it is now. Committed as its own user, since the writer's identifier has landed."""
    if buckets is None:
        latest = ctx.latest_snapshot()
        entries = live_files.live_entries(ctx, latest) if latest is not None else []
        buckets = {(e.partition, e.bucket) for e in entries if e.file.level == 0}
        if not buckets:
            return
    for attempt_number in range(ctx.options.commit_max_retries + 1):
        if attempt_number:
            commit.back_off(ctx, attempt_number)
        latest = ctx.latest_snapshot()
        view = latest.id if latest is not None else 0
        messages = compaction.compact_table(ctx, full=False, partitions=None, changelog=changelog, buckets=buckets)
        if not messages:
            return
        with contextlib.suppress(CommitConflictError):  # compacted by someone else: look again
            commit.commit(ctx, messages, str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER, view=view)
            return
    # Readers that skip level 0 do not see these rows until a later compaction moves them up.
    _log.warning("table %s: moving level 0 up lost %d races to other compactions; it is left for a later "
                 "commit or table.compact()", ctx.name, ctx.options.commit_max_retries + 1)
