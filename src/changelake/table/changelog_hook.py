"""The protocol through which a changelog producer hooks into the writer and compaction.

The engine does not know the producers (they live in :mod:`changelake.changelog`, a layer
above); whoever creates a :class:`~changelake.table.write.writer.TableWrite` or compacts a table
hands it the table's producer, chosen from the ``changelog-producer`` option.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import pyarrow as pa
from pyroaring import BitMap

from changelake.table.context import TableContext
from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm.levels import Levels
from changelake.table.lsm.universal import CompactUnit


class ChangelogHook(Protocol):
    """What a changelog producer does when the writer flushes a bucket or a bucket is compacted,
    and how it shapes compaction."""

    @property
    def force_level0_up(self) -> bool:
        """Compactions pick every level-0 file up when nothing else is picked (Paimon's
        ForceUpLevel0Compaction), so level-0 rows reach a compaction that sees them."""
        ...

    @property
    def full_compaction_delta_commits(self) -> int | None:
        """A long-lived writer fully compacts every this many commits (None: never), as the
        producer needs it when ``full-compaction.delta-commits`` is not set."""
        ...

    def on_flush(self, ctx: TableContext, bucket_dir: str, rows: Iterable[pa.Table]) -> list[DataFileMeta]:
        """The changelog files written for one bucket's flush, in ``bucket_dir``.

        ``rows`` is the flush's raw input of the bucket (after the input checks and
        ``ignore-delete``, before merging) in data-file layout with row kinds and sequence
        numbers, sorted by key and then sequence number (so each key's rows are in input order),
        as chunks produced lazily: a producer that does not read them costs nothing. The files
        returned are committed with the flush's data files (``CommitMessage.changelog_files``)."""
        ...

    def on_compaction(self, ctx: TableContext, bucket_dir: str, before: Levels, after: Levels,
                      unit: CompactUnit, vectors: Mapping[str, BitMap] | None) -> list[DataFileMeta]:
        """The changelog files written for one compaction of a bucket, in ``bucket_dir``:
        ``unit`` took the bucket from ``before`` to ``after``; ``vectors`` (tables with deletion
        vectors) are the deletion vectors of ``before``'s files, whose marked rows are gone. The
        files returned are committed with the compaction
        (``CommitMessage.compact_changelog_files``, listed in the COMPACT snapshot)."""
        ...

    def on_compacted_file(self, bucket_dir: str, f: DataFileMeta, rows: pa.Table) -> None:
        """A compaction wrote ``f`` in ``bucket_dir`` with ``rows`` (data-file layout): a
        producer that looks files up in later compactions can keep them instead of reading the
        file back."""
        ...
