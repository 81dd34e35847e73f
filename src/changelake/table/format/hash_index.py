"""Paimon's ``HASH`` index files (dynamic bucket mode): the int32 hashes of the keys one bucket
of one partition holds, big-endian, nothing else (Paimon's ``HashIndexFile``/``IntFileUtils``).
A snapshot's index manifest lists one such file per (partition, bucket), with the number of
hashes as its row count; a writer that adds keys to a bucket writes the bucket's whole file anew
and the new entry replaces the old one (Paimon's ``IndexManifestFileHandler``)."""

from __future__ import annotations

import uuid

import numpy as np

from changelake.errors import CorruptMetadataError
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.io.fileio import FileIO
from changelake.table.io.killpoints import KillPoint
from changelake.table.io.paths import TablePaths

HASH = "HASH"


def encode(hashes: np.ndarray) -> bytes:
    """A HASH index file's bytes: the hashes as big-endian int32."""
    return np.asarray(hashes, dtype=">i4").tobytes()


def decode(data: bytes, *, table: str, path: str) -> np.ndarray:
    """The hashes of a HASH index file (int32); CorruptMetadataError naming the file when its
    size is not a whole number of hashes."""
    if len(data) % 4:
        raise CorruptMetadataError(f"HASH index file has {len(data)} bytes, not a whole number of "
                                   "4-byte key hashes", table=table, file=path)
    return np.frombuffer(data, dtype=">i4").astype(np.int32)


def read(file_io: FileIO, path: str, meta: IndexFileMeta, *, table: str) -> np.ndarray:
    """The hashes of the HASH index file at ``path``; CorruptMetadataError naming the file when
    it is missing or does not hold the number of hashes its index manifest entry says."""
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise CorruptMetadataError("HASH index file listed in the index manifest is missing",
                                   table=table, file=path) from None
    hashes = decode(data, table=table, path=path)
    if len(hashes) != meta.row_count:
        raise CorruptMetadataError(f"HASH index file holds {len(hashes)} key hashes, its index manifest entry "
                                   f"says {meta.row_count}", table=table, file=path)
    return hashes


def write(file_io: FileIO, paths: TablePaths, data: bytes | memoryview, *,
          extends: tuple[str, int] | None = None) -> IndexFileMeta:
    """Write a bucket's encoded hashes (see :func:`encode`; in any order, as Paimon writes a hash
    map's) as a new HASH index file (``index/index-<uuid>-0``), described. ``extends`` (a file
    and its size) says that ``data`` starts with that file's bytes: a bucket's new file repeats
    its last one, and a local filesystem copies that part in the kernel."""
    name = f"index-{uuid.uuid4()}-0"
    file_io.write_bytes(paths.index(name), data, kill_point=KillPoint.HASH_INDEX, copied_from=extends)
    return IndexFileMeta(HASH, name, len(data), len(data) // 4)
