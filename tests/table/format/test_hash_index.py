"""Paimon's HASH index files: big-endian int32 key hashes, nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from changelake.errors import CorruptMetadataError
from changelake.table.format import hash_index
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths


def test_hashes_are_big_endian_int32_as_java_writes_them() -> None:
    hashes = np.array([1, -1, 0x01020304, -(2**31)], dtype=np.int32)
    data = hash_index.encode(hashes)
    assert data == b"\x00\x00\x00\x01\xff\xff\xff\xff\x01\x02\x03\x04\x80\x00\x00\x00"
    assert hash_index.decode(data, table="db.t", path="p").tolist() == hashes.tolist()


def test_a_file_written_reads_back_and_its_meta_counts_hashes(tmp_path: Path) -> None:
    file_io, root = FileIO.for_url(str(tmp_path))
    paths = TablePaths(root)
    meta = hash_index.write(file_io, paths, hash_index.encode(np.array([7, 3, 5], dtype=np.int32)))
    assert (meta.index_type, meta.row_count, meta.file_size) == ("HASH", 3, 12)
    assert meta.file_name.startswith("index-") and meta.file_name.endswith("-0")
    assert hash_index.read(file_io, paths.index(meta.file_name), meta, table="db.t").tolist() == [7, 3, 5]


def test_a_torn_or_short_file_is_named(tmp_path: Path) -> None:
    file_io, root = FileIO.for_url(str(tmp_path))
    paths = TablePaths(root)
    meta = hash_index.write(file_io, paths, hash_index.encode(np.arange(4, dtype=np.int32)))
    path = paths.index(meta.file_name)
    Path(path).write_bytes(Path(path).read_bytes()[:7])
    with pytest.raises(CorruptMetadataError, match="not a whole number") as torn:
        hash_index.read(file_io, path, meta, table="db.t")
    assert meta.file_name in str(torn.value)
    Path(path).write_bytes(Path(path).read_bytes()[:4])
    with pytest.raises(CorruptMetadataError, match="holds 1 key hashes, its index manifest entry says 4"):
        hash_index.read(file_io, path, meta, table="db.t")


@pytest.mark.parametrize("source", ["whole", "missing", "short"])
def test_a_file_that_extends_the_last_one_holds_every_hash_whatever_the_last_file(tmp_path: Path, source: str) -> None:
    file_io, root = FileIO.for_url(str(tmp_path))
    paths = TablePaths(root)
    old = np.arange(1000, dtype=np.int32)
    last = hash_index.write(file_io, paths, hash_index.encode(old))
    last_path = paths.index(last.file_name)
    if source == "missing":  # expired meanwhile: the new file is written whole
        Path(last_path).unlink()
    elif source == "short":  # holds fewer bytes than promised: not copied from
        Path(last_path).write_bytes(Path(last_path).read_bytes()[:400])
    data = bytearray(hash_index.encode(old)) + hash_index.encode(np.array([-5, 2**31 - 1], dtype=np.int32))
    meta = hash_index.write(file_io, paths, memoryview(data), extends=(last_path, last.file_size))
    assert (meta.row_count, meta.file_size) == (1002, 4008)
    read = hash_index.read(file_io, paths.index(meta.file_name), meta, table="db.t")
    assert read.tolist() == [*range(1000), -5, 2**31 - 1]
