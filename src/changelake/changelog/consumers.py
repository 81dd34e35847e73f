"""Consumers: a named stream's progress in ``consumer/consumer-<id>``, Paimon's format
``{"nextSnapshot": N}`` (the next snapshot whose changes the consumer has not read)."""

from __future__ import annotations

import json

from changelake.errors import CorruptMetadataError, OptionError
from changelake.table.context import TableContext


def check_id(ctx: TableContext, consumer_id: str) -> None:
    """OptionError unless ``consumer_id`` can name a file (Paimon's rules)."""
    if not consumer_id or not consumer_id.strip() or "/" in consumer_id or "\\" in consumer_id \
            or consumer_id in (".", ".."):
        raise OptionError(f"{consumer_id!r} is not a consumer id (blank, or a path)", table=ctx.name,
                          option="consumer-id")


def next_snapshot(ctx: TableContext, consumer_id: str) -> int | None:
    """The snapshot the consumer reads next (None: no such consumer yet)."""
    check_id(ctx, consumer_id)
    path = ctx.paths.consumer(consumer_id)
    try:
        text = ctx.file_io.read_text(path)
    except FileNotFoundError:
        return None
    try:
        value = json.loads(text)["nextSnapshot"]
    except (ValueError, KeyError, TypeError):
        raise CorruptMetadataError("consumer file is corrupt", table=ctx.name, file=path) from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptMetadataError(f"consumer file has nextSnapshot {value!r}", table=ctx.name, file=path)
    return value


def record(ctx: TableContext, consumer_id: str, snapshot_id: int) -> None:
    """Record that the consumer reads snapshot ``snapshot_id`` next (replacing the file whole,
    so a reader never sees half of it)."""
    check_id(ctx, consumer_id)
    ctx.file_io.makedirs(ctx.paths.consumer_dir)
    ctx.file_io.overwrite_hint(ctx.paths.consumer(consumer_id), json.dumps({"nextSnapshot": snapshot_id}))
