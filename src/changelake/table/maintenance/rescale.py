"""Rescale: rewrite partitions of a fixed-bucket table with another number of buckets, as one
OVERWRITE snapshot (Paimon's ``rescale`` procedure: ``ALTER TABLE ... SET ('bucket' = 'N')``,
then an overwrite of the partitions with their own rows, hashed by the new number). An append
table's rows are rewritten in order (:mod:`changelake.table.append.rescale`); a primary-key
table's as follows.

Each partition's rows are its merged rows at the snapshot the rescale starts from (merge-on-read
of every bucket, deletion vectors applied, deletes dropped), as a full compaction leaves them:
each new bucket is one sorted run at the top level, and every row keeps its sequence number, so
a later write of a key (numbered above the bucket's maximum) still wins. A commit that changed
the partitions' rows meanwhile makes the rescale void (CommitConflictError); nothing is lost.

A rescale is planned (:func:`plan`: the schema change, the snapshot read, the files of each
partition), its partitions rewritten (:func:`rewrite`: any subset at a time, anywhere, so Spark's
executors can take one partition each), and committed once (:func:`commit`).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from changelake.errors import CommitConflictError, CorruptMetadataError, OptionError, SnapshotNotFoundError
from changelake.table import metadata, partition_drops, schema_update
from changelake.table.append import rescale as append_rescale
from changelake.table.commit import overwrite
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import bucket as bucket_hash
from changelake.table.format import data_file, deletion_vector, kv
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta, FileSource
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints, scratch
from changelake.table.io.killpoints import KillPoint
from changelake.table.merge import chunked, sort
from changelake.table.read import deletion_vectors, live_files


def rescale(
    ctx: TableContext,
    *,
    bucket: int | None,
    partitions: Sequence[Mapping[str, Any]] | None,
    commit_user: str,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[TableContext, Snapshot | None]:
    """Rewrite ``partitions`` (dicts of partition values; None: every partition) with ``bucket``
    buckets (None: the table's ``bucket``) as one OVERWRITE snapshot. A ``bucket`` other than the
    table's is first set as the table's ``bucket`` (a new schema), as Paimon's ``ALTER TABLE``
    before the overwrite. Returns the context at the schema written with and the snapshot (None
    when the partitions hold no rows and no files). ``progress`` gets (partitions done,
    partitions). Bad input raises before anything is written."""
    ctx, planned = plan(ctx, bucket=bucket, partitions=partitions)
    if planned is None:
        return ctx, None
    messages = rewrite(planned, sorted(planned.files), progress)
    return ctx, commit(planned, messages, commit_user)


@dataclass(frozen=True)
class RescalePlan:
    """A rescale ready to run: the context at the schema it writes with, the snapshot it reads,
    the live files of each partition it rewrites (by old bucket), the new number of buckets."""

    ctx: TableContext
    base: Snapshot
    files: Mapping[bytes, Mapping[int, list[DataFileMeta]]]
    target: int


def plan(ctx: TableContext, *, bucket: int | None,
         partitions: Sequence[Mapping[str, Any]] | None) -> tuple[TableContext, RescalePlan | None]:
    """Check the arguments, set the table's new ``bucket`` (a schema change) and find the files
    to rewrite: the context at the schema written with, and the plan (None when the partitions
    hold no file any more)."""
    # The newest schema: files written since under a newer one would lose its columns if
    # rewritten under an older one.
    ctx = TableContext(ctx.name, ctx.file_io, ctx.paths, metadata.read_latest_schema(ctx.file_io, ctx.paths, ctx.name))
    latest = ctx.latest_snapshot()
    target = _checked_bucket(ctx, bucket, latest)
    entries = live_files.live_entries(ctx, latest) if latest is not None else []
    chosen = partition_drops.named_partitions(ctx, entries, partitions, operation="rescale")
    if target != ctx.options.bucket:
        ctx = schema_update.commit(ctx, [schema_update.SetOptions({"bucket": str(target)})])
    base = ctx.latest_snapshot()
    assert base is not None  # snapshots are never all deleted
    files: dict[bytes, dict[int, list[DataFileMeta]]] = defaultdict(lambda: defaultdict(list))
    for e in live_files.live_entries(ctx, base):
        if e.partition in chosen:
            files[e.partition][e.bucket].append(e.file)
    if not files:
        return ctx, None  # a concurrent overwrite emptied them: nothing to rewrite
    return ctx, RescalePlan(ctx, base, {p: dict(b) for p, b in files.items()}, target)


def commit(planned: RescalePlan, messages: Sequence[CommitMessage], commit_user: str) -> Snapshot | None:
    """Commit the rewritten partitions as one OVERWRITE snapshot of the planned ones."""
    return overwrite.commit_overwrite(planned.ctx, frozenset(planned.files), list(messages), commit_user,
                                      BATCH_COMMIT_IDENTIFIER, base=planned.base)


def _checked_bucket(ctx: TableContext, bucket: int | None, latest: Snapshot | None) -> int:
    """The number of buckets to rescale to; OptionError unless the table has fixed buckets and
    ``bucket`` is None or a positive int, SnapshotNotFoundError for a table never written."""
    current = ctx.options.bucket
    if ctx.kind is TableKind.APPEND:
        append_rescale.check(ctx)
    if current < 1:
        raise OptionError(f"rescale rewrites tables of fixed buckets; this table has bucket={current}",
                          table=ctx.name, option="bucket")
    if bucket is not None and (isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1):
        raise OptionError(f"rescale takes a number of buckets of 1 or more, not {bucket!r}",
                          table=ctx.name, option="bucket")
    if latest is None:
        raise SnapshotNotFoundError("has no snapshot: nothing to rescale (set_options changes 'bucket' of an "
                                    "empty table)", table=ctx.name)
    return current if bucket is None else bucket


def rewrite(planned: RescalePlan, partitions: Sequence[bytes],
            progress: Callable[[int, int], None] | None = None) -> list[CommitMessage]:
    """The new files of the planned ``partitions`` (serialized), a partition at a time; they are
    deleted when this fails."""
    ctx, base, target = planned.ctx, planned.base, planned.target
    by_partition = {p: planned.files[p] for p in partitions}
    vectors = deletion_vectors.snapshot_vectors(ctx, base) if ctx.options.deletion_vectors_enabled else {}
    work = _Rewrite(ctx, target, vectors)
    messages: list[CommitMessage] = []
    try:
        if progress is not None:
            progress(0, len(by_partition))
        for done, (partition, buckets) in enumerate(sorted(by_partition.items()), start=1):
            if ctx.kind is TableKind.APPEND:
                messages += append_rescale.rewrite_partition(ctx, partition, sorted(buckets.items()), target,
                                                             work.written.extend)
            else:
                big = chunked.is_big([f for files in buckets.values() for f in files])
                messages += (work.spilled if big else work.in_memory)(partition, sorted(buckets.items()))
            if progress is not None:
                progress(done, len(by_partition))
    except (CorruptMetadataError, FileNotFoundError) as error:
        ctx.file_io.discard(work.written)
        if _still(ctx, base):
            raise
        raise CommitConflictError(f"snapshot {base.id}, which the rescale read, was rolled back or expired while it "
                                  f"read it ({error}); the rescale is void (run it again)", table=ctx.name) from None
    except BaseException:
        ctx.file_io.discard(work.written)
        raise
    return messages


def _still(ctx: TableContext, base: Snapshot) -> bool:
    """Whether snapshot ``base.id`` is still ``base``: a file it names that is missing is lost,
    not taken away by a rollback or an expiry while the rescale read it."""
    try:
        return ctx.snapshot(base.id) == base
    except SnapshotNotFoundError:
        return False


_Buckets = Sequence[tuple[int, list[DataFileMeta]]]


@dataclass
class _Rewrite:
    """Rewrites partitions with ``target`` buckets, old buckets and new ones in parallel on the
    executor, and remembers the paths of the files it wrote."""

    ctx: TableContext
    target: int
    vectors: Mapping[tuple[bytes, int], Sequence[IndexFileMeta]]
    written: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def in_memory(self, partition: bytes, buckets: _Buckets) -> list[CommitMessage]:
        """A partition whose files are small together: every old bucket merged whole, the rows
        held in memory until every new bucket is written."""
        def merged(item: tuple[int, list[DataFileMeta]]) -> pa.Table:
            old_bucket, files = item
            ctx, bucket_dir = self.ctx, self.ctx.bucket_dir(partition, old_bucket)
            vectors = self._bucket_vectors(partition, old_bucket)
            rows = pa.concat_tables([ctx.read_file(bucket_dir, f, deleted=vectors.get(f.file_name))
                                     for f in _oldest_first(files)])
            return ctx.merge_rows(rows, drop_deletes=True)

        pieces: dict[int, list[pa.Table]] = defaultdict(list)
        for rows in map_all(merged, buckets):
            for new_bucket, part in _split(self.ctx, rows, self.target):
                pieces[new_bucket].append(part)

        def write(item: tuple[int, list[pa.Table]]) -> CommitMessage:
            new_bucket, parts = item
            return self._write(partition, new_bucket, [_sorted_by_key(self.ctx, pa.concat_tables(parts))])

        return map_all(write, sorted(pieces.items()))

    def spilled(self, partition: bytes, buckets: _Buckets) -> list[CommitMessage]:
        """A big partition in bounded memory: each old bucket merged a chunk of keys at a time
        (:func:`chunked.key_bounded`), its rows spilled to local disk per new bucket (each such
        run sorted by key), then each new bucket's runs merged by key into its files."""
        directory = scratch.make("rescale")
        try:
            def spill(item: tuple[int, list[DataFileMeta]]) -> dict[int, str]:
                old_bucket, files = item
                bucket_dir = self.ctx.bucket_dir(partition, old_bucket)
                vectors = self._bucket_vectors(partition, old_bucket)
                sources = [_live_batches(self.ctx, bucket_dir, f, vectors.get(f.file_name))
                           for f in _oldest_first(files)]
                runs: dict[int, pa.ipc.RecordBatchFileWriter] = {}
                paths: dict[int, str] = {}
                try:
                    for chunk in chunked.key_bounded(sources, self.ctx.key_columns):
                        for new_bucket, part in _split(self.ctx, self.ctx.merge_rows(chunk, drop_deletes=True),
                                                       self.target):
                            if new_bucket not in runs:
                                paths[new_bucket] = os.path.join(directory, f"{old_bucket}-{new_bucket}.arrow")
                                runs[new_bucket] = pa.ipc.new_file(paths[new_bucket], part.schema,
                                                                   options=_SPILL_OPTIONS)
                            runs[new_bucket].write_table(part)
                finally:
                    for run in runs.values():
                        run.close()
                return paths

            runs: dict[int, list[str]] = defaultdict(list)
            for paths in map_all(spill, buckets):
                for new_bucket, path in paths.items():
                    runs[new_bucket].append(path)

            def write(item: tuple[int, list[str]]) -> CommitMessage:
                new_bucket, paths = item
                chunks = chunked.key_bounded([_spilled_batches(path) for path in paths], self.ctx.key_columns)
                return self._write(partition, new_bucket, (_sorted_by_key(self.ctx, chunk) for chunk in chunks))

            return map_all(write, sorted(runs.items()))
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _bucket_vectors(self, partition: bytes, old_bucket: int) -> Mapping[str, BitMap]:
        index_files = self.vectors.get((partition, old_bucket), [])
        return deletion_vectors.bucket_vectors(self.ctx, index_files) if index_files else {}

    def _write(self, partition: bytes, new_bucket: int, chunks: Iterable[pa.Table]) -> CommitMessage:
        """One new bucket's rows (chunks in key order) as files at the top level."""
        ctx = self.ctx
        bucket_dir = ctx.bucket_dir(partition, new_bucket)
        files = data_file.write(ctx.file_io, bucket_dir, chunks, ctx.file_settings, ctx.options.num_levels - 1,
                                file_source=FileSource.COMPACT)
        with self.lock:
            self.written += ctx.file_paths(bucket_dir, files)
        killpoints.reached(KillPoint.RESCALE)
        return CommitMessage(partition, new_bucket, self.target, new_files=tuple(files))


_SPILL_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def _oldest_first(files: Sequence[DataFileMeta]) -> list[DataFileMeta]:
    """Files in the order a merge takes them: a key's rows then come in sequence order."""
    return sorted(files, key=lambda f: (f.max_sequence_number, f.min_sequence_number))


def _live_batches(ctx: TableContext, bucket_dir: str, meta: DataFileMeta, vector: BitMap | None) -> Iterator[pa.Table]:
    """The file's rows a batch at a time, without those its deletion vector marks."""
    position = 0
    for batch in ctx.read_file_batches(bucket_dir, meta, ctx.file_schema.names, chunked.BATCH_ROWS):
        keep = deletion_vector.keep_mask(vector, batch.num_rows, position)
        position += batch.num_rows
        yield batch if keep is None else batch.filter(keep)


def _spilled_batches(path: str) -> Iterator[pa.Table]:
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            yield pa.Table.from_batches([reader.get_batch(i)])


def _split(ctx: TableContext, rows: pa.Table, target: int) -> Iterator[tuple[int, pa.Table]]:
    """Merged rows by the new bucket of their key, each part in the rows' order."""
    if not rows.num_rows:
        return
    ids = bucket_hash.buckets([rows.column(k).combine_chunks() for k in ctx.bucket_key], target)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    bounds = np.searchsorted(sorted_ids, np.arange(target + 1))
    for new_bucket in np.unique(sorted_ids):
        yield int(new_bucket), rows.take(order[bounds[new_bucket]:bounds[new_bucket + 1]])


def _sorted_by_key(ctx: TableContext, rows: pa.Table) -> pa.Table:
    """Rows of one new bucket in key order (every key is there once: keys of a partition lived
    in one old bucket each)."""
    order = sort.sort_indices([rows.column(c) for c in ctx.key_columns], rows.column(kv.SEQUENCE))
    return rows.take(order)
