"""Consumers: a named stream's progress in ``consumer/consumer-<id>``, Paimon's format
``{"nextSnapshot": N}`` (the next snapshot whose changes the consumer has not read).
A rollback moves the consumers past its target back to the snapshot after it (see
:mod:`changelake.table.maintenance.rollback`)."""

from __future__ import annotations

from changelake.errors import OptionError
from changelake.table.context import TableContext
from changelake.table.format import consumer


def check_id(ctx: TableContext, consumer_id: str) -> None:
    """OptionError unless ``consumer_id`` can name a file (Paimon's rules)."""
    if not consumer_id or not consumer_id.strip() or "/" in consumer_id or "\\" in consumer_id \
            or consumer_id in (".", ".."):
        raise OptionError(f"{consumer_id!r} is not a consumer id (blank, or a path)", table=ctx.name,
                          option="consumer-id")


def next_snapshot(ctx: TableContext, consumer_id: str) -> int | None:
    """The snapshot the consumer reads next (None: no such consumer yet)."""
    check_id(ctx, consumer_id)
    return consumer.read(ctx.file_io, ctx.paths, consumer_id, ctx.name)


def record(ctx: TableContext, consumer_id: str, snapshot_id: int) -> None:
    """Record that the consumer reads snapshot ``snapshot_id`` next (replacing the file whole,
    so a reader never sees half of it)."""
    check_id(ctx, consumer_id)
    consumer.write(ctx.file_io, ctx.paths, consumer_id, snapshot_id)
