"""Starting scanners: where a change stream starts, by Paimon's ``scan.mode`` and the options
each mode reads (``scan.snapshot-id``, ``scan.tag-name``, ``scan.timestamp-millis``,
``scan.timestamp``)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

from changelake.errors import OptionError, SnapshotExpiredError, SnapshotNotFoundError
from changelake.option_values import ChangelogProducer, ScanMode
from changelake.options import TableOptions
from changelake.table import decoupled_changelog, metadata, time_travel
from changelake.table.context import TableContext
from changelake.table.format import snapshot as snapshots
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, CommitKind, Snapshot

_TIME_OPTIONS = ("scan.timestamp-millis", "scan.timestamp")
_SNAPSHOT_OPTIONS = ("scan.snapshot-id", "scan.tag-name")
_SNAPSHOT_MODES = (ScanMode.FROM_SNAPSHOT, ScanMode.FROM_SNAPSHOT_FULL)


def start_mode(options: TableOptions) -> ScanMode:
    """The scan mode a stream runs in, defaulted and checked as Paimon does: ``default`` is
    ``from-timestamp`` with a time, ``from-snapshot`` with a snapshot id or tag, else
    ``latest-full``; ``full`` is ``latest-full``. A mode must get the options it needs and no
    options of another mode."""
    given = {key for key in (*_TIME_OPTIONS, *_SNAPSHOT_OPTIONS) if options.raw.get(key) is not None}
    mode = options.scan_mode
    if mode is ScanMode.DEFAULT:
        if given & set(_TIME_OPTIONS):
            mode = ScanMode.FROM_TIMESTAMP
        elif given & set(_SNAPSHOT_OPTIONS):
            mode = ScanMode.FROM_SNAPSHOT
        else:
            mode = ScanMode.LATEST_FULL
    elif mode is ScanMode.FULL:
        mode = ScanMode.LATEST_FULL
    elif mode is ScanMode.INCREMENTAL:
        raise OptionError("'incremental' reads a range of snapshots once, it does not stream; use "
                          "table.changes(start, end)", table=options.table, option="scan.mode")
    needed: tuple[str, ...] = (
        _TIME_OPTIONS if mode is ScanMode.FROM_TIMESTAMP else _SNAPSHOT_OPTIONS if mode in _SNAPSHOT_MODES else ()
    )
    if needed and not given & set(needed):
        raise OptionError(f"scan.mode {mode.value} needs {' or '.join(needed)}", table=options.table,
                          option=needed[0])
    unused = sorted(given - set(needed))
    if unused:
        raise OptionError(f"is not used by scan.mode {mode.value}", table=options.table, option=unused[0])
    if len(given) > 1:
        raise OptionError(f"give one of {', '.join(needed)}, not both", table=options.table, option=sorted(given)[0])
    return mode


def start_timestamp(options: TableOptions) -> int:
    """``scan.timestamp-millis``, or ``scan.timestamp`` (``yyyy-MM-dd HH:mm:ss``, local time as
    in Paimon) in milliseconds."""
    return time_travel.timestamp_ms(options)


def full_read_levels(options: TableOptions) -> Callable[[int], bool] | None:
    """The levels a stream's first full read takes, so that nothing the changelog carries is
    read twice: ``lookup`` changelog covers level 0 (its compaction moves level 0 up), and
    ``full-compaction`` changelog covers everything below the top level."""
    if options.changelog_producer is ChangelogProducer.LOOKUP:
        return functools.partial(operator.lt, 0)
    if options.changelog_producer is ChangelogProducer.FULL_COMPACTION:
        return functools.partial(operator.eq, options.num_levels - 1)
    return None


def changes_follow_full_read(options: TableOptions) -> bool:
    """Whether a stream reads the changes of the snapshot it read in full next, rather than
    those of the snapshot after it: with deletion vectors and no ``lookup`` changelog, the full
    read leaves out level 0 (as every read of such a table does), so the rows the snapshot
    itself wrote there come from its changes (Paimon's ``DELETION_VECTOR_ONLY`` lookup
    strategy: ``nextSnapshotId = currentSnapshotId``). Not after an OVERWRITE snapshot: its
    changes are the rows of the snapshot it replaced, which the full read already left out."""
    return options.deletion_vectors_enabled and options.changelog_producer is not ChangelogProducer.LOOKUP


def check_follow_up_start(ctx: TableContext, snapshot_id: int, option: str | None) -> None:
    """Raise unless the changes of ``snapshot_id`` can be read: it is not expired (or its
    changelog is kept under ``changelog/``), and it exists or is the next snapshot to come."""
    latest = snapshots.latest_id(ctx.file_io, ctx.paths) or 0
    if snapshot_id > latest + 1:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} does not exist (the latest is {latest})",
                                    table=ctx.name, option=option)
    earliest = snapshots.earliest_id(ctx.file_io, ctx.paths)
    kept = decoupled_changelog.earliest_id(ctx)  # changelog of expired snapshots, still readable
    if kept is not None and earliest is not None:
        earliest = min(earliest, kept)
    if earliest is not None and snapshot_id < earliest:
        raise SnapshotExpiredError(f"snapshot {snapshot_id} has expired (the earliest is {earliest})",
                                   table=ctx.name, option=option)


def starting_position(ctx: TableContext, options: TableOptions) -> tuple[int, bool]:
    """Where a new stream starts: (snapshot id, whether that snapshot is read in full first).
    Without a snapshot yet, a stream starts at snapshot 1, in full for the ``*-full`` modes."""
    mode = start_mode(options)
    latest = ctx.latest_snapshot()
    if mode is ScanMode.LATEST_FULL:
        return (latest.id if latest else 1), True
    if mode is ScanMode.LATEST:
        return (latest.id + 1 if latest else 1), False
    if mode is ScanMode.COMPACTED_FULL:
        return (_latest_compacted(ctx, options, latest).id if latest else 1), True
    if mode is ScanMode.FROM_TIMESTAMP:
        return _first_at_or_after(ctx, start_timestamp(options), latest), False
    if options.scan_tag_name is not None:
        snapshot_id, option = metadata.tag(ctx, options.scan_tag_name).id, "scan.tag-name"
    else:
        snapshot_id, option = options.scan_snapshot_id or 0, "scan.snapshot-id"
    if mode is ScanMode.FROM_SNAPSHOT_FULL:
        try:
            ctx.snapshot(snapshot_id)
        except SnapshotNotFoundError:
            check_follow_up_start(ctx, snapshot_id, option)
            if snapshot_id <= (latest.id if latest else 0):
                # only its changelog is kept (changelog.num-retained.*): a full read needs its files
                raise SnapshotExpiredError(f"snapshot {snapshot_id} has expired (its changelog alone is kept)",
                                           table=ctx.name, option=option) from None
            raise SnapshotNotFoundError(f"snapshot {snapshot_id} does not exist yet", table=ctx.name,
                                        option=option) from None
        return snapshot_id, True
    check_follow_up_start(ctx, snapshot_id, option)
    return snapshot_id, False


def _latest_compacted(ctx: TableContext, options: TableOptions, latest: Snapshot) -> Snapshot:
    """Paimon's compacted-full start: the newest COMPACT snapshot (for ``full-compaction``, the
    newest full compaction: a batch commit or an identifier that is a multiple of
    ``full-compaction.delta-commits``), else the latest snapshot."""
    delta_commits = options.full_compaction_delta_commits or 1
    full_only = options.changelog_producer is ChangelogProducer.FULL_COMPACTION
    earliest = snapshots.earliest_id(ctx.file_io, ctx.paths) or latest.id
    for snapshot_id in range(latest.id, earliest - 1, -1):
        candidate = ctx.snapshot(snapshot_id)
        if candidate.commit_kind is not CommitKind.COMPACT:
            continue
        identifier = candidate.commit_identifier
        if not full_only or identifier == BATCH_COMMIT_IDENTIFIER or identifier % delta_commits == 0:
            return candidate
    return latest


def _first_at_or_after(ctx: TableContext, timestamp_ms: int, latest: Snapshot | None) -> int:
    """The first snapshot committed at or after ``timestamp_ms`` (binary search: commit times
    grow with snapshot ids)."""
    if latest is None:
        return 1
    if timestamp_ms > latest.time_millis:
        raise SnapshotNotFoundError(f"no snapshot at or after {timestamp_ms}: the latest, {latest.id}, was "
                                    f"committed at {latest.time_millis}", table=ctx.name,
                                    option="scan.timestamp-millis")
    low = snapshots.earliest_id(ctx.file_io, ctx.paths) or latest.id
    high = latest.id
    while low < high:
        middle = (low + high) // 2
        if ctx.snapshot(middle).time_millis >= timestamp_ms:
            high = middle
        else:
            low = middle + 1
    return low
