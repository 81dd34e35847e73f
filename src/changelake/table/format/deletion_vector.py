"""Deletion vectors as Paimon stores them: a 32-bit Roaring bitmap of deleted row positions per
data file, grouped per bucket into one index file.

Byte layout (Paimon's ``BitmapDeletionVector.serializeTo`` and ``DeletionVectorIndexFileWriter``):
an index file starts with the version byte ``1``; each vector follows as a big-endian int
``size``, then ``size`` bytes (the magic number 1581511376 as a big-endian int, then the bitmap
in RoaringBitmap's portable format), then the CRC-32 of those ``size`` bytes. A vector's range
(``DeletionVectorMeta``) is the offset of its ``size`` int and ``size`` itself.
"""

from __future__ import annotations

import array
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap

from changelake.errors import CorruptMetadataError

MAGIC_NUMBER = 1581511376
VERSION = 1
MAX_POSITION = 2**31 - 1  # a RoaringBitmap32 holds positions of files up to this many rows
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")


@dataclass(frozen=True)
class DeletionVectorMeta:
    """Where one data file's deletion vector lies in an index file (Paimon's DeletionVectorMeta:
    f0 the data file name, f1 the offset, f2 the length)."""

    data_file: str
    offset: int
    length: int
    cardinality: int | None


def serialize(bitmap: BitMap) -> bytes:
    """One vector: size, magic number and portable bitmap, CRC-32."""
    data = _INT.pack(MAGIC_NUMBER) + bitmap.serialize()
    return _INT.pack(len(data)) + data + _UINT.pack(zlib.crc32(data))


def index_file_bytes(vectors: Mapping[str, BitMap]) -> tuple[bytes, tuple[DeletionVectorMeta, ...]]:
    """An index file holding ``vectors`` (data file name -> deleted positions; empty ones are
    left out), with each vector's range, in data file name order."""
    chunks = [bytes([VERSION])]
    ranges = []
    offset = 1
    for name in sorted(vectors):
        bitmap = vectors[name]
        if not bitmap:
            continue
        chunk = serialize(bitmap)
        ranges.append(DeletionVectorMeta(name, offset, len(chunk) - 8, len(bitmap)))
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks), tuple(ranges)


def deserialize(data: bytes | memoryview, meta: DeletionVectorMeta, path: str) -> BitMap:
    """The vector ``meta`` locates in the bytes ``data`` of index file ``path``."""
    if not data or data[0] != VERSION:
        raise CorruptMetadataError(f"index file version {data[0] if data else None} is not {VERSION}", file=path)
    start = meta.offset
    (size,) = _INT.unpack_from(data, start)
    (magic,) = _INT.unpack_from(data, start + 4)
    if magic != MAGIC_NUMBER or size != meta.length or start + 8 + size > len(data):
        raise CorruptMetadataError(
            f"deletion vector of {meta.data_file} at {start} is corrupt (magic {magic}, size {size})", file=path)
    body = bytes(data[start + 4: start + 4 + size])
    (crc,) = _UINT.unpack_from(data, start + 4 + size)
    if zlib.crc32(body) != crc:
        raise CorruptMetadataError(f"deletion vector of {meta.data_file} fails its checksum", file=path)
    return BitMap.deserialize(body[4:])


def bitmap_of(positions: np.ndarray) -> BitMap:
    """The bitmap of row ``positions`` (any order, repeats allowed), built from their bytes at
    once (a numpy array would be iterated value by value)."""
    return BitMap(array.array("I", np.ascontiguousarray(positions, dtype=np.uint32).tobytes()))


def positions_of(bitmap: BitMap) -> np.ndarray:
    """The positions a bitmap holds, in order, as a uint32 array (no per-value copy)."""
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32)


def keep_mask(bitmap: BitMap | None, num_rows: int, start: int = 0) -> np.ndarray | None:
    """Which of rows ``start .. start + num_rows`` of a file survive its deletion vector (None:
    all of them), as a boolean array."""
    if not bitmap:
        return None
    deleted = positions_of(bitmap)
    if start or deleted[-1] >= num_rows:
        low, high = np.searchsorted(deleted, [start, start + num_rows])
        deleted = deleted[low:high] - np.uint32(start)
    if not len(deleted):
        return None
    keep = np.ones(num_rows, dtype=bool)
    keep[deleted] = False
    return keep
