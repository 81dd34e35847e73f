"""The deletion vectors of a snapshot: its index manifest's ``DELETION_VECTORS`` index files,
and each data file's vector read from them, through a cache of immutable files."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyroaring import BitMap

from changelake.table.context import TableContext
from changelake.table.format import deletion_vector, index_manifest
from changelake.table.format.deletion_vector import DeletionVectorMeta
from changelake.table.format.index_manifest import IndexFileMeta, IndexManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.io.cache import ManifestCache

# Index manifests and index files never change once written; parsed manifests and the bytes
# of index files are kept here (a big table's index files weigh MBs each: bounded by bytes).
INDEX_CACHE = ManifestCache(max_files=256)
INDEX_FILE_CACHE = ManifestCache(max_files=4096, max_bytes=64 * 1024 * 1024, weigh=len)


@dataclass(frozen=True)
class DeletionFile:
    """Where a data file's deletion vector is: an index file's path and the vector's range
    (Paimon's DeletionFile), small enough to travel in a split."""

    path: str
    meta: DeletionVectorMeta


def index_path(ctx: TableContext, f: IndexFileMeta) -> str:
    """Where an index file lies: ``index/<name>``, or its external path."""
    return f.external_path if f.external_path is not None else ctx.paths.index(f.file_name)


def index_entries(ctx: TableContext, snapshot: Snapshot) -> list[IndexManifestEntry]:
    """Every index file of the snapshot ([] without an index manifest)."""
    if snapshot.index_manifest is None:
        return []
    path = ctx.paths.manifest(snapshot.index_manifest)
    return INDEX_CACHE.get((ctx.file_io.protocol, path),
                           lambda: index_manifest.live(index_manifest.read(ctx.file_io, path)))


def vector_files_by_bucket(entries: Iterable[IndexManifestEntry]) -> dict[tuple[bytes, int], list[IndexFileMeta]]:
    """The deletion-vector index files of each (serialized partition, bucket)."""
    buckets: dict[tuple[bytes, int], list[IndexFileMeta]] = defaultdict(list)
    for e in entries:
        if e.file.index_type == index_manifest.DELETION_VECTORS:
            buckets[(e.partition, e.bucket)].append(e.file)
    return buckets


def deletion_files(ctx: TableContext, files: Iterable[IndexFileMeta]) -> dict[str, DeletionFile]:
    """The deletion file of each data file that ``files`` (index files of one bucket) hold a
    vector for, by data file name."""
    found = {}
    for f in files:
        path = index_path(ctx, f)
        for meta in f.ranges or ():
            found[meta.data_file] = DeletionFile(path, meta)
    return found


def _index_bytes(ctx: TableContext, path: str) -> bytes:
    return INDEX_FILE_CACHE.get((ctx.file_io.protocol, path), lambda: ctx.file_io.read_bytes(path))


def remember_index_file(ctx: TableContext, path: str, data: bytes) -> None:
    """Keep the bytes of an index file this process just wrote: the next commit of the
    writer reads its bucket's vectors from them, not from storage."""
    INDEX_FILE_CACHE.put((ctx.file_io.protocol, path), data)


def read_vector(ctx: TableContext, deletion_file: DeletionFile) -> BitMap:
    """The deleted positions a deletion file holds."""
    return deletion_vector.deserialize(_index_bytes(ctx, deletion_file.path), deletion_file.meta, deletion_file.path)


def bucket_vectors(ctx: TableContext, files: Iterable[IndexFileMeta]) -> dict[str, BitMap]:
    """Every data file's deletion vector in a bucket's index files (copies: callers may add)."""
    return {name: BitMap(read_vector(ctx, d)) for name, d in deletion_files(ctx, files).items()}


def index_files_of(ctx: TableContext, snapshot: Snapshot) -> tuple[set[str], set[str]]:
    """The index manifest (by name) and the index files (full paths) a snapshot names."""
    if snapshot.index_manifest is None:
        return set(), set()
    return {snapshot.index_manifest}, {index_path(ctx, e.file) for e in index_entries(ctx, snapshot)}


def snapshot_vectors(ctx: TableContext, snapshot: Snapshot | None) -> Mapping[tuple[bytes, int], list[IndexFileMeta]]:
    """The deletion-vector index files of each bucket of ``snapshot`` (None: no snapshot)."""
    return {} if snapshot is None else vector_files_by_bucket(index_entries(ctx, snapshot))
