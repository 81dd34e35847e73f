"""The protocol through which a changelog producer hooks into the writer.

The engine does not know the producers (they live in :mod:`changelake.changelog`, a layer
above); whoever creates a :class:`~changelake.table.write.writer.TableWrite` hands it the
table's producer, chosen from the ``changelog-producer`` option.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import pyarrow as pa

from changelake.table.context import TableContext
from changelake.table.format.manifest import DataFileMeta


class ChangelogHook(Protocol):
    """What a changelog producer does when the writer flushes a bucket."""

    def on_flush(self, ctx: TableContext, bucket_dir: str, rows: Iterable[pa.Table]) -> list[DataFileMeta]:
        """The changelog files written for one bucket's flush, in ``bucket_dir``.

        ``rows`` is the flush's raw input of the bucket (after the input checks and
        ``ignore-delete``, before merging) in data-file layout with row kinds and sequence
        numbers, sorted by key and then sequence number (so each key's rows are in input order),
        as chunks produced lazily: a producer that does not read them costs nothing. The files
        returned are committed with the flush's data files (``CommitMessage.changelog_files``)."""
        ...
