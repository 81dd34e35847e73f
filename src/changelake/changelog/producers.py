"""Changelog producers (``changelog-producer``) as the engine sees them: what each writes when a
bucket's write buffer flushes and when a bucket is compacted
(:class:`changelake.table.changelog_hook.ChangelogHook`).

* ``none``: nothing; readers of changes see each APPEND snapshot's delta files.
* ``input``: the flush's raw input, as changelog files of the bucket (Paimon's
  ``ChangelogProducer.INPUT``, for input that already is a complete changelog, such as CDC).
* ``lookup``: every compaction that includes level 0 writes the changes of the keys it brings
  up, looking up their previous values in the levels above (through the table's local
  :class:`~changelake.table.lsm.lookup_files.LookupFiles`); compactions pick level 0 up
  whenever nothing else is picked, and with ``lookup-wait`` every commit waits for that.
* ``full-compaction``: every compaction into the top level writes the changes between the
  previous top level and the new one; writers fully compact every
  ``full-compaction.delta-commits`` commits (1 unless set).

See :mod:`changelake.changelog.compaction_changelog` for how the changes are computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyroaring import BitMap

from changelake.changelog import compaction_changelog as changes
from changelake.option_values import ChangelogProducer
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.context import TableContext
from changelake.table.format import data_file
from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm import lookup_files
from changelake.table.lsm.levels import Levels
from changelake.table.lsm.lookup_files import LookupFiles
from changelake.table.lsm.universal import CompactUnit


@dataclass(frozen=True)
class NoChangelog:
    """``none``: flushes and compactions write no changelog."""

    force_level0_up: bool = False
    full_compaction_delta_commits: int | None = None

    def on_flush(self, ctx: TableContext, bucket_dir: str, rows: Iterable[pa.Table]) -> list[DataFileMeta]:
        """No files (the rows are never produced)."""
        return []

    def on_compaction(self, ctx: TableContext, bucket_dir: str, before: Levels, after: Levels,
                      unit: CompactUnit, vectors: Mapping[str, BitMap] | None) -> list[DataFileMeta]:
        """No files."""
        return []

    def on_compacted_file(self, bucket_dir: str, f: DataFileMeta, rows: pa.Table) -> None:
        """Nothing is looked up later: nothing to keep."""


@dataclass(frozen=True)
class InputChangelog(NoChangelog):
    """``input``: a flush also writes its raw input as level-0 changelog files
    (``changelog-<uuid>-<n>.<format>``), as Paimon's MergeTreeWriter does: rows sorted by key
    and sequence number, unmerged, with their row kinds, in the data-file layout."""

    def on_flush(self, ctx: TableContext, bucket_dir: str, rows: Iterable[pa.Table]) -> list[DataFileMeta]:
        """The changelog files of the flush's rows."""
        return data_file.write(ctx.file_io, bucket_dir, rows, ctx.changelog_file_settings, level=0)


@dataclass(frozen=True)
class _CompactionChangelog(NoChangelog):
    """What ``lookup`` and ``full-compaction`` share: compactions read their files through the
    table's lookup files, where the changelog of the same compaction finds them, and a
    compaction's changelog is the diff of the bucket's state before and after it."""

    cache: LookupFiles | None = None

    def _changelog(self, ctx: TableContext, bucket_dir: str, cache: LookupFiles, before: Levels, after: Levels,
                   state: list[DataFileMeta], incoming: tuple[DataFileMeta, ...], level: int,
                   vectors: Mapping[str, BitMap] | None) -> list[DataFileMeta]:
        """The changelog files (at ``level``) of the keys of ``incoming`` between the ``state``
        files (without the rows their deletion ``vectors`` mark) before the compaction and after
        it."""
        old, new = changes.before_and_after(ctx, cache, bucket_dir, state, incoming, vectors or {})
        return changes.write(ctx, bucket_dir, changes.diff(ctx, old, new), level)


@dataclass(frozen=True)
class LookupChangelog(_CompactionChangelog):
    """``lookup``: the changes of the keys of a compaction's level-0 files, against the merged
    files above level 0 before and after it (Paimon's LookupMergeTreeCompactRewriter)."""

    def on_compaction(self, ctx: TableContext, bucket_dir: str, before: Levels, after: Levels,
                      unit: CompactUnit, vectors: Mapping[str, BitMap] | None) -> list[DataFileMeta]:
        """Changelog files at the compaction's output level (none without level-0 files)."""
        level0 = tuple(f for f in unit.files if f.level == 0)
        if not level0 or self.cache is None:
            return []
        state = [f for f in before.files if f.level > 0]
        return self._changelog(ctx, bucket_dir, self.cache, before, after, state, level0, unit.output_level,
                               vectors)

    def on_compacted_file(self, bucket_dir: str, f: DataFileMeta, rows: pa.Table) -> None:
        """Keep the file in the cache: the next compaction of the bucket looks its keys up."""
        if self.cache is not None:
            self.cache.put_file(bucket_dir, f, rows)


@dataclass(frozen=True)
class FullCompactionChangelog(_CompactionChangelog):
    """``full-compaction``: the changes of the keys a compaction into the top level brings
    there, between the previous top level and the new one (Paimon's
    FullChangelogMergeTreeCompactRewriter)."""

    top_level: int = 0

    def on_compaction(self, ctx: TableContext, bucket_dir: str, before: Levels, after: Levels,
                      unit: CompactUnit, vectors: Mapping[str, BitMap] | None) -> list[DataFileMeta]:
        """Changelog files at the top level (none for compactions below it)."""
        top = before.max_level
        incoming = tuple(f for f in unit.files if f.level < top)
        if unit.output_level != top or not incoming or self.cache is None:
            return []
        state = [f for f in before.files if f.level == top]
        return self._changelog(ctx, bucket_dir, self.cache, before, after, state, incoming, top, vectors)

    def on_compacted_file(self, bucket_dir: str, f: DataFileMeta, rows: pa.Table) -> None:
        """Keep a new top-level file in the cache: the next full compaction diffs against it."""
        if self.cache is not None and f.level == self.top_level:
            self.cache.put_file(bucket_dir, f, rows)


def lookup_cache(ctx: TableContext) -> LookupFiles | None:
    """The process's lookup files of the table (hits, misses, ``hit_rate``, ``clear()``; None
    when its compactions look nothing up)."""
    return lookup_files.store_for(ctx)


def for_table(ctx: TableContext) -> ChangelogHook:
    """The producer of the table's ``changelog-producer``."""
    producer = ctx.options.changelog_producer
    if producer is ChangelogProducer.INPUT:
        return InputChangelog()
    if producer is ChangelogProducer.LOOKUP:
        return LookupChangelog(force_level0_up=True, cache=lookup_cache(ctx))
    if producer is ChangelogProducer.FULL_COMPACTION:
        # Paimon's writers fully compact after every commit unless the option says otherwise.
        return FullCompactionChangelog(full_compaction_delta_commits=1, cache=lookup_cache(ctx),
                                       top_level=ctx.options.num_levels - 1)
    return NoChangelog()
