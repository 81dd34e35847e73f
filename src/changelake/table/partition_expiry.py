"""Partition expiration (Paimon's ``PartitionExpire``): partitions older than
``partition.expiration-time`` are dropped as one OVERWRITE snapshot, by writers after their
commits (at most once per ``partition.expiration-check-interval`` in a process) and on demand.

A partition's age comes from ``partition.expiration-strategy``: ``values-time`` reads a time
from its values (``partition.timestamp-pattern`` puts them together, ``$key`` for each;
``partition.timestamp-formatter`` is a Java ``DateTimeFormatter`` pattern, else
``yyyy-MM-dd[ HH:mm[:ss]]``), and a partition whose values name no time never expires (as in
Paimon, which logs it); ``update-time`` takes the creation time of its newest file. Times are
local, as Paimon's ``LocalDateTime.now()``. At most ``partition.expiration-max-num``
partitions go in one run, the oldest first.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

from changelake.option_operations import PartitionExpirationStrategy, strptime_format
from changelake.table import partition_drops
from changelake.table.context import TableContext
from changelake.table.format.manifest import ManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.read import live_files

_log = logging.getLogger(__name__)

_DEFAULT_TIME = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2})(?::(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?)?\s*$")


def partition_time(ctx: TableContext, values: Sequence[Any]) -> dt.datetime | None:
    """The local time a partition's values name, or None when they name none."""
    options = ctx.options
    texts = ["" if v is None else str(v) for v in values]
    if options.partition_timestamp_pattern is None:
        text = texts[0] if texts else ""
    else:
        text = options.partition_timestamp_pattern
        for key, value in zip(ctx.partition_keys, texts, strict=True):
            text = text.replace(f"${key}", value)
    formatter = options.partition_timestamp_formatter
    if formatter is None:
        match = _DEFAULT_TIME.match(text)
        if match is None:
            return None
        year, month, day, hour, minute, second = (int(p) if p else 0 for p in match.groups()[:6])
        fraction = int((match.group(7) or "").ljust(6, "0")[:6])
        try:
            return dt.datetime(year, month, day, hour, minute, second, fraction)
        except ValueError:
            return None
    try:
        return dt.datetime.strptime(text, strptime_format(formatter))
    except ValueError:
        return None


def expired(ctx: TableContext, snapshot: Snapshot, now: dt.datetime) -> list[bytes]:
    """The serialized partitions of ``snapshot`` that expire at local time ``now``, oldest
    first, at most ``partition.expiration-max-num``."""
    options = ctx.options
    if options.partition_expiration_time is None or not ctx.partition_keys:
        return []
    cutoff = now - dt.timedelta(milliseconds=options.partition_expiration_time)
    entries = live_files.live_entries(ctx, snapshot)
    ages: dict[bytes, dt.datetime] = {}
    if options.partition_expiration_strategy is PartitionExpirationStrategy.UPDATE_TIME:
        for partition, newest in _newest_files(entries).items():
            ages[partition] = dt.datetime.fromtimestamp(newest / 1000)
    else:
        for partition in {e.partition for e in entries}:
            when = partition_time(ctx, ctx.partition_values(partition))
            if when is None:
                _log.warning("table %s: %s names no time; it does not expire", ctx.name,
                             ctx.describe_partition(partition))
            else:
                ages[partition] = when
    old = sorted((when, partition) for partition, when in ages.items() if when < cutoff)
    return [partition for _, partition in old[:options.partition_expiration_max_num]]


def _newest_files(entries: Sequence[ManifestEntry]) -> dict[bytes, int]:
    newest: dict[bytes, int] = {}
    for e in entries:
        if e.file.creation_time_ms is not None:
            newest[e.partition] = max(newest.get(e.partition, 0), e.file.creation_time_ms)
    return newest


def expire_partitions(ctx: TableContext, commit_user: str, *,
                      now: dt.datetime | None = None) -> tuple[list[bytes], Snapshot | None]:
    """Drop the partitions expired at ``now`` (default: the local time now) as one OVERWRITE
    snapshot: the partitions, and the snapshot (None when none expired)."""
    latest = ctx.latest_snapshot()
    if latest is None:
        return [], None
    gone = expired(ctx, latest, dt.datetime.now() if now is None else now)
    if not gone:
        return [], None
    return gone, partition_drops.drop(ctx, frozenset(gone), commit_user)


class CheckClock:
    """When each table (by location) was last checked for expired partitions in this process,
    so writers check once per ``partition.expiration-check-interval``."""

    def __init__(self) -> None:
        self._checked: dict[str, float] = {}
        self._lock = threading.Lock()

    def due(self, ctx: TableContext) -> bool:
        """Whether a check is due now; if so, it counts as made."""
        now = time.monotonic()
        with self._lock:
            last = self._checked.get(ctx.paths.metadata_root)
            if last is not None and (now - last) * 1000 < ctx.options.partition_expiration_check_interval:
                return False
            self._checked[ctx.paths.metadata_root] = now
            return True

    def clear(self) -> None:
        with self._lock:
            self._checked.clear()


CHECKS = CheckClock()


def expire_after_commit(ctx: TableContext, commit_user: str) -> None:
    """The partition expiration a writer runs after its commit, when due."""
    if ctx.options.partition_expiration_time is None or not ctx.partition_keys or not CHECKS.due(ctx):
        return
    expire_partitions(ctx, commit_user)
