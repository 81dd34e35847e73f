"""Rewriting a bucket's picked files: merge overlapping sections, upgrade the rest in place."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from changelake.errors import CommitConflictError, CorruptMetadataError, SchemaError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file, deletion_vector, kv
from changelake.table.format.manifest import DataFileMeta, FileSource
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.lsm import deletion_vectors, lookup_files
from changelake.table.lsm.deletion_vectors import Vectors
from changelake.table.lsm.levels import Levels, SortedRun, interval_partition
from changelake.table.lsm.lookup_files import LookupFiles
from changelake.table.lsm.universal import CompactUnit, UniversalCompaction, pick_full
from changelake.table.merge import chunked
from changelake.table.read import deletion_vectors as read_vectors
from changelake.table.read import live_files

SMALL_FILE_RATIO = 0.7  # files under 70% of target-file-size are rewritten, not upgraded
# A compaction section of more Parquet bytes than this is merged in key-bounded chunks, its
# inputs read and its outputs written a batch at a time, rather than whole (a split's read
# merges whole up to chunked.CHUNKED_MERGE_BYTES). A whole merge holds its inputs decoded
# (~5x their Parquet bytes) and the merged copy until it is written: ~10x in all, for each of
# the buckets a commit compacts at once. The binary-counter merges of a 100M-row deletion-vector
# ingest (16-32 MB sections of 1-2.5M rows, four buckets at once) took 500-700 MB that way.
CHUNKED_COMPACTION_BYTES = 4 * 1024 * 1024


@dataclass
class CompactResult:
    """Files a compaction removes and adds (an upgrade appears in both, at two levels), and the
    changelog files the producer wrote for it, in the order of the compactions."""

    before: list[DataFileMeta] = field(default_factory=list)
    after: list[DataFileMeta] = field(default_factory=list)
    changelog: list[DataFileMeta] = field(default_factory=list)
    # tables with deletion vectors: the bucket's vectors after the compactions, by data file
    vectors: Vectors | None = None

    def merge(self, later: CompactResult) -> list[DataFileMeta]:
        """Append a later compaction of the same bucket. Files this result added and the later
        one removes never reach a snapshot: they cancel out. Returns those that were written
        by this result (not upgrades of existing files), whose data files can be deleted."""
        written_by_us = {f.file_name for f in self.after} - {f.file_name for f in self.before}
        # A later upgrade removes a file at one level and adds it at another: keep its data.
        written_by_us -= {f.file_name for f in later.after}
        added = {(f.file_name, f.level): f for f in self.after}
        obsolete = []
        for f in later.before:
            if (f.file_name, f.level) in added:
                del added[(f.file_name, f.level)]
                if f.file_name in written_by_us:
                    obsolete.append(f)
            else:
                self.before.append(f)
        self.after = [*added.values(), *later.after]
        # Both changelogs stay: the later one starts from the state the earlier one ends in.
        self.changelog += later.changelog
        if later.vectors is not None:
            self.vectors = later.vectors  # the later compaction started from the earlier's vectors
        return obsolete

    def written(self) -> list[DataFileMeta]:
        """The data and changelog files these compactions wrote: not the files they only moved
        to another level, which keep their data."""
        moved = {f.file_name for f in self.before}
        return [f for f in [*self.after, *self.changelog] if f.file_name not in moved]


def picker(ctx: TableContext) -> UniversalCompaction:
    options = ctx.options
    return UniversalCompaction(
        max_size_amplification_percent=options.max_size_amplification_percent,
        size_ratio=options.size_ratio,
        compaction_trigger=options.compaction_trigger,
    )


@dataclass
class _Task:
    """One compaction of one bucket (MergeTreeCompactTask in Paimon)."""

    ctx: TableContext
    bucket_dir: str
    unit: CompactUnit
    max_level: int
    drop_delete: bool
    changelog: ChangelogHook
    # first-row only: files at levels >= 1 outside the unit. They hold older data, so a key
    # found there keeps that first row and the unit's rows of it are dropped (Paimon's lookup
    # compaction), which keeps every key in at most one file above level 0.
    lookup: tuple[DataFileMeta, ...] = ()
    # deletion vectors (None: the table has none): the rows of the files it reads are read
    # without those the vectors mark, and older rows the unit replaces are marked in them
    vectors: Vectors | None = None
    # the table's lookup files (None: its compactions look nothing up)
    store: LookupFiles | None = None
    result: CompactResult = field(default_factory=CompactResult)

    def run(self) -> CompactResult:
        min_size = int(self.ctx.options.target_file_size * SMALL_FILE_RATIO)
        candidate: list[list[SortedRun]] = []
        for section in interval_partition(self.unit.files, self.ctx.key_of):
            if len(section) > 1:
                candidate.append(section)
                continue
            for f in section[0].files:
                if f.file_size < min_size:
                    candidate.append([SortedRun((f,))])
                else:
                    self._rewrite(candidate)
                    self._upgrade(f)
        self._rewrite(candidate)
        if self.vectors is not None:
            rewritten = {f.file_name for f in self.result.before} - {f.file_name for f in self.result.after}
            self.result.vectors = {name: v for name, v in self.vectors.items() if name not in rewritten}
        return self.result

    def _read(self, f: DataFileMeta) -> pa.Table:
        rows = self._read_whole(f)
        if self.vectors is None:
            return rows
        return deletion_vectors.live_rows(rows, self.vectors.get(f.file_name))

    def _rewrite(self, candidate: list[list[SortedRun]]) -> None:
        if not candidate:
            return
        if len(candidate) == 1 and len(candidate[0]) == 1:
            for f in candidate[0][0].files:
                self._upgrade(f)
        else:
            self._rewrite_files([[f for run in section for f in run.files] for section in candidate])
        candidate.clear()

    def _upgrade(self, f: DataFileMeta) -> None:
        if f.level == self.unit.output_level:
            return
        if f.level == 0 and self.lookup and self._marks_older_only(f):
            # Paimon's upgrade without rewrite (CHANGELOG_NO_REWRITE): its rows stay as they
            # are, the older rows of its keys are marked deleted, and the file moves up.
            self._mark_older_rows(f)
            self.result.before.append(f)
            self.result.after.append(f.upgrade(self.unit.output_level))
        elif f.level == 0 and self.lookup:
            self._rewrite_files([[f]])  # its keys must be looked up in the older levels first
        elif self.unit.output_level != self.max_level or f.delete_row_count == 0:
            self.result.before.append(f)
            self.result.after.append(f.upgrade(self.unit.output_level))
        else:
            # Delete rows must not reach the top level: rewrite the file to drop them.
            self._rewrite_files([[f]])

    def _marks_older_only(self, f: DataFileMeta) -> bool:
        """Whether a level-0 file that moves up alone needs no rewrite, only its keys looked up:
        with deletion vectors, a merge that keeps the newest row as it is (deduplicate without
        a sequence field), and no retraction in the file (it would have to be dropped; an
        unknown count may hide some). Its keys are unique, as every flush merges them."""
        return self.vectors is not None and self.ctx.merge_engine.keeps_last_row and f.delete_row_count == 0

    def _mark_older_rows(self, f: DataFileMeta) -> None:
        """Mark the rows of ``f``'s keys in the older files deleted. Only ``f``'s keys are
        needed: from the lookup files (this process wrote it), else read from the file and
        kept there, since the next commits look keys up in ``f`` once it has moved up."""
        assert self.vectors is not None and self.store is not None
        ctx = self.ctx
        keys = self.store.keys(lookup_files.path_of(self.bucket_dir, f.file_name),
                               partial(ctx.read_file, self.bucket_dir, f, ctx.key_columns))
        if keys.num_rows:
            deletion_vectors.take_older_rows(ctx, self.bucket_dir, keys.select(ctx.key_columns), [f], self.lookup,
                                             self.store, self.vectors, with_values=False)

    def _rewrite_files(self, sections: Sequence[Sequence[DataFileMeta]]) -> None:
        """Merge each section (sections do not overlap, so one at a time keeps memory to the
        largest section) into rolling files at the output level."""
        ctx = self.ctx

        def merged_sections() -> Iterator[pa.Table]:
            for files in sections:
                # Oldest first: the merge's sort then finds rows in (key, sequence) order within
                # each key and sorts by key alone.
                oldest_first = sorted(files, key=lambda f: (f.max_sequence_number, f.min_sequence_number))
                tagged = self._looks_up_older(files) and any(f.level > 0 for f in files)
                if len(files) > 1 and chunked.is_big(files, limit=CHUNKED_COMPACTION_BYTES):
                    # Merged a chunk of keys at a time, in bounded memory (merges are per key).
                    # Sections that look older keys up (first-row, deletion vectors with files
                    # outside the unit) look up each chunk's keys alone: the files outside
                    # are searched in the lookup files, not read again per chunk.
                    sources = [self._batches(f) for f in oldest_first]
                    if tagged:
                        sources = [map(partial(deletion_vectors.tag_level0, f=f), source)
                                   for f, source in zip(oldest_first, sources, strict=True)]
                    for rows in chunked.key_bounded(sources, ctx.key_columns):
                        yield self._merge(rows, files)
                else:
                    read = [self._read(f) for f in oldest_first]
                    if tagged:
                        read = [deletion_vectors.tag_level0(t, f) for t, f in zip(read, oldest_first, strict=True)]
                    yield self._merge(pa.concat_tables(read), files)

        def on_file(f: DataFileMeta, rows: pa.Table) -> None:
            self.changelog.on_compacted_file(self.bucket_dir, f, rows)
            if self.store is not None:  # the next compactions merge it, or look its keys up
                self.store.put_file(self.bucket_dir, f, rows)

        # Rows written are handed on (data_file.write holds each file's rows until it closes)
        # only when something keeps them: the producers that look files up (their lookup files
        # keep values); for the others, big outputs are not held (deletion vectors' lookups need
        # just their keys, read from the file on the first lookup).
        store = self.store
        kept = store is not None and (store.values or not chunked.is_big([f for s in sections for f in s],
                                                                  limit=CHUNKED_COMPACTION_BYTES))
        written = data_file.write(ctx.file_io, self.bucket_dir, merged_sections(), ctx.file_settings,
                                  self.unit.output_level, file_source=FileSource.COMPACT,
                                  on_file=on_file if kept else None)
        killpoints.reached(KillPoint.COMPACTION)
        self.result.before += [f for files in sections for f in files]
        self.result.after += written

    def _merge(self, rows: pa.Table, files: Sequence[DataFileMeta]) -> pa.Table:
        """The merge of ``rows``: all rows of their keys in ``files`` (oldest file first)."""
        ctx = self.ctx
        alone = True  # no older row of the keys is merged in
        looked_up = rows
        if deletion_vectors.FROM_LEVEL0 in rows.column_names:
            looked_up = deletion_vectors.level0_only(ctx, rows)
            rows = rows.drop_columns([deletion_vectors.FROM_LEVEL0])
        if self._looks_up_older(files) and looked_up.num_rows:
            # Older rows of the keys are merged in (the engine needs them) and marked
            # deleted where they are: every older row of a key is gone, so deletes
            # can be dropped at any level. Only keys whose rows all come from level 0 are
            # looked up, as Paimon's lookup merge does: a key with a row above level 0 in
            # the section had its older rows marked when that row went up.
            assert self.vectors is not None and self.store is not None
            older = deletion_vectors.take_older_rows(
                ctx, self.bucket_dir, looked_up, files, self.lookup, self.store, self.vectors,
                with_values=not ctx.merge_engine.keeps_last_row)
            rows = pa.concat_tables([older, rows]) if older.num_rows else rows
            alone = not older.num_rows
        drop = self.drop_delete or self.vectors is not None
        if drop and alone and len(files) == 1 and _unique_sorted(ctx, rows):
            # One file and nothing older: a key's only row stays as it is in a merge,
            # which would only drop the retractions.
            merged = kv.drop_retractions(rows)
        else:
            merged = ctx.merge_rows(rows, drop_deletes=drop)
        if self.lookup and ctx.merge_engine.needs_lookup and merged.num_rows:
            merged = self._without_older_keys(merged)
        return merged

    def _looks_up_older(self, files: Sequence[DataFileMeta]) -> bool:
        """Whether merging ``files`` looks their keys up in the files outside the unit: with
        deletion vectors (first-row looks up after the merge instead), for level-0 rows."""
        return self.vectors is not None and self.store is not None and not self.ctx.merge_engine.needs_lookup \
            and bool(self.lookup) and any(f.level == 0 for f in files)

    def _batches(self, f: DataFileMeta) -> Iterator[pa.Table]:
        """The live rows of ``f`` in batches: sliced from memory when this process wrote it,
        else read a batch at a time; rows its deletion vector marks are left out by position."""
        vector = None if self.vectors is None else self.vectors.get(f.file_name)
        rows = None if self.store is None else self.store.find(lookup_files.path_of(self.bucket_dir, f.file_name))
        batches = chunked.batches_of(rows) if rows is not None else \
            self.ctx.read_file_batches(self.bucket_dir, f, self.ctx.file_schema.names, chunked.BATCH_ROWS)
        position = 0
        for batch in batches:
            keep = deletion_vector.keep_mask(vector, batch.num_rows, position)
            position += batch.num_rows
            yield batch if keep is None else batch.filter(keep)

    def _read_whole(self, f: DataFileMeta) -> pa.Table:
        """All stored rows of ``f`` (positions as in the file), through the table's lookup
        files: kept there when lookups need values, else only served from there when kept."""
        store, load = self.store, partial(self.ctx.read_file, self.bucket_dir, f)
        if store is None:
            return load()
        path = lookup_files.path_of(self.bucket_dir, f.file_name)
        if store.values:
            return store.rows(path, load)
        rows = store.find(path)
        return load() if rows is None else rows

    def _without_older_keys(self, merged: pa.Table) -> pa.Table:
        ctx = self.ctx
        key_columns = [kv.key_column(k) for k in ctx.key_names]
        low, high = merged.slice(0, 1), merged.slice(merged.num_rows - 1, 1)
        first, last = (ctx.key_of(data_file.key_row(t, ctx.key_names, 0)) for t in (low, high))
        overlapping = [f for f in self.lookup
                       if ctx.key_of(f.min_key) <= last and ctx.key_of(f.max_key) >= first]
        if not overlapping or self.store is None:
            return merged
        store, bucket_dir = self.store, self.bucket_dir
        older = pa.concat_tables(store.keys(lookup_files.path_of(bucket_dir, f.file_name),
                                            partial(ctx.read_file, bucket_dir, f, key_columns))
                                 for f in overlapping)
        indexed = merged.select(key_columns).append_column("__row", pa.array(range(merged.num_rows), pa.int64()))
        found = indexed.join(older, keys=key_columns, join_type="left semi").column("__row")
        keep = pc.invert(pc.is_in(indexed.column("__row"), value_set=found.combine_chunks()))
        return merged.filter(keep)


def _unique_sorted(ctx: TableContext, rows: pa.Table) -> bool:
    """Whether ``rows`` are in strictly increasing key order (checked for one integer key, as
    files written by a merge are; other keys count as not)."""
    if len(ctx.key_columns) != 1:
        return False
    column = rows.column(ctx.key_columns[0])
    if not pa.types.is_integer(column.type) or column.null_count:
        return False
    keys = column.to_numpy()
    return bool(np.all(keys[1:] > keys[:-1]))


def compact(ctx: TableContext, bucket_dir: str, levels: Levels, unit: CompactUnit,
            changelog: ChangelogHook, vectors: Mapping[str, BitMap] | None = None) -> CompactResult:
    """Run one picked compaction of a bucket (deletes are dropped only into the top level), with
    the changelog the table's producer writes for it. With deletion ``vectors`` (the bucket's,
    by data file) the result carries the vectors after it."""
    newer = next((f for f in unit.files if f.schema_id > ctx.schema.id), None)
    if newer is not None:
        # Rewriting it in this older schema would lose the columns added since.
        raise SchemaError(f"was written with schema {newer.schema_id}, newer than this writer's schema "
                          f"{ctx.schema.id}; reopen the table (table.refresh()) to compact it",
                          table=ctx.name, file=ctx.file_path(bucket_dir, newer))
    output = unit.output_level
    drop_delete = output != 0 and output >= levels.highest_non_empty_level()
    lookup: tuple[DataFileMeta, ...] = ()
    if ctx.merge_engine.needs_lookup or vectors is not None:
        picked = {(f.file_name, f.level) for f in unit.files}
        lookup = tuple(f for f in levels.files if f.level > 0 and (f.file_name, f.level) not in picked)
    working = None if vectors is None else dict(vectors)
    store = lookup_files.store_for(ctx)
    task = _Task(ctx, bucket_dir, unit, levels.max_level, drop_delete, changelog, lookup, working, store)
    try:
        result = task.run()
        after = levels.replace(result.before, result.after)
        result.changelog = changelog.on_compaction(ctx, bucket_dir, levels, after, unit, vectors)
    except BaseException:
        # a failed compaction (an input gone, say) is void: nothing will name what it wrote
        ctx.file_io.discard(ctx.file_paths(bucket_dir, task.result.written()))
        raise
    if store is not None:  # removed files are never looked up again
        removed = {f.file_name for f in levels.files} - {f.file_name for f in after.files}
        store.discard(lookup_files.path_of(bucket_dir, name) for name in removed)
    return result


def forces_level0_up(ctx: TableContext, changelog: ChangelogHook) -> bool:
    """Whether compactions of the table pick level 0 up when nothing else is picked: first-row's
    lookup compaction, deletion vectors, and producers that make changelog from level 0
    (``lookup``)."""
    return ctx.merge_engine.needs_lookup or ctx.options.deletion_vectors_enabled or changelog.force_level0_up


def compact_bucket(
    ctx: TableContext, bucket_dir: str, levels: Levels, *, full: bool, changelog: ChangelogHook,
    force_level0: bool = False, vectors: Mapping[str, BitMap] | None = None,
) -> tuple[Levels, CompactResult]:
    """Compact until the bucket is within bounds: one pick normally, more while the sorted runs
    exceed ``num-sorted-run.stop-trigger``; everything into the top level when ``full``; with
    ``force_level0`` also until no file is left at level 0. ``vectors``: the bucket's deletion
    vectors (tables with them), carried from one compaction to the next."""
    total = CompactResult()
    choose = picker(ctx)
    stop = ctx.options.stop_trigger
    while True:
        runs = levels.sorted_runs(ctx.key_of)
        if full:
            unit = pick_full(levels.num_levels, runs)
        elif force_level0:
            unit = choose.pick_level0(levels.num_levels, runs)
        else:
            unit = choose.pick(levels.num_levels, runs)
        if unit is None:
            return levels, total
        try:
            result = compact(ctx, bucket_dir, levels, unit, changelog, vectors)
        except BaseException:
            ctx.file_io.discard(ctx.file_paths(bucket_dir, total.written()))  # void as a whole
            raise
        if result.vectors is not None:
            vectors = result.vectors
        levels = levels.replace(result.before, result.after)
        ctx.file_io.discard(ctx.file_paths(bucket_dir, total.merge(result)))
        within = len(levels.sorted_runs(ctx.key_of)) <= stop and not (force_level0 and levels.level0())
        if full or within:
            return levels, total


def compact_table(
    ctx: TableContext,
    *,
    full: bool,
    partitions: Sequence[Mapping[str, Any]] | None,
    changelog: ChangelogHook,
    buckets: Collection[tuple[bytes, int]] | None = None,
    progress: Callable[[int, int], None] | None = None,
    snapshot: Snapshot | None = None,
) -> list[CommitMessage]:
    """Compaction results of every bucket of the latest snapshot, or of ``snapshot`` (of the
    given partitions, or only ``buckets``: (serialized partition, bucket) pairs), with the
    changelog the table's producer writes for them; ``progress`` gets (buckets done, buckets)
    as they finish."""
    latest = ctx.latest_snapshot() if snapshot is None else snapshot
    if latest is None:
        return []
    wanted = None if partitions is None else [ctx.partition_of(p) for p in partitions]
    entries = live_files.live_entries(ctx, latest)
    files = live_files.files_by_bucket(entries)
    # A compaction keeps its bucket's layout: a partition a rescale left at another number of
    # buckets than the table's keeps that number (Paimon's writers take the restored files').
    total_buckets = {(e.partition, e.bucket): e.total_buckets for e in entries}
    index_files = read_vectors.snapshot_vectors(ctx, latest)
    # A postpone-bucket table's bucket-postpone/ moves into real buckets by its own compaction.
    files = {k: v for k, v in files.items() if k[1] != POSTPONE_BUCKET}
    if wanted is not None:
        files = {k: v for k, v in files.items() if ctx.partition_values(k[0]) in wanted}
    if buckets is not None:
        files = {k: v for k, v in files.items() if k in buckets}

    def run(item: tuple[tuple[bytes, int], list[DataFileMeta]]) -> CommitMessage:
        (partition, bucket), files = item
        levels = Levels(tuple(files), ctx.options.num_levels)
        base_files = index_files.get((partition, bucket), [])
        base = read_vectors.bucket_vectors(ctx, base_files) if ctx.options.deletion_vectors_enabled else None
        try:
            after, result = compact_bucket(ctx, ctx.bucket_dir(partition, bucket), levels, full=full,
                                           changelog=changelog, force_level0=forces_level0_up(ctx, changelog),
                                           vectors=base)
        except (CorruptMetadataError, FileNotFoundError) as error:
            gone = removed_meanwhile(ctx, error, (partition, bucket))
            if gone is None:
                raise
            raise CommitConflictError(
                f"{gone[0]} of bucket {bucket} was compacted away by a concurrent commit and expired while this "
                "compaction read it; this compaction is void (compact again)", table=ctx.name) from None
        added, deleted = deletion_vectors.index_changes(ctx, base_files, base or {}, result.vectors, after.files)
        return CommitMessage(partition, bucket, total_buckets[(partition, bucket)],
                             compact_before=tuple(result.before), compact_after=tuple(result.after),
                             compact_changelog_files=tuple(result.changelog), index_added=added,
                             index_deleted=deleted)

    messages = map_all(run, files.items(), progress=progress)
    return [m for m in messages if m.compact_before or m.compact_after]



def removed_meanwhile(ctx: TableContext, error: Exception, key: tuple[bytes, int], *,
                      ours: Collection[str] = ()) -> tuple[str, list[DataFileMeta]] | None:
    """When ``error``, raised by a compaction of bucket ``key``, is an input file found missing
    that the latest snapshot no longer names (another commit compacted it away and its expiry
    deleted it: a race, which voids the compaction): the file's name and the bucket's files
    committed now. None when the file is there, is live, or is one of ``ours`` (files a writer
    has yet to commit): then it is lost, not raced, and ``error`` stands. Only this failure path
    reads the latest snapshot."""
    path = error.file if isinstance(error, CorruptMetadataError) else getattr(error, "filename", None)
    if not isinstance(path, str) or ctx.file_io.exists(path):
        return None
    name = os.path.basename(path)  # data and index file names are unique (a UUID each)
    latest = ctx.latest_snapshot()
    if name in ours or latest is None:
        return None
    committed = live_files.files_by_bucket(live_files.live_entries(ctx, latest)).get(key, [])
    index_files = read_vectors.snapshot_vectors(ctx, latest).get(key, [])
    live = {f.file_name for f in committed} | {f.file_name for f in index_files}
    return None if name in live else (name, committed)
