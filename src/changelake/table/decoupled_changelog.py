"""Changelog that outlives its snapshot (Paimon's decoupled changelog lifecycle).

When ``changelog.num-retained.min`` / ``.max`` or ``changelog.time-retained`` keep more than
the snapshot settings, a snapshot that expires leaves its JSON under ``changelog/changelog-N``
(Paimon's ``Changelog`` file has the snapshot's fields) and its changelog files and changelog
manifests stay, so change streams still read its changes. Changelog expiry (Paimon's
``ExpireChangelogImpl``) later removes those beyond the changelog retention.

With ``changelog-producer=none`` a stream reads the data files an APPEND snapshot added, so
(as Paimon's ``SnapshotDeletion`` does when ``produceChangelog`` is false) snapshot expiry then
keeps the expiring snapshots' data manifest lists and the appended (``fileSource`` APPEND)
files their successors removed; changelog expiry deletes them with the changelog.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from changelake.option_values import ChangelogProducer
from changelake.table.context import TableContext
from changelake.table.format import snapshot as snapshots
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint

_CHANGELOG_FILE = re.compile(r"^changelog-(\d+)$")


@dataclass(frozen=True)
class ChangelogRetention:
    """The changelog settings, each defaulting to its snapshot setting (as in Paimon)."""

    retain_min: int
    retain_max: int
    time_retained_ms: int
    max_deletes: int

    @staticmethod
    def of(ctx: TableContext) -> ChangelogRetention:
        o = ctx.options
        return ChangelogRetention(
            retain_min=max(1, o.snapshot_num_retained_min if o.changelog_num_retained_min is None
                           else o.changelog_num_retained_min),
            retain_max=o.snapshot_num_retained_max if o.changelog_num_retained_max is None
            else o.changelog_num_retained_max,
            time_retained_ms=o.snapshot_time_retained if o.changelog_time_retained is None
            else o.changelog_time_retained,
            max_deletes=o.snapshot_expire_limit,
        )


def decoupled(ctx: TableContext) -> bool:
    """Whether expiring snapshots keep their changelog: the table has a changelog producer and
    its changelog retention exceeds its snapshot retention (Paimon's
    ``changelogLifecycleDecoupled``)."""
    o = ctx.options
    kept = ChangelogRetention.of(ctx)
    return (kept.retain_min > o.snapshot_num_retained_min or kept.retain_max > o.snapshot_num_retained_max
            or kept.time_retained_ms > o.snapshot_time_retained)


def keeps_deltas(ctx: TableContext) -> bool:
    """Whether expiring snapshots keep their data manifests and appended files: the changelog
    is decoupled and, without a producer, consists of the appended data files."""
    return ctx.options.changelog_producer is ChangelogProducer.NONE and decoupled(ctx)


def ids(ctx: TableContext) -> list[int]:
    """Ids of the changelogs kept, ascending."""
    return sorted(int(m.group(1)) for n in ctx.file_io.list_names(ctx.paths.changelog_dir)
                  if (m := _CHANGELOG_FILE.match(n)))


def read(ctx: TableContext, snapshot_id: int) -> Snapshot | None:
    """The changelog kept of expired snapshot ``snapshot_id``, or None."""
    path = ctx.paths.changelog(snapshot_id)
    try:
        data = ctx.file_io.read_bytes(path)
    except FileNotFoundError:
        return None
    return snapshots.parse(data, path)


def earliest_id(ctx: TableContext) -> int | None:
    """The oldest changelog kept (None: none)."""
    found = ids(ctx)
    return found[0] if found else None


def keep(ctx: TableContext, expiring: Sequence[Snapshot]) -> None:
    """Write the changelog of every expiring snapshot (Paimon's ``commitChangelog``: one per
    snapshot, so the kept ids stay contiguous), before the snapshot file goes (so a crash in
    between leaves both, never neither)."""
    for s in expiring:
        ctx.file_io.create_if_absent(ctx.paths.changelog(s.id), s.to_json().encode("utf-8"))
    if expiring:
        ctx.file_io.overwrite_hint(f"{ctx.paths.changelog_dir}/LATEST", str(expiring[-1].id))


def expired(ctx: TableContext, min_next_snapshot: int | None, now_ms: int | None = None) -> list[Snapshot]:
    """The changelogs beyond the changelog retention (Paimon's ``ExpireChangelogImpl``):
    retention counts snapshots and changelogs together; only changelogs older than the
    earliest snapshot and not needed by a consumer go."""
    kept = ids(ctx)
    latest = snapshots.latest_id(ctx.file_io, ctx.paths)
    earliest_snapshot = snapshots.earliest_id(ctx.file_io, ctx.paths)
    if not kept or latest is None or earliest_snapshot is None:
        return []
    retention = ChangelogRetention.of(ctx)
    older_than = (int(time.time() * 1000) if now_ms is None else now_ms) - retention.time_retained_ms
    max_exclusive = min(latest - retention.retain_min + 1, earliest_snapshot, kept[0] + retention.max_deletes)
    if min_next_snapshot is not None:
        max_exclusive = min(max_exclusive, min_next_snapshot)
    first_in_time = max(latest - retention.retain_max + 1, kept[0])
    out: list[Snapshot] = []
    for changelog_id in kept:
        if changelog_id >= max_exclusive:
            break
        changelog = read(ctx, changelog_id)
        if changelog is None:
            continue
        if changelog_id >= first_in_time and changelog.time_millis >= older_than:
            break
        out.append(changelog)
    return out


def drop(ctx: TableContext, changelogs: Sequence[Snapshot]) -> None:
    """Delete the changelog files (the metadata; their data files are the caller's)."""
    for position, changelog in enumerate(changelogs):
        ctx.file_io.delete(ctx.paths.changelog(changelog.id))
        if position == 0:
            killpoints.reached(KillPoint.EXPIRE_SNAPSHOTS)
    left = ids(ctx)
    if left:
        ctx.file_io.overwrite_hint(f"{ctx.paths.changelog_dir}/EARLIEST", str(left[0]))
