"""The formats of data files (Parquet, ORC, Avro) and what they share: the format of a file is
told by its name's extension, as Paimon tells it (``data-<uuid>-0.orc``), so a bucket may hold
files of every format (``file.format.per.level``, or a table whose ``file.format`` changed), and
each is read by its own. Each format's compression codec names differ; :func:`codec` maps
Paimon's ``file.compression`` to the format's as Paimon's writers do."""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from changelake.errors import CorruptMetadataError
from changelake.option_values import FileFormat

__all__ = ["FileFormat", "FormatWriter", "codec", "of_path"]


def of_path(path: str) -> FileFormat:
    """The format of the data file at ``path``, by its extension; CorruptMetadataError naming
    the file for an extension that names none."""
    extension = path.rsplit("/", 1)[-1].rpartition(".")[2].lower()
    try:
        return FileFormat(extension)
    except ValueError:
        raise CorruptMetadataError(f"data file has the unknown format extension {extension!r}",
                                   file=path) from None


# Paimon's file.compression (changelake's parsed names) to each format's codec: ORC's as
# pyarrow names them, Avro's as Avro's CodecFactory names them (Paimon's AvroFileFormat maps zstd
# to zstandard and hands other names to CodecFactory.fromString, which knows no lz4 or brotli;
# snappy needs the cramjam package fastavro lacks here, so it is refused rather than failing late).
_CODECS: dict[FileFormat, dict[str, str]] = {
    FileFormat.PARQUET: {c: c for c in ("zstd", "snappy", "gzip", "lz4", "none", "brotli")},
    FileFormat.ORC: {"zstd": "zstd", "snappy": "snappy", "gzip": "zlib", "lz4": "lz4", "none": "uncompressed"},
    FileFormat.AVRO: {"zstd": "zstandard", "gzip": "deflate", "none": "null"},
}


def codec(file_format: FileFormat, compression: str) -> str:
    """The codec name ``file_format`` writes ``compression`` with; ValueError saying which
    the format takes when it has none for it."""
    codecs = _CODECS[file_format]
    if compression not in codecs:
        raise ValueError(f"{file_format.value} data files are not written with {compression!r} "
                         f"(changelake writes them with {', '.join(codecs)})")
    return codecs[compression]


class FormatWriter(Protocol):
    """A data file being written in one format, straight to its place in the bucket."""

    def write(self, table: pa.Table) -> None:
        """Append rows (in the file's stored layout)."""

    def tell(self) -> int:
        """Bytes on the output so far (a writer buffering rows reports less)."""

    def flush(self) -> None:
        """Push what is written to the output, as a crash would leave it (no footer)."""

    def close(self) -> int:
        """Finish the file; its size in bytes."""

    def abandon(self) -> None:
        """Stop writing after a failure (the caller removes the file)."""
