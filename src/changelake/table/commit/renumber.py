"""Renumbering a commit's rows so the commit that lands later wins.

A writer numbers the rows of a flush above every sequence number committed in their bucket at
that moment. If another commit lands in the same bucket before this one, with numbers as high as
ours, this commit's files are copied with their rows' numbers shifted above that commit's (the
same shift for every row of the bucket's commit, so their order among themselves is kept), and
the commit retries with the copies. Committed files are never rewritten. Changelog files hold
the same rows' numbers and are copied the same way, so they keep matching the data files.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.compute as pc

from changelake.option_values import POSTPONE_BUCKET
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import data_file, kv
from changelake.table.format.file_settings import FileSettings
from changelake.table.format.manifest import DataFileMeta, FileSource
from changelake.table.format.snapshot import Snapshot
from changelake.table.read import live_files

# A renumbered copy is written as one file, whatever its size (it replaces exactly one).
_ONE_FILE = 2**62


def renumber(ctx: TableContext, messages: list[CommitMessage], latest: Snapshot | None) -> list[CommitMessage] | None:
    """The messages with their new rows numbered above ``latest``'s in each bucket, or None
    when every message already is."""
    if latest is None or not any(m.new_files or m.changelog_files for m in messages):
        return None
    live = live_files.files_by_bucket(live_files.live_entries(ctx, latest))
    result: list[CommitMessage] = []
    changed = False
    for message in messages:
        new = [*message.new_files, *message.changelog_files]
        # Postpone-bucket files are numbered per writer, from 0, as Paimon's: their compaction
        # reads them writer by writer in order and numbers their rows anew.
        if not new or message.bucket == POSTPONE_BUCKET:
            result.append(message)
            continue
        # Changelog files hold every input row, also those that merging dropped: the lowest
        # number of the commit may be in them only.
        base = min(f.min_sequence_number for f in new)
        committed = max((f.max_sequence_number for f in live.get((message.partition, message.bucket), ())), default=-1)
        if committed < base:
            result.append(message)
            continue
        result.append(_shift(ctx, message, base, committed + 1 - base))
        changed = True
    return result if changed else None


def _shift(ctx: TableContext, message: CommitMessage, base: int, offset: int) -> CommitMessage:
    """The message's new data and changelog files copied with every row numbered ``base`` or
    higher moved up by ``offset``. Its compaction is dropped: it merged against a view of the
    bucket that the commit landed meanwhile made stale, and it may have merged committed rows
    numbered in the shifted range with this commit's (its output files are deleted with the
    originals; the writer compacts again from the table)."""
    bucket_dir = message.bucket_dir(ctx)

    def copy_of(f: DataFileMeta, settings: FileSettings) -> DataFileMeta:
        if f.max_sequence_number < base:
            return f
        if not ctx.key_value_files:  # an append table's numbers are in the manifest only
            return dataclasses.replace(f, min_sequence_number=f.min_sequence_number + offset,
                                       max_sequence_number=f.max_sequence_number + offset)
        return _rewrite(ctx, bucket_dir, f, base, offset, settings)

    return dataclasses.replace(
        message,
        new_files=tuple(copy_of(f, ctx.file_settings) for f in message.new_files),
        changelog_files=tuple(copy_of(f, ctx.changelog_file_settings) for f in message.changelog_files),
        compact_before=(),
        compact_after=(),
        compact_changelog_files=(),
    )


def _rewrite(ctx: TableContext, bucket_dir: str, f: DataFileMeta, base: int, offset: int,
             settings: FileSettings) -> DataFileMeta:
    rows = ctx.read_file(bucket_dir, f)
    index = rows.schema.get_field_index(kv.SEQUENCE)
    sequence = rows.column(index)
    shifted = pc.if_else(pc.greater_equal(sequence, base), pc.add(sequence, pa.scalar(offset, pa.int64())), sequence)
    rows = rows.set_column(index, rows.schema.field(index), shifted)
    settings = dataclasses.replace(settings, target_file_size=_ONE_FILE)
    source = FileSource(f.file_source if f.file_source is not None else FileSource.APPEND)
    [copy] = data_file.write(ctx.file_io, bucket_dir, [rows], settings, f.level, file_source=source)
    return copy
