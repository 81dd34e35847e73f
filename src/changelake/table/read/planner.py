"""Planning reads: prune manifests and files by the filter, then cut them into splits. Batch
scans plan a snapshot's live files (merged per bucket); change scans plan the files a snapshot
adds (its delta or changelog files, read as they are) and full reads restricted to some levels."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from changelake.errors import ScanError
from changelake.option_values import POSTPONE_BUCKET, MergeEngineKind
from changelake.table.append import splits as append_splits
from changelake.table.context import TableContext
from changelake.table.format import binary_row, kv
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import (
    DataFileMeta,
    FileKind,
    FileSource,
    ManifestEntry,
    ManifestFileMeta,
    SimpleStats,
)
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import Snapshot
from changelake.table.lsm.levels import interval_partition
from changelake.table.read import deletion_vectors, index_pruning, live_files, value_pruning
from changelake.table.read.deletion_vectors import DeletionFile


@dataclass(frozen=True)
class Split:
    """Files of one bucket that are read (and merged) together.

    ``raw_convertible`` splits hold no overlapping keys and, by their files' delete counts, no
    retractions, so their rows are read as they are, without a merge (retraction rows are
    dropped all the same: some writers count them wrong). ``deletion_files`` (tables with
    deletion vectors) gives each file's deletion vector (None: none), whose rows are left out.
    """

    partition: bytes
    bucket: int
    bucket_dir: str
    files: tuple[DataFileMeta, ...]
    raw_convertible: bool
    deletion_files: tuple[DeletionFile | None, ...] = ()
    # A stream's read of the files an OVERWRITE removed: their merged rows, each as a -D.
    reversed: bool = False

    @property
    def row_count(self) -> int:
        """Rows stored in the split's files (before merging)."""
        return sum(f.row_count for f in self.files)


def may_retract(meta: DataFileMeta) -> bool:
    """Whether a file may hold -U/-D rows, by its metadata. Paimon's raw-file reads trust a
    file's delete count, but pypaimon 2.1 records 0 for the files it writes whatever they hold
    (and a compaction may move such a file up a level unchanged, count and all); files a
    compaction wrote (Java Paimon's, changelake's: pypaimon does not compact) count their
    retractions."""
    return meta.file_source != FileSource.COMPACT or meta.delete_row_count != 0


def file_columns(columns: Sequence[str], meta: DataFileMeta) -> list[str]:
    """``columns`` without ``_VALUE_KIND`` for a file whose metadata shows no -U/-D row
    (:func:`may_retract`), unless it is the only column (Arrow loses the row count of a read
    without columns). Files that may retract are read with their kinds, which their
    statistics may still leave out (``kinds_for_retractions``)."""
    if kv.VALUE_KIND not in columns or len(columns) == 1 or may_retract(meta):
        return list(columns)
    return [c for c in columns if c != kv.VALUE_KIND]


def _range_guarantee(names: Sequence[str], types: Sequence[pa.DataType], stats: SimpleStats) -> pc.Expression:
    """What every row covered by ``stats`` satisfies: each column within its [min, max]."""
    if binary_row.deserialize(stats.min_values)[0] != len(types):
        return pc.scalar(True)  # stats of other columns (or none): no guarantee
    lows = binary_row.from_bytes(binary_row.deserialize(stats.min_values)[1], types)
    highs = binary_row.from_bytes(binary_row.deserialize(stats.max_values)[1], types)
    guarantee = pc.scalar(True)
    counts = stats.null_counts or (None,) * len(types)
    for name, t, low, high, nulls in zip(names, types, lows, highs, counts, strict=True):
        if not (value_pruning.orderable(low) and value_pruning.orderable(high)):
            continue
        field = pc.field(name)
        if low == high:
            within = field == pc.scalar(pa.scalar(low, t))
        else:
            within = (field >= pc.scalar(pa.scalar(low, t))) & (field <= pc.scalar(pa.scalar(high, t)))
        # Min and max leave nulls out: a column with nulls (or an unknown count) may hold them.
        guarantee = guarantee & (within if nulls == 0 else within | field.is_null())
    return guarantee


def _prune(ctx: TableContext, candidates: Sequence[Any], guarantees: Sequence[pc.Expression],
           expression: pc.Expression) -> list[Any]:
    """The candidates whose guarantee does not contradict the filter (Arrow simplifies)."""
    if not candidates:
        return []
    dataset = ds.FileSystemDataset.from_paths(
        [str(i) for i in range(len(candidates))], schema=ctx.arrow_schema, format=ds.ParquetFileFormat(),
        filesystem=pafs.LocalFileSystem(), partitions=list(guarantees),
    )
    try:
        kept = dataset.get_fragments(filter=expression)
        return [candidates[int(f.path)] for f in kept]
    except pa.ArrowException as exc:
        raise ScanError(f"filter {expression} does not apply: {exc}", table=ctx.name) from None


