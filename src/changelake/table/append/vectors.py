"""Deletion vectors of an append table: rows removed by a DELETE, UPDATE or MERGE (Paimon's
``AppendDeleteFileMaintainer`` and ``BucketedAppendDeleteFileMaintainer``): the removed rows'
positions are merged into their files' vectors, and each index file of the bucket that held one
of those files' vectors is replaced by a new one holding its other vectors and the merged ones.
A fixed bucket's vectors live in one index file, so that file is rewritten whole; an unaware
partition's (bucket 0) may be spread over several, of which only the touched ones are replaced.
A compaction drops the vectors of the files it rewrites (their deleted rows left out) the same
way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pyroaring import BitMap

from changelake.errors import CommitConflictError
from changelake.table.context import TableContext
from changelake.table.format.index_manifest import IndexFileMeta, IndexManifestEntry
from changelake.table.format.manifest import FileKind
from changelake.table.lsm import deletion_vectors as write_vectors
from changelake.table.read import deletion_vectors


@dataclass(frozen=True)
class BucketVectors:
    """A bucket's new deletion-vector index file (None: no vector left in the replaced files),
    the index files it replaces, and the data files whose vectors changed."""

    partition: bytes
    bucket: int
    added: IndexFileMeta | None
    deleted: tuple[IndexFileMeta, ...]
    changed: frozenset[str]


def write_bucket(ctx: TableContext, partition: bytes, bucket: int, index_files: Sequence[IndexFileMeta],
                 removed: Mapping[str, BitMap]) -> BucketVectors:
    """The index change that marks ``removed`` (data file name -> positions) deleted in a
    bucket whose deletion-vector index files (at the snapshot the positions were read from) are
    ``index_files``; the new index file is written here."""
    touched = [f for f in index_files if any(r.data_file in removed for r in f.ranges or ())]
    vectors = deletion_vectors.bucket_vectors(ctx, touched)
    for name, positions in removed.items():
        vectors[name] = vectors[name] | positions if name in vectors else BitMap(positions)
    added = write_vectors.write_index_file(ctx, vectors)
    return BucketVectors(partition, bucket, added, tuple(touched), frozenset(removed))


def apply(ctx: TableContext, entries: Sequence[IndexManifestEntry], changes: Sequence[BucketVectors],
          live_files: set[tuple[bytes, int, str]]) -> list[IndexManifestEntry]:
    """The index files after ``changes`` land on a snapshot whose index files are ``entries``
    and whose data files are ``live_files`` ((partition, bucket, name)). CommitConflictError
    when a commit since the read removed a file whose vector changes (a compaction or rewrite
    of it), replaced an index file the change replaces, or gave a changed file a vector in
    another index file (a concurrent delete): the rows marked would be lost or marked twice."""
    by_name = {(e.partition, e.bucket, e.file.file_name) for e in entries}
    deleted = set()
    for change in changes:
        gone = sorted(name for name in change.changed if (change.partition, change.bucket, name) not in live_files)
        if gone:
            raise CommitConflictError(f"data files {gone[:3]} were compacted or rewritten by another commit after "
                                      "this one read their rows; run the operation again", table=ctx.name)
        replaced = {(change.partition, change.bucket, f.file_name) for f in change.deleted}
        if replaced - by_name:
            raise CommitConflictError("another commit changed the deletion vectors this one extends; run the "
                                      "operation again", table=ctx.name)
        deleted |= replaced
    after = [e for e in entries if (e.partition, e.bucket, e.file.file_name) not in deleted]
    marked = {(c.partition, c.bucket, name) for c in changes for name in c.changed}
    for e in after:
        if any((e.partition, e.bucket, r.data_file) in marked for r in e.file.ranges or ()):
            raise CommitConflictError(f"another commit marked rows deleted in the files this one changes (index "
                                      f"file {e.file.file_name}) since it read them; run the operation again",
                                      table=ctx.name)
    return after + [IndexManifestEntry(FileKind.ADD, c.partition, c.bucket, c.added)
                    for c in changes if c.added is not None]


def compacted(ctx: TableContext, index_files: Sequence[IndexFileMeta],
              removed: Collection[str]) -> tuple[tuple[IndexFileMeta, ...], tuple[IndexFileMeta, ...]]:
    """The index files a compaction adds and deletes in a bucket whose deletion-vector index
    files are ``index_files`` when it rewrites the data files named ``removed`` (their rows
    read without the deleted ones): each index file holding a vector of one of them is replaced
    by one holding its other vectors (Paimon's ``notifyRemovedDeletionVector``)."""
    touched = tuple(f for f in index_files if any(r.data_file in removed for r in f.ranges or ()))
    if not touched:
        return (), ()
    kept = {name: v for name, v in deletion_vectors.bucket_vectors(ctx, touched).items() if name not in removed}
    added = write_vectors.write_index_file(ctx, kept)
    return (() if added is None else (added,)), touched


def check_compacted(ctx: TableContext, entries: Sequence[IndexManifestEntry],
                    removed: Collection[tuple[bytes, int, str]]) -> None:
    """CommitConflictError when an index file left after a compaction holds a vector of a data
    file it removes ((partition, bucket, name)): a delete marked rows of it after the
    compaction read it, and the compaction's output still holds them."""
    for e in entries:
        if any((e.partition, e.bucket, r.data_file) in removed for r in e.file.ranges or ()):
            raise CommitConflictError(f"a concurrent delete marked rows of files bucket {e.bucket} compacts; this "
                                      "commit's compaction is void", table=ctx.name)
