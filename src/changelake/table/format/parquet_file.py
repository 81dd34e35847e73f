"""Parquet data files: the writer (in Paimon's layout, ``parquet_layout``) and the reads that use
Parquet's footer (row-group ranges, statistics, dictionary pages)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.errors import CorruptMetadataError, StorageError
from changelake.table.format import kv, parquet_layout
from changelake.table.format.parquet_footer import Int96Sink
from changelake.table.io.cache import ManifestCache

ROW_GROUP_ROWS = 128 * 1024


class ParquetWriter:
    """A Parquet data file being written to ``target``."""

    def __init__(self, target: pa.NativeFile, schema: pa.Schema, *, compression: str, zstd_level: int,
                 dictionary: bool) -> None:
        self.int96, self.schema = _layout(schema)
        self.compression, self.zstd_level, self.dictionary = compression, zstd_level, dictionary
        self.target = target
        # INT96 columns go to pyarrow as FIXED_LEN_BYTE_ARRAY(12), and the sink retypes them in
        # the footer; the Arrow schema pyarrow would store in the file names that stand-in
        # type, so such a file stores none (as Paimon's files store none).
        self.sink: pa.NativeFile | Int96Sink = Int96Sink(target, self.int96) if self.int96 else target
        # made at the first write: which columns get dictionaries depends on the rows
        self.writer: pq.ParquetWriter | None = None

    def _writer(self, first: pa.Table | None) -> pq.ParquetWriter:
        if self.writer is None:
            # The writer's buffers (pages, their compressed copies) live as long as the file: from
            # the system allocator, which reuses them for the next file, where Arrow's default
            # (mimalloc) hands freed pages back to the kernel, which zeroes them again on reuse.
            # Statistics of the row kinds tell a merge-free read when a file holds no retraction
            # (Paimon's and pypaimon's writers keep statistics of every column).
            encoded = dictionary_columns(self.schema, first) if self.dictionary else False
            self.writer = pq.ParquetWriter(self.sink, self.schema, compression=self.compression,
                                           compression_level=self.zstd_level if self.compression == "zstd" else None,
                                           write_statistics=[kv.VALUE_KIND], store_schema=not self.int96,
                                           use_dictionary=encoded, memory_pool=pa.system_memory_pool())
        return self.writer

    def write(self, table: pa.Table) -> None:
        stored = parquet_layout.to_stored(table, self.schema)
        self._writer(stored).write_table(stored, row_group_size=ROW_GROUP_ROWS)

    def tell(self) -> int:
        return int(self.sink.tell())

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> int:
        writer = self._writer(None)
        if isinstance(self.sink, Int96Sink):
            self.sink.hold()
            writer.close()
            self.sink.release()
        else:
            writer.close()
        return int(self.target.tell())

    def abandon(self) -> None:
        if self.writer is not None:
            self.writer.close()


# Parquet's Java writer (which Paimon's writes through) keeps a column's dictionary only while
# its page stays within this size (parquet.dictionary.page.size's default)
DICTIONARY_PAGE_BYTES = 1024 * 1024


def dictionary_columns(schema: pa.Schema, first: pa.Table | None) -> list[str]:
    """The columns written dictionary-encoded, as Paimon's writer (Parquet's Java writer with
    ``parquet.enable.dictionary``, true by default) leaves them: it encodes every column, and
    falls back to plain values in a column whose dictionary and indices take no less than its
    plain values. Strings and bytes (whose pages hold long values) and the row kinds keep their
    dictionary (a merge-free read drops retractions fastest from runs of indices); an integer
    or date column keeps it where the ``first`` rows written show it certainly pays: their
    range of values bounds the dictionary and the indices' width. Cheaper to decode, and
    smaller: indices of a few bits instead of compressed 4 or 8-byte values (a column of 1,000
    distinct integers decodes in about 40% less time); nothing is hashed to decide."""
    encoded = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_binary(f.type)
               or pa.types.is_large_string(f.type) or f.name == kv.VALUE_KIND]
    if first is None or not first.num_rows:
        return encoded
    for field in schema:
        if field.name not in encoded and (pa.types.is_integer(field.type) or pa.types.is_date32(field.type)) \
                and _dictionary_pays(first.column(field.name), 8 if field.type.bit_width == 64 else 4):
            encoded.append(field.name)
    return encoded


def _dictionary_pays(column: pa.ChunkedArray, width: int) -> bool:
    """Whether a dictionary of ``column`` (values of ``width`` bytes in Parquet) and its
    indices take fewer bytes than its plain values, judged by the range of the values."""
    values = column.cast(pa.int32()) if pa.types.is_date32(column.type) else column
    bounds = pc.min_max(values)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None:
        return False
    distinct: int = min(high - low + 1, len(column))  # at most this many values in the dictionary
    indices = len(column) * max(1, (distinct - 1).bit_length()) // 8
    return distinct * width <= DICTIONARY_PAGE_BYTES and indices + distinct * width < len(column) * width


@functools.lru_cache(maxsize=256)
def _layout(schema: pa.Schema) -> tuple[tuple[int, ...], pa.Schema]:
    """The INT96 leaves and stored schema of files of ``schema``, worked out once a schema (a
    flush writes a small file per bucket, each with the same schema)."""
    # BINARY(n) and TIMESTAMP(7..9) columns are stored as Paimon stores them (parquet_layout)
    return tuple(parquet_layout.int96_leaves(schema)), parquet_layout.stored_schema(schema)


def opened(source: pa.NativeFile, path: str, **options: Any) -> pq.ParquetFile:
    """``source`` read as Parquet; content that is not is CorruptMetadataError naming the file."""
    try:
        return pq.ParquetFile(source, **options)
    except StorageError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file is not Parquet: {exc}", file=path) from None


@dataclass(frozen=True)
class Footer:
    """What reads use of a Parquet file's footer, worked out once a file (see :func:`footer`)."""

    metadata: pq.FileMetaData
    names: tuple[str, ...]  # the file's columns, as Arrow reads them
    # string and binary columns whose every page holds dictionary indices
    dictionary_only: tuple[str, ...]
    # the statistics of every row group show no -U/-D row (only +I rows, or only +U rows)
    no_retractions: bool