def _bounds_filter(expression: pc.Expression | None) -> pc.Expression | None:
    """The filter to prune by bounds (partition, key and value ranges) with: None for one with a
    NaN literal, since Arrow's simplification orders NaN above every bound (NOT x < NaN given
    x <= 2 is taken as false, though x < NaN is false for every x). Worked out once a plan:
    reading the expression's tree costs about 0.1 ms."""
    if expression is None or index_pruning.holds_nan(index_pruning.parse(expression)):
        return None
    return expression


def _prune_manifests(ctx: TableContext, manifests: list[ManifestFileMeta],
                     expression: pc.Expression | None) -> list[ManifestFileMeta]:
    if expression is None or not ctx.partition_keys:
        return manifests
    guarantees = [_range_guarantee(ctx.partition_keys, ctx.partition_types, m.partition_stats) for m in manifests]
    return _prune(ctx, manifests, guarantees, expression)


def _prune_files(
    ctx: TableContext, entries: list[ManifestEntry], expression: pc.Expression | None
) -> list[ManifestEntry]:
    if expression is None:
        return entries
    guarantees = []
    for entry in entries:
        guarantee = _range_guarantee(ctx.key_names, ctx.key_of.types, entry.file.key_stats)
        values = ctx.partition_values(entry.partition)
        for name, t, value in zip(ctx.partition_keys, ctx.partition_types, values, strict=True):
            field = pc.field(name)
            guarantee = guarantee & (field.is_null() if value is None else field == pc.scalar(pa.scalar(value, t)))
        guarantees.append(guarantee)
    return _prune(ctx, entries, guarantees, expression)


def _unmatched_values(ctx: TableContext, entries: list[ManifestEntry], expression: pc.Expression | None) -> set[str]:
    """The files whose value statistics contradict the filter (by name): safe to skip only
    where no merge could change their rows."""
    if expression is None:
        return set()
    guarantees = [value_pruning.guarantee(ctx, e.file) for e in entries]
    known = [i for i, g in enumerate(guarantees) if not g.equals(pc.scalar(True))]
    kept = _prune(ctx, known, [guarantees[i] for i in known], expression)
    return {entries[i].file.file_name for i in set(known) - set(kept)}


def _pack(
    items: Sequence[list[DataFileMeta]], weight: Callable[[Sequence[DataFileMeta]], int], target: int
) -> list[list[DataFileMeta]]:
    """Ordered bin packing: consecutive items fill a bin up to ``target`` weight."""
    bins: list[list[DataFileMeta]] = []
    current: list[DataFileMeta] = []
    current_weight = 0
    for item in items:
        w = weight(item)
        if current and current_weight + w > target:
            bins.append(current)
            current, current_weight = [], 0
        current += item
        current_weight += w
    if current:
        bins.append(current)
    return bins


def split_bucket(ctx: TableContext, files: list[DataFileMeta],
                 skipped: Collection[str] = frozenset()) -> list[tuple[list[DataFileMeta], bool]]:
    """One bucket's files as split groups, each with whether it reads raw (without merging).

    Files whose key ranges overlap stay in one group (interval partition into sections);
    sections are packed up to ``source.split.target-size``, each file weighing at least
    ``source.split.open-file-cost``. Files named in ``skipped`` (their values cannot match the
    filter) are left out where no other file can hold their keys: a row of theirs can then
    neither shadow nor be shadowed by a merge."""
    options = ctx.options
    target, open_cost = options.split_target_size, options.split_open_file_cost

    def weight(group: Sequence[DataFileMeta]) -> int:
        return max(sum(f.file_size for f in group), open_cost)

    no_deletes = all(f.level != 0 and f.delete_row_count == 0 for f in files)
    if no_deletes and (len({f.level for f in files}) == 1 or ctx.merge_engine.keys_unique_across_levels):
        # One sorted run (or levels that never share a key) without deletes: read as it is.
        ordered = sorted((f for f in files if f.file_name not in skipped), key=lambda f: ctx.key_of(f.min_key))
        return [(g, True) for g in _pack([[f] for f in ordered], weight, target)]
    sections = [[f for run in section for f in run.files] for section in interval_partition(files, ctx.key_of)]
    sections = [s for s in sections if len(s) > 1 or s[0].file_name not in skipped]
    return [(g, len(g) == 1 and g[0].delete_row_count == 0) for g in _pack(sections, weight, target)]


