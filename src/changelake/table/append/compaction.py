"""Compacting an append table's small files, as Paimon 0.9 does (output at level 0, nothing
merged, rows kept).

* Unaware tables (``bucket = -1``, Paimon's ``UnawareAppendTableCompactionCoordinator``): per
  partition, the files smaller than 70% of ``target-file-size`` (Paimon's compaction file size)
  are taken smallest first into a bin, which is compacted once its files sum to
  ``target-file-size`` and number ``compaction.min.file-num``, or number
  ``compaction.max.file-num`` (default 50). A full compaction also takes the last bin of two
  files or more (what Paimon's coordinator does for files left waiting).
* Fixed buckets (``BucketedAppendCompactManager``): the files in write order, a window sliding
  over them until it sums to ``target-file-size`` with ``compaction.min.file-num`` files, or
  holds ``compaction.max.file-num`` (default 5); so adjacent files are joined and the bucket's
  order is kept. A full compaction rewrites every file from the first small one when small
  files outnumber big ones and there are at least three.

``target-file-size`` of an append table defaults to 256 MB, as Paimon's. The files of a pick
are rewritten in write order, numbered from the pick's first sequence number; the result is one
COMPACT snapshot. With deletion vectors, the rewritten files' deleted rows are left out and their
vectors dropped, in the same snapshot (Paimon's ``AppendDeleteFileMaintainer``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyroaring import BitMap

from changelake.errors import CommitConflictError
from changelake.table.append import vectors as append_vectors
from changelake.table.append.definition import UNAWARE_BUCKET
from changelake.table.commit import committer
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file, deletion_vector
from changelake.table.format.manifest import DataFileMeta, FileSource
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import deletion_vectors, live_files

_UNAWARE_MAX_FILE_NUM = 50
_BUCKETED_MAX_FILE_NUM = 5
_FULL_COMPACT_MIN_FILE = 3
_BATCH_ROWS = 64 * 1024


def pick(ctx: TableContext, total_buckets: int, files: Sequence[DataFileMeta], *,
         full: bool) -> list[list[DataFileMeta]]:
    """The groups of ``files`` (one bucket's, of a partition of ``total_buckets``) to compact,
    each in write order."""
    ordered = sorted(files, key=lambda f: f.min_sequence_number)
    if total_buckets == UNAWARE_BUCKET:
        return _pick_unaware(ctx, ordered, full=full)
    picked = _pick_bucketed_full(ctx, ordered) if full else _pick_bucketed(ctx, ordered)
    return [] if picked is None else [picked]


def _pick_unaware(ctx: TableContext, files: Sequence[DataFileMeta], *, full: bool) -> list[list[DataFileMeta]]:
    options = ctx.options
    target = ctx.target_file_size
    most = options.compaction_max_file_num or _UNAWARE_MAX_FILE_NUM
    small = sorted((f for f in files if f.file_size < target // 10 * 7), key=lambda f: f.file_size)
    bins: list[list[DataFileMeta]] = []
    current: list[DataFileMeta] = []
    total = 0
    for f in small:
        current.append(f)
        total += f.file_size
        if (total >= target and len(current) >= options.compaction_min_file_num) or len(current) >= most:
            bins.append(current)
            current, total = [], 0
    if full and len(current) > 1:
        bins.append(current)
    return [sorted(b, key=lambda f: f.min_sequence_number) for b in bins]


def _pick_bucketed(ctx: TableContext, files: Sequence[DataFileMeta]) -> list[DataFileMeta] | None:
    options = ctx.options
    target = ctx.target_file_size
    most = options.compaction_max_file_num or _BUCKETED_MAX_FILE_NUM
    window: deque[DataFileMeta] = deque()
    total = 0
    for f in files:
        window.append(f)
        total += f.file_size
        if (total >= target and len(window) >= options.compaction_min_file_num) or len(window) >= most:
            return list(window)
        if total >= target:
            total -= window.popleft().file_size
    return None


def _pick_bucketed_full(ctx: TableContext, files: Sequence[DataFileMeta]) -> list[DataFileMeta] | None:
    target = ctx.target_file_size
    rest = list(files)
    while rest and rest[0].file_size >= target:
        rest.pop(0)
    small = sum(1 for f in rest if f.file_size < target)
    if small > len(rest) - small and len(rest) >= _FULL_COMPACT_MIN_FILE:
        return rest
    return None


def rewrite(ctx: TableContext, partition: bytes, bucket: int, files: Sequence[DataFileMeta],
            vectors: Mapping[str, BitMap] | None = None) -> list[DataFileMeta]:
    """The rows of ``files`` (in write order) as new level-0 files, numbered from the first
    file's first sequence number, without the rows their deletion ``vectors`` mark; a failure
    deletes what it wrote."""
    bucket_dir = ctx.bucket_dir(partition, bucket)
    columns = list(ctx.arrow_schema.names)

    def chunks() -> Iterator[pa.Table]:
        for f in files:
            vector = None if vectors is None else vectors.get(f.file_name)
            position = 0
            for batch in ctx.read_file_batches(bucket_dir, f, columns, _BATCH_ROWS):
                keep = deletion_vector.keep_mask(vector, batch.num_rows, position)
                position += batch.num_rows
                live = batch if keep is None else batch.filter(keep)
                if live.num_rows:
                    yield live

    written = data_file.write(ctx.file_io, bucket_dir, chunks(), ctx.file_settings, level=0,
                              file_source=FileSource.COMPACT, first_sequence=files[0].min_sequence_number)
    try:
        killpoints.reached(KillPoint.COMPACTION)
    except BaseException:
        ctx.file_io.discard(ctx.file_paths(bucket_dir, written))
        raise
    return written


def compact_table(ctx: TableContext, *, full: bool, partitions: Sequence[Mapping[str, Any]] | None,
                  buckets: Collection[tuple[bytes, int]] | None = None,
                  progress: Callable[[int, int], None] | None = None,
                  snapshot: Snapshot | None = None) -> list[CommitMessage]:
    """Compaction results of every bucket of the latest snapshot, or of ``snapshot`` (of the
    given partitions, or only ``buckets``); ``progress`` gets (buckets done, buckets) as they
    finish. With deletion vectors, the rows they mark are left out and the vectors of the
    compacted files dropped (their index files replaced)."""
    latest = ctx.latest_snapshot() if snapshot is None else snapshot
    if latest is None:
        return []
    wanted = None if partitions is None else [ctx.partition_of(p) for p in partitions]
    entries = live_files.live_entries(ctx, latest)
    total_buckets = {(e.partition, e.bucket): e.total_buckets for e in entries}
    by_bucket = live_files.files_by_bucket(entries)
    index_files = deletion_vectors.snapshot_vectors(ctx, latest) if ctx.options.deletion_vectors_enabled else {}
    items = sorted((where, files) for where, files in by_bucket.items()
                   if (wanted is None or ctx.partition_values(where[0]) in wanted)
                   and (buckets is None or where in buckets))

    def run(item: tuple[tuple[bytes, int], list[DataFileMeta]]) -> CommitMessage | None:
        (partition, bucket), files = item
        picks = pick(ctx, total_buckets[(partition, bucket)], files, full=full)
        bucket_index = index_files.get((partition, bucket), [])
        vectors = deletion_vectors.bucket_vectors(ctx, bucket_index) if bucket_index else None
        before: list[DataFileMeta] = []
        after: list[DataFileMeta] = []
        try:
            for group in picks:
                after += rewrite(ctx, partition, bucket, group, vectors)
                before += group
            added, deleted = append_vectors.compacted(ctx, bucket_index, {f.file_name for f in before})
        except BaseException:
            ctx.file_io.discard(ctx.file_paths(ctx.bucket_dir(partition, bucket), after))
            raise
        if not before:
            return None
        return CommitMessage(partition, bucket, total_buckets[(partition, bucket)], compact_before=tuple(before),
                             compact_after=tuple(after), index_added=added, index_deleted=deleted)

    results = map_all(run, items, progress=progress)
    return [m for m in results if m is not None]


def compact_after_commit(ctx: TableContext, buckets: Collection[tuple[bytes, int]]) -> list[Snapshot]:
    """What a fixed-bucket writer compacts after its commit (Paimon's append writers compact
    their buckets as they write; unaware tables are compacted by ``table.compact()``): the
    COMPACT snapshot of the ``buckets`` whose files a pick takes, or [] (nothing to compact, or
    another writer's compaction of the same files landed first)."""
    if ctx.options.bucket == UNAWARE_BUCKET:
        return []
    messages = compact_table(ctx, full=False, partitions=None, buckets=buckets)
    if not messages:
        return []
    with contextlib.suppress(CommitConflictError):  # compacted by someone else meanwhile
        return committer.commit(ctx, messages, str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER)
    return []