# Parsed footers by (filesystem, path, size): a data file never changes once written (its name
# is unique; the size guards a path written again), so reads open a file once without parsing
# its footer again. Bounded by the footers' serialized bytes (many row groups weigh more).
FOOTERS = ManifestCache(max_files=1 << 20, max_bytes=8 * 1024 * 1024, weigh=lambda f: f.metadata.serialized_size)


def footer(source: pa.NativeFile, path: str, protocol: str) -> Footer:
    """The footer of the Parquet file ``source`` (read from it, or cached)."""
    return FOOTERS.get((protocol, path, source.size()), lambda: footer_of(opened(source, path)))


def footer_of(parquet: pq.ParquetFile) -> Footer:
    """What reads use of ``parquet``'s footer."""
    return Footer(parquet.metadata, tuple(parquet.schema_arrow.names), tuple(_dictionary_only(parquet)),
                  _no_retractions(parquet.metadata))


def _no_retractions(metadata: pq.FileMetaData) -> bool:
    if not metadata.num_row_groups:
        return False
    first = metadata.row_group(0)
    index = next((i for i in range(first.num_columns) if first.column(i).path_in_schema == kv.VALUE_KIND), None)
    if index is None:
        return False
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            return False
        if not (stats.max == kv.INSERT or stats.min == stats.max == kv.UPDATE_AFTER):
            return False
    return True


def kinds_if_retracting(found: Footer, columns: Sequence[str]) -> list[str]:
    """``columns`` without ``_VALUE_KIND`` when the footer's statistics show that no row group
    holds a -U/-D row (only +I rows, or only +U rows), and other columns are read (Arrow loses
    the row count of a table without columns)."""
    names = list(columns)
    if kv.VALUE_KIND not in names or len(names) == 1 or not found.no_retractions:
        return names
    return [n for n in names if n != kv.VALUE_KIND]


def dictionary_only_columns(found: Footer, columns: list[str] | None) -> list[str]:
    """The string and binary columns (of ``columns``; None: all) whose every page holds
    dictionary indices, none having fallen back to plain values."""
    return [n for n in found.dictionary_only if columns is None or n in columns]


def _dictionary_only(parquet: pq.ParquetFile) -> list[str]:
    """The string and binary columns whose every page holds dictionary indices. Parquet's
    footer does not say so in a form pyarrow shows; the sizes tell: pages of indices take at
    most 4 bytes a value (compressed or not), plain strings more. A wrong guess costs time,
    not results."""
    metadata = parquet.metadata
    if not metadata.num_row_groups:
        return []
    first = metadata.row_group(0)
    index = {first.column(i).path_in_schema: i for i in range(first.num_columns)}
    return [field.name for field in parquet.schema_arrow
            if field.name in index and (pa.types.is_string(field.type) or pa.types.is_binary(field.type))
            and all(_indices_only(metadata.row_group(g).column(index[field.name]))
                    for g in range(metadata.num_row_groups))]


def _indices_only(chunk: pq.ColumnChunkMetaData) -> bool:
    start = chunk.dictionary_page_offset
    if not chunk.has_dictionary_page or start is None or not 0 <= start < chunk.data_page_offset:
        return False
    data_pages: int = chunk.total_compressed_size - (chunk.data_page_offset - start)
    return data_pages <= 4 * int(chunk.num_values)


def read_rows(parquet: pq.ParquetFile, columns: list[str] | None, rows: tuple[int, int]) -> pa.Table:
    """Rows [start, stop) of a Parquet file, reading only the row groups that overlap them."""
    start, stop = rows
    groups, first, position = [], None, 0
    for index in range(parquet.metadata.num_row_groups):
        size = parquet.metadata.row_group(index).num_rows
        if position < stop and position + size > start:
            groups.append(index)
            first = position if first is None else first
        position += size
    if first is None:
        empty = parquet.schema_arrow.empty_table()
        return empty if columns is None else empty.select(columns)
    return parquet.read_row_groups(groups, columns=columns).slice(start - first, stop - start)
