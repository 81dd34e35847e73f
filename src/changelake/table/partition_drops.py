"""Dropping rows wholesale: ``TRUNCATE TABLE`` and ``ALTER TABLE ... DROP PARTITION`` as
Paimon runs them, each one OVERWRITE snapshot that deletes every data file of the partitions
(and their index files) and adds none (Paimon's ``FileStoreCommit.dropPartitions``, and an
overwrite of the whole table with nothing).

Neither depends on what it deletes: the files removed are those the partitions hold at the
snapshot it lands on, so rows committed meanwhile go too (the later commit wins). Streams skip
the snapshot, as Paimon's do unless ``streaming-read-overwrite`` is set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from changelake.errors import ScanError
from changelake.table.commit import overwrite
from changelake.table.context import TableContext
from changelake.table.format.manifest import ManifestEntry
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.read import live_files


def named_partitions(ctx: TableContext, entries: Sequence[ManifestEntry],
                     partitions: Sequence[Mapping[str, Any]] | None, *, operation: str) -> frozenset[bytes]:
    """The serialized partitions that ``partitions`` (dicts of partition values; None: every
    partition with a file in ``entries``) name; ScanError naming one that holds no file, with
    nothing to ``operation``."""
    present = {e.partition for e in entries}
    if partitions is None:
        return frozenset(present)
    if isinstance(partitions, Mapping):
        raise ScanError("partitions must be a list of dicts of partition values", table=ctx.name)
    by_values = {ctx.partition_values(p): p for p in present}
    chosen = set()
    for spec in partitions:
        values = ctx.partition_of(spec)
        if values not in by_values:
            raise ScanError(f"partition {dict(spec)} holds no data: nothing to {operation}", table=ctx.name)
        chosen.add(by_values[values])
    return frozenset(chosen)


def truncate(ctx: TableContext, commit_user: str) -> Snapshot | None:
    """Delete every row of the table as one OVERWRITE snapshot; None for a table with no file."""
    latest = ctx.latest_snapshot()
    if latest is None or not live_files.live_entries(ctx, latest):
        return None
    # every partition the table holds when the snapshot lands, one made meanwhile too (Paimon's
    # truncateTable overwrites with no partition filter)
    return overwrite.commit_overwrite(ctx, lambda _: True, [], commit_user, BATCH_COMMIT_IDENTIFIER, base=None)


def drop_partitions(ctx: TableContext, partitions: Sequence[Mapping[str, Any]], commit_user: str) -> Snapshot | None:
    """Delete the rows of ``partitions`` (dicts of partition values) as one OVERWRITE snapshot.
    ScanError before anything is written for an unpartitioned table, an empty list or a
    partition that holds no data."""
    if not ctx.partition_keys:
        raise ScanError("is not partitioned: truncate it instead", table=ctx.name)
    if not partitions:
        raise ScanError("drop_partitions needs at least one partition", table=ctx.name)
    latest = ctx.latest_snapshot()
    entries = live_files.live_entries(ctx, latest) if latest is not None else []
    return drop(ctx, named_partitions(ctx, entries, partitions, operation="drop"), commit_user)


def drop(ctx: TableContext, partitions: frozenset[bytes], commit_user: str) -> Snapshot | None:
    """Delete the rows of ``partitions`` (serialized) as one OVERWRITE snapshot (None for none)."""
    if not partitions:
        return None
    return overwrite.commit_overwrite(ctx, partitions, [], commit_user, BATCH_COMMIT_IDENTIFIER, base=None)
