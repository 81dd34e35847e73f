"""Changelog producers (``changelog-producer``) as the writer sees them: what each writes when
a bucket's write buffer flushes (:class:`changelake.table.changelog_hook.ChangelogHook`).

* ``none``: nothing; readers of changes see each APPEND snapshot's delta files.
* ``input``: the flush's raw input, as changelog files of the bucket (Paimon's
  ``ChangelogProducer.INPUT``, for input that already is a complete changelog, such as CDC).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from changelake.errors import OptionError
from changelake.option_values import ChangelogProducer
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.context import TableContext
from changelake.table.format import data_file
from changelake.table.format.manifest import DataFileMeta


class NoChangelog:
    """``none``: a flush writes no changelog."""

    def on_flush(self, ctx: TableContext, bucket_dir: str, rows: Iterable[pa.Table]) -> list[DataFileMeta]:
        """No files (the rows are never produced)."""
        return []


class InputChangelog:
    """``input``: a flush also writes its raw input as level-0 changelog files
    (``changelog-<uuid>-<n>.parquet``), as Paimon's MergeTreeWriter does: rows sorted by key
    and sequence number, unmerged, with their row kinds, in the data-file layout."""

    def on_flush(self, ctx: TableContext, bucket_dir: str, rows: Iterable[pa.Table]) -> list[DataFileMeta]:
        """The changelog files of the flush's rows."""
        return data_file.write(ctx.file_io, bucket_dir, rows, ctx.changelog_file_settings, level=0)


_HOOKS: dict[ChangelogProducer, ChangelogHook] = {
    ChangelogProducer.NONE: NoChangelog(),
    ChangelogProducer.INPUT: InputChangelog(),
}


def for_table(ctx: TableContext) -> ChangelogHook:
    """The producer of the table's ``changelog-producer``. A table another Paimon writer
    created with a producer changelake does not implement yet is refused: its readers would
    trust the option and miss the changes changelake wrote."""
    producer = ctx.options.changelog_producer
    hook = _HOOKS.get(producer)
    if hook is None:
        raise OptionError(f"writing tables with changelog-producer {producer.value!r} is not supported yet",
                          table=ctx.name, option="changelog-producer")
    return hook