def batch_levels(ctx: TableContext) -> Callable[[int], bool] | None:
    """The levels a batch scan reads (None: all). First-row tables skip level 0, as Paimon's
    batch scans do (``CoreOptions.batchScanSkipLevel0``, ``DataTableBatchScan``): their writers
    move level 0 up with a lookup of the older levels, and rows read before that are not
    Paimon's readers'. Tables with deletion vectors skip it in every plan (``plan``). Change
    streams read level 0 (their first full read is followed by the snapshots after it)."""
    if ctx.merge_engine.kind is MergeEngineKind.FIRST_ROW:
        return functools.partial(operator.lt, 0)
    return None


def read_optimized_levels(ctx: TableContext) -> Callable[[int], bool] | None:
    """The levels a read-optimized scan (Paimon's ``$ro``) reads: a primary-key table's top
    level, which needs no merge; every file of an append table, none of which needs one."""
    if ctx.kind is TableKind.APPEND:
        return None
    return functools.partial(operator.eq, ctx.options.num_levels - 1)


def plan(
    ctx: TableContext,
    snapshot: Snapshot,
    expression: pc.Expression | None,
    levels: Callable[[int], bool] | None = None,
    *,
    postpone: bool = False,
) -> list[Split]:
    """The splits of a snapshot's live files that the filter may need, by (partition, bucket);
    ``levels`` keeps only files at the levels it accepts (change streams' first full read of
    tables whose changelog covers level 0 separately). The files of postpone-bucket tables'
    ``bucket-postpone/`` are left out, as Paimon's scans leave them (``onlyReadRealBuckets``)
    until a compaction moves their rows into real buckets, unless ``postpone``: then each is a
    split of its own, read as it is (Paimon's change streams without a changelog producer)."""
    bounded = _bounds_filter(expression)
    manifests = _prune_manifests(ctx, live_files.data_manifests(ctx, snapshot), bounded)
    entries = _prune_files(ctx, live_files.live_entries(ctx, snapshot, manifests), bounded)
    waiting = [e for e in entries if e.bucket == POSTPONE_BUCKET]
    entries = [e for e in entries if e.bucket != POSTPONE_BUCKET]
    if levels is not None:
        entries = [e for e in entries if levels(e.file.level)]
    postponed = _file_splits(ctx, waiting) if postpone else []
    skipped = _unmatched_values(ctx, entries, bounded)
    skipped |= index_pruning.unmatched(ctx, entries, expression, lambda e: e.file.file_name in skipped)
    if ctx.kind is TableKind.APPEND or ctx.options.deletion_vectors_enabled:
        # every file is read alone (a primary-key table's deletion vectors keep each key live
        # in one file): a file no row of which can match is not read
        entries = [e for e in entries if e.file.file_name not in skipped]
        skipped = set()
    if ctx.options.deletion_vectors_enabled:
        return _plan_with_vectors(ctx, snapshot, entries) + postponed
    splits = []
    for (partition, bucket), files in sorted(live_files.files_by_bucket(entries).items(), key=lambda item: item[0]):
        bucket_dir = ctx.bucket_dir(partition, bucket)
        cut = append_splits.split_bucket(ctx, files) if ctx.kind is TableKind.APPEND else \
            split_bucket(ctx, files, skipped)
        for group, raw in cut:
            splits.append(Split(partition, bucket, bucket_dir, tuple(group), raw))
    return splits + postponed


def _plan_with_vectors(ctx: TableContext, snapshot: Snapshot, entries: list[ManifestEntry]) -> list[Split]:
    """Splits of a table with deletion vectors (Paimon's batch scan with ``deletion-vectors.enabled``):
    a primary-key table's level 0 is skipped (writers compact it up before they commit), and
    every other file is read alone, without a merge, minus the rows its deletion vector marks
    (an append table's files all, in write order); files are packed into splits up to
    ``source.split.target-size``."""
    options = ctx.options
    vector_files = deletion_vectors.snapshot_vectors(ctx, snapshot)
    splits = []
    for (partition, bucket), files in sorted(live_files.files_by_bucket(entries).items(), key=lambda item: item[0]):
        if ctx.kind is TableKind.APPEND:  # every file, in write order: an append table has no level 0 to skip
            above = sorted(files, key=lambda f: f.min_sequence_number)
        else:
            above = sorted((f for f in files if f.level > 0), key=lambda f: (f.level, ctx.key_of(f.min_key)))
        if not above:
            continue
        bucket_dir = ctx.bucket_dir(partition, bucket)
        found = deletion_vectors.deletion_files(ctx, vector_files.get((partition, bucket), ()))
        groups = _pack([[f] for f in above], lambda g: max(sum(f.file_size for f in g), options.split_open_file_cost),
                       options.split_target_size)
        for group in groups:
            splits.append(Split(partition, bucket, bucket_dir, tuple(group), raw_convertible=True,
                                deletion_files=tuple(found.get(f.file_name) for f in group)))
    return splits


