"""Parquet footers are kept per file (parquet_file.FOOTERS): a file is read with its kept footer,
a path written again (another size) is read anew, the cache stays within its bytes, and
``dictionaries`` reads leave dictionary-only string columns encoded for the caller to decode."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from changelake.table.format import data_file, parquet_file
from changelake.table.io.cache import ManifestCache
from changelake.table.io.fileio import FileIO

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])


def _write(path: Path, rows: int) -> pa.Table:
    table = pa.table({"id": pa.array(range(rows), pa.int64()), "name": [f"n{i % 7}" for i in range(rows)]})
    pq.write_table(table, path)
    return table


def test_a_file_written_again_at_its_path_is_read_anew(tmp_path: Path) -> None:
    file_io, _ = FileIO.for_url(str(tmp_path))
    path = tmp_path / "f.parquet"
    first = _write(path, 100)
    assert data_file.read(file_io, str(path), SCHEMA).equals(first)
    assert data_file.read(file_io, str(path), SCHEMA).equals(first)  # with the kept footer
    second = _write(path, 2_000)
    assert data_file.read(file_io, str(path), SCHEMA).equals(second)


def test_dictionary_columns_come_back_encoded_and_decode_to_the_plain_read(tmp_path: Path) -> None:
    file_io, _ = FileIO.for_url(str(tmp_path))
    path = tmp_path / "f.parquet"
    written = _write(path, 1_000)
    encoded = data_file.read(file_io, str(path), SCHEMA, dictionaries=True)
    assert pa.types.is_dictionary(encoded.schema.field("name").type)
    assert data_file.decoded(encoded).equals(written)


def test_the_kept_footers_stay_within_their_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file_io, _ = FileIO.for_url(str(tmp_path))
    paths = [tmp_path / f"f{i}.parquet" for i in range(6)]
    for path in paths:
        _write(path, 10)
    footer_bytes = pq.ParquetFile(paths[0]).metadata.serialized_size
    footers = ManifestCache(max_files=1 << 20, max_bytes=3 * footer_bytes,
                            weigh=lambda f: f.metadata.serialized_size)
    monkeypatch.setattr(parquet_file, "FOOTERS", footers)
    for path in paths:
        data_file.read(file_io, str(path), SCHEMA)
    assert 0 < len(footers._files) <= 3
    assert footers.nbytes <= 3 * footer_bytes
