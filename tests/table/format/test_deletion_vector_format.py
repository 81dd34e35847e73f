"""Deletion vectors' bytes as Paimon writes them (BitmapDeletionVector, DeletionVectorIndexFileWriter)
and the index manifest's Avro records (IndexManifestEntry)."""

from __future__ import annotations

import io
import struct
import zlib

import fastavro
import numpy as np
import pytest
from pyroaring import BitMap

from changelake.errors import CorruptMetadataError
from changelake.table.format import deletion_vector, index_manifest
from changelake.table.format.deletion_vector import DeletionVectorMeta
from changelake.table.format.index_manifest import IndexFileMeta, IndexManifestEntry
from changelake.table.format.manifest import FileKind


def test_a_vector_is_size_magic_portable_bitmap_and_crc() -> None:
    bitmap = BitMap([0, 3, 70_000])
    data = deletion_vector.serialize(bitmap)
    (size,) = struct.unpack(">i", data[:4])
    body = data[4:4 + size]
    assert struct.unpack(">i", body[:4]) == (1581511376,)
    assert body[4:] == bitmap.serialize()
    assert body[4:6] == bytes([0x3A, 0x30])  # RoaringBitmap's portable cookie (no run containers)
    assert struct.unpack(">I", data[4 + size:]) == (zlib.crc32(body),)
    assert len(data) == size + 8


def test_index_file_starts_with_its_version_and_ranges_point_at_each_vector() -> None:
    vectors = {"b.parquet": BitMap([5]), "a.parquet": BitMap(range(10)), "empty.parquet": BitMap()}
    data, ranges = deletion_vector.index_file_bytes(vectors)
    assert data[0] == 1
    assert [r.data_file for r in ranges] == ["a.parquet", "b.parquet"]  # empty vectors are left out
    assert ranges[0].offset == 1 and ranges[1].offset == 1 + ranges[0].length + 8
    assert [r.cardinality for r in ranges] == [10, 1]
    for r in ranges:
        assert deletion_vector.deserialize(data, r, "index-x") == vectors[r.data_file]


def test_a_damaged_vector_is_refused() -> None:
    data, (meta,) = deletion_vector.index_file_bytes({"a": BitMap([1, 2])})
    damaged = bytearray(data)
    damaged[-6] ^= 0xFF  # a byte of the bitmap: the CRC no longer matches
    with pytest.raises(CorruptMetadataError, match="checksum"):
        deletion_vector.deserialize(bytes(damaged), meta, "index-x")
    with pytest.raises(CorruptMetadataError, match="corrupt"):
        deletion_vector.deserialize(data, DeletionVectorMeta("a", meta.offset, meta.length + 1, 2), "index-x")


def test_keep_mask_drops_the_marked_positions_of_a_window() -> None:
    assert deletion_vector.keep_mask(None, 3) is None
    assert deletion_vector.keep_mask(BitMap([7]), 3) is None
    mask = deletion_vector.keep_mask(BitMap([1, 4, 9]), 5)
    assert mask is not None and mask.tolist() == [True, False, True, True, False]
    window = deletion_vector.keep_mask(BitMap([1, 4, 9]), 5, start=4)
    assert window is not None and window.tolist() == [False, True, True, True, True]


def test_index_manifest_records_have_paimons_fields_and_round_trip() -> None:
    meta = DeletionVectorMeta("data-1.parquet", 1, 22, 3)
    entry = IndexManifestEntry(FileKind.ADD, b"\x00" * 8, 2,
                               IndexFileMeta(index_manifest.DELETION_VECTORS, "index-u-0", 31, 1, (meta,)))
    data = index_manifest.encode([entry], "zstd")
    reader = fastavro.reader(io.BytesIO(data))
    names = [f["name"] for f in reader.writer_schema["fields"]]  # type: ignore[index]
    assert names == ["_VERSION", "_KIND", "_PARTITION", "_BUCKET", "_INDEX_TYPE", "_FILE_NAME", "_FILE_SIZE",
                     "_ROW_COUNT", "_DELETIONS_VECTORS_RANGES", "_EXTERNAL_PATH", "_GLOBAL_INDEX"]
    (record,) = list(reader)
    assert record["_DELETIONS_VECTORS_RANGES"] == [{"f0": "data-1.parquet", "f1": 1, "f2": 22, "_CARDINALITY": 3}]
    assert IndexManifestEntry.from_avro(record) == entry  # type: ignore[arg-type]
    deleted = IndexManifestEntry(FileKind.DELETE, entry.partition, entry.bucket, entry.file)
    assert index_manifest.live([entry, deleted]) == []


def test_bitmap_of_positions_round_trips_in_order_without_repeats() -> None:
    bitmap = deletion_vector.bitmap_of(np.array([9, 2, 9, 0, 70000], dtype=np.int64))
    assert bitmap == BitMap([0, 2, 9, 70000])
    assert deletion_vector.positions_of(bitmap).tolist() == [0, 2, 9, 70000]
    keep = deletion_vector.keep_mask(bitmap, 4, start=7)
    assert keep is not None and keep.tolist() == [True, True, False, True]