def plan_added_files(ctx: TableContext, manifests: Sequence[ManifestFileMeta],
                     expression: pc.Expression | None) -> list[Split]:
    """One split per file the manifests add (a snapshot's delta or changelog files), to be
    read as they are, not merged: by (partition, bucket), then in manifest order, which is
    the order they were written in."""
    bounded = _bounds_filter(expression)
    kept = _prune_manifests(ctx, list(manifests), bounded)
    entries = [e for m in kept for e in live_files.manifest_entries(ctx, m.file_name) if e.kind is FileKind.ADD]
    return _file_splits(ctx, _prune_files(ctx, entries, bounded))


def plan_overwritten_files(ctx: TableContext, snapshot: Snapshot, before: Snapshot | None,
                           expression: pc.Expression | None) -> list[Split]:
    """An OVERWRITE snapshot's changes as a stream reads them (Paimon's ``readChanges`` with
    ``streaming-read-overwrite``, IncrementalChangelogReadProvider): per bucket, the files it
    removed merged (without the rows the deletion vectors of ``before``, the snapshot it
    replaced, mark) into the rows they held, each read as a -D (``reversed``), then per bucket
    the files it added, merged. Merged as Paimon merges them since 1.0: a key a removed file
    deletes is not brought back, and a key is retracted once, with the value it had. Files of
    ``bucket-postpone/`` are read as stored, one split each."""
    bounded = _bounds_filter(expression)
    kept = _prune_manifests(ctx, live_files.manifest_list(ctx, snapshot.delta_manifest_list), bounded)
    entries = [e for m in kept for e in live_files.manifest_entries(ctx, m.file_name)]
    removed = _prune_files(ctx, [e for e in entries if e.kind is FileKind.DELETE], bounded)
    added = _prune_files(ctx, [e for e in entries if e.kind is FileKind.ADD], bounded)
    vectors = deletion_vectors.snapshot_vectors(ctx, before) \
        if before is not None and ctx.options.deletion_vectors_enabled else {}
    return [dataclasses.replace(s, reversed=True) for s in _bucket_splits(ctx, removed, vectors)] + \
        _bucket_splits(ctx, added, {})


def _bucket_splits(ctx: TableContext, entries: list[ManifestEntry],
                   vectors: Mapping[tuple[bytes, int], Sequence[IndexFileMeta]]) -> list[Split]:
    """One split per bucket of all its files, to be merged (files with their deletion vectors
    in ``vectors``); one per file, as stored, for ``bucket-postpone/``."""
    splits = _file_splits(ctx, [e for e in entries if e.bucket == POSTPONE_BUCKET])
    for (partition, bucket), files in sorted(live_files.files_by_bucket(
            [e for e in entries if e.bucket != POSTPONE_BUCKET]).items(), key=lambda item: item[0]):
        found = deletion_vectors.deletion_files(ctx, vectors[(partition, bucket)]) \
            if (partition, bucket) in vectors else {}
        splits.append(Split(partition, bucket, ctx.bucket_dir(partition, bucket), tuple(files), raw_convertible=False,
                            deletion_files=tuple(found.get(f.file_name) for f in files)))
    return splits


def _file_splits(ctx: TableContext, entries: list[ManifestEntry]) -> list[Split]:
    """One split per file, read as it is: by (partition, bucket), then in the given order."""
    ordered = sorted(range(len(entries)), key=lambda i: (entries[i].partition, entries[i].bucket, i))
    bucket_dirs: dict[tuple[bytes, int], str] = {}
    splits = []
    for i in ordered:
        entry = entries[i]
        where = (entry.partition, entry.bucket)
        if where not in bucket_dirs:
            bucket_dirs[where] = ctx.bucket_dir(*where)
        splits.append(Split(entry.partition, entry.bucket, bucket_dirs[where], (entry.file,), raw_convertible=True))
    return splits
