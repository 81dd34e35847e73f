"""Which schema a read of an older snapshot uses (Paimon's time travel).

Paimon copies a table whose options name a snapshot (``scan.snapshot-id``, ``scan.tag-name``,
``scan.timestamp-millis``, ``scan.timestamp``) with the schema that snapshot was committed
with and the table's options (``AbstractFileStoreTable.copy`` through ``tryTimeTravel``): a
renamed column has its old name, a dropped one is there, one added since is not. The rule
looks at those options only, not at ``scan.mode``, so a ``from-snapshot`` or
``from-timestamp`` stream reads in that snapshot's schema too; when the snapshot cannot be
found (a stream from a snapshot still to come, a time before the first snapshot) the table
keeps its schema. ``copyWithLatestSchema`` is for writers, never reads. changelake's own
option ``scan.time-travel.schema = latest`` keeps the table's schema instead.
"""

from __future__ import annotations

import contextlib
import datetime as dt

from changelake.errors import OptionError, SnapshotNotFoundError, TagNotFoundError
from changelake.option_values import TimeTravelSchema
from changelake.options import TableOptions
from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.format.snapshot import Snapshot


def context_at(ctx: TableContext, snapshot: Snapshot, choice: TimeTravelSchema) -> TableContext:
    """``ctx`` at the schema ``snapshot`` was committed with (``choice`` ``snapshot``), keeping
    ``ctx``'s options as Paimon keeps the table's; ``ctx`` itself for ``latest`` or when the
    schemas are the same."""
    if choice is TimeTravelSchema.LATEST or snapshot.schema_id == ctx.schema.id:
        return ctx
    schema = ctx.schemas.get(snapshot.schema_id).model_copy(update={"options": dict(ctx.schema.options)})
    return TableContext(ctx.name, ctx.file_io, ctx.paths, schema)


def target(ctx: TableContext, options: TableOptions) -> Snapshot | None:
    """The snapshot ``options`` travel to (Paimon's ``tryTravelToSnapshot``): by
    ``scan.tag-name``, ``scan.snapshot-id`` or the newest at or before ``scan.timestamp-millis``
    / ``scan.timestamp``; None when none is given or that snapshot does not exist."""
    with contextlib.suppress(SnapshotNotFoundError, TagNotFoundError):
        if options.scan_tag_name is not None:
            return metadata.tag(ctx, options.scan_tag_name)
        if options.scan_snapshot_id is not None:
            return ctx.snapshot(options.scan_snapshot_id)
        if options.scan_timestamp_millis is not None or options.scan_timestamp is not None:
            return metadata.snapshot_at(ctx, timestamp_ms(options))
    return None


def read_context(ctx: TableContext, options: TableOptions) -> TableContext:
    """The context a read with ``options`` (the table's and the read's) reads in: at the
    snapshot they travel to, by ``scan.time-travel.schema``; else ``ctx``."""
    found = target(ctx, options)
    return ctx if found is None else context_at(ctx, found, options.scan_time_travel_schema)


def timestamp_ms(options: TableOptions) -> int:
    """``scan.timestamp-millis``, or ``scan.timestamp`` (``yyyy-MM-dd HH:mm:ss``, local time as
    in Paimon) in milliseconds."""
    if options.scan_timestamp_millis is not None:
        return options.scan_timestamp_millis
    text = options.scan_timestamp or ""
    try:
        return int(dt.datetime.fromisoformat(text.strip()).timestamp() * 1000)
    except ValueError:
        raise OptionError(f"{text!r} is not a time like '2024-01-01 12:00:00'", table=options.table,
                          option="scan.timestamp") from None
