"""Data-file indexes as Paimon writes them (``FileIndexFormat``, ``DataFileIndexWriter``): per
data file, one index of the columns named by ``file-index.<kind>.columns`` (kind
``bloom-filter`` or ``bitmap``), embedded in the file's manifest entry
(``_EMBEDDED_FILE_INDEX``) up to ``file-index.in-manifest-threshold`` bytes, else written
beside the data file as ``<data file name>.index`` and listed in its ``_EXTRA_FILES``.

Layout (big-endian): the magic 1493475289347502 (long), version 1 (int), the head's length
(int, counted from the file's start), the number of columns (int); per column its name (Java's
``writeUTF``), the number of its indexes (int) and per index its kind's name, the absolute
offset of its body (-1 for an index of no rows) and the body's length; then a redundant length
0 (int) and the bodies, in head order. A primary-key table's files index their value columns,
under the table's names (as Paimon 1.x's ``KeyValueDataFileWriter``).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from changelake.errors import CorruptMetadataError, OptionError
from changelake.options import TableOptions
from changelake.table.format import bitmap_index, bloom_filter

MAGIC = 1493475289347502
VERSION = 1
INDEX_SUFFIX = ".index"
_EMPTY = -1
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")


class IndexKind(enum.StrEnum):
    """The index kinds changelake writes and reads (Paimon's ``FileIndexer`` identifiers)."""

    BLOOM_FILTER = "bloom-filter"
    BITMAP = "bitmap"


_COLUMNS_OPTION = {IndexKind.BLOOM_FILTER: "file-index.bloom-filter.columns",
                   IndexKind.BITMAP: "file-index.bitmap.columns"}
_BLOOM_PREFIX = "file-index.bloom-filter."  # a bloom filter's sizing: file-index.bloom-filter.<column>.fpp / .items


@dataclass(frozen=True)
class ColumnIndex:
    """One index of one column, with a bloom filter's sizing."""

    column: str
    kind: IndexKind
    items: int = bloom_filter.DEFAULT_ITEMS
    fpp: float = bloom_filter.DEFAULT_FPP


@dataclass(frozen=True)
class IndexSpec:
    """The indexes each data file of a table gets, and up to what size one is embedded."""

    indexes: tuple[ColumnIndex, ...]
    in_manifest_threshold: int


def _bloom_setting(options: TableOptions, column: str, name: str, parse: type[int] | type[float],
                   default: float, fits: Callable[[Any], bool], needs: str) -> Any:
    """A bloom filter's ``items`` or ``fpp`` of ``column``: its option parsed, or the default."""
    key = f"{_BLOOM_PREFIX}{column}.{name}"
    text = options.raw.get(key)
    if text is None:
        return default
    try:
        value = parse(text)
    except ValueError:
        raise OptionError(f"has invalid value {text!r}", table=options.table, option=key) from None
    if not fits(value):
        raise OptionError(f"must be {needs}, got {text!r}", table=options.table, option=key)
    return value


def spec(options: TableOptions, schema: pa.Schema) -> IndexSpec | None:
    """The table's file indexes (None: none); OptionError naming the option for a column the
    table lacks, one whose type the kind cannot index, or a bad setting."""
    indexes = []
    listed = {IndexKind.BLOOM_FILTER: options.file_index_bloom_filter_columns,
              IndexKind.BITMAP: options.file_index_bitmap_columns}
    for kind, columns in listed.items():
        for column in columns:
            option = _COLUMNS_OPTION[kind]
            if column not in schema.names:
                raise OptionError(f"names column {column!r}, which the table does not have",
                                  table=options.table, option=option)
            t = schema.field(column).type
            if kind is IndexKind.BITMAP:
                if not bitmap_index.supports(t):
                    raise OptionError(f"names column {column!r} of type {t}, which a bitmap index cannot hold",
                                      table=options.table, option=option)
                indexes.append(ColumnIndex(column, kind))
                continue
            if not bloom_filter.supports(t):
                raise OptionError(f"names column {column!r} of type {t}, which a bloom filter cannot hold",
                                  table=options.table, option=option)
            items = _bloom_setting(options, column, "items", int, bloom_filter.DEFAULT_ITEMS, lambda v: v > 0,
                                   "a positive number")
            fpp = _bloom_setting(options, column, "fpp", float, bloom_filter.DEFAULT_FPP, lambda v: 0 < v < 1,
                                 "between 0 and 1")
            indexes.append(ColumnIndex(column, kind, items, fpp))
    if not indexes:
        return None
    return IndexSpec(tuple(indexes), options.file_index_in_manifest_threshold)


def check(options: TableOptions, schema: pa.Schema, keys: Collection[str] | None = None) -> None:
    """OptionError for file-index options (of ``keys``, the options set: None for all) naming
    a column the table lacks or cannot index, or sizing a bloom filter of a column that
    ``file-index.bloom-filter.columns`` does not name."""
    spec(options, schema)
    for key in sorted(options.raw if keys is None else keys):
        if key in options.raw and key.startswith(_BLOOM_PREFIX) and key != _COLUMNS_OPTION[IndexKind.BLOOM_FILTER]:
            column = key.removeprefix(_BLOOM_PREFIX).rpartition(".")[0]
            if column not in options.file_index_bloom_filter_columns:
                raise OptionError(f"sizes the bloom filter of column {column!r}, which "
                                  f"{_COLUMNS_OPTION[IndexKind.BLOOM_FILTER]} does not name",
                                  table=options.table, option=key)


def _java_utf(text: str) -> bytes:
    """``DataOutput.writeUTF``: a 2-byte length, then modified UTF-8 (NUL as two bytes, a
    supplementary character as its two surrogates' three bytes each)."""
    if text.isascii() and "\0" not in text:
        encoded = text.encode()
    else:
        units = text.encode("utf-16-be", "surrogatepass")
        encoded = b"".join(b"\xc0\x80" if u == 0 else chr(u).encode("utf-8", "surrogatepass")
                           for u in (int.from_bytes(units[i:i + 2], "big") for i in range(0, len(units), 2)))
    return _SHORT.pack(len(encoded)) + encoded


def _read_java_utf(data: bytes, at: int) -> tuple[str, int]:
    length = _SHORT.unpack_from(data, at)[0]
    raw = data[at + 2:at + 2 + length].replace(b"\xc0\x80", b"\0")
    text = raw.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass").decode("utf-16")
    return text, at + 2 + length


def serialize(indexes: Mapping[str, Mapping[str, bytes | None]]) -> bytes:
    """The index file of ``indexes`` (column -> kind -> body; None: an index of no rows)."""
    names = b"".join(_java_utf(c) + b"".join(_java_utf(k) for k in kinds) for c, kinds in indexes.items())
    entries = sum(len(kinds) for kinds in indexes.values())
    head_length = 8 + 4 + 4 + 4 + entries * 8 + len(indexes) * 4 + 4 + len(names)
    head = [_LONG.pack(MAGIC), _INT.pack(VERSION), _INT.pack(head_length), _INT.pack(len(indexes))]
    bodies: list[bytes] = []
    at = head_length
    for column, kinds in indexes.items():
        head += [_java_utf(column), _INT.pack(len(kinds))]
        for kind, body in kinds.items():
            head.append(_java_utf(kind))
            if body is None:
                head += [_INT.pack(_EMPTY), _INT.pack(0)]
            else:
                head += [_INT.pack(at), _INT.pack(len(body))]
                bodies.append(body)
                at += len(body)
    head.append(_INT.pack(0))
    return b"".join(head + bodies)


# Where each index's body lies in an index file (None: an index of no rows), by column and kind.
Layout = dict[str, dict[str, tuple[int, int] | None]]


def layout(read: Callable[[int, int], bytes]) -> Layout:
    """The head of an index file read by ``read(offset, length)``: two reads, of the fixed
    fields and of the rest of the head, whatever the bodies' size."""
    try:
        fixed = read(0, 16)
        if _LONG.unpack_from(fixed)[0] != MAGIC:
            raise CorruptMetadataError("file index does not start with Paimon's magic number")
        version, head_length = _INT.unpack_from(fixed, 8)[0], _INT.unpack_from(fixed, 12)[0]
        if version != VERSION:
            raise CorruptMetadataError(f"file index of version {version}; changelake reads version {VERSION}")
        head = read(16, head_length - 16)
        at = 4
        found: Layout = {}
        for _ in range(_INT.unpack_from(head)[0]):
            column, at = _read_java_utf(head, at)
            kinds = found.setdefault(column, {})
            count = _INT.unpack_from(head, at)[0]
            at += 4
            for _ in range(count):
                kind, at = _read_java_utf(head, at)
                start, length = _INT.unpack_from(head, at)[0], _INT.unpack_from(head, at + 4)[0]
                at += 8
                kinds[kind] = None if start == _EMPTY else (start, length)
        return found
    except (struct.error, UnicodeDecodeError, ValueError):
        raise CorruptMetadataError("file index is truncated or garbled") from None


def parse(data: bytes) -> dict[str, dict[str, bytes | None]]:
    """An index file's indexes (column -> kind -> body; None: an index of no rows)."""
    def read(offset: int, length: int) -> bytes:
        if offset + length > len(data) or length < 0:
            raise CorruptMetadataError("file index is truncated or garbled")
        return data[offset:offset + length]

    return {column: {kind: None if where is None else read(*where) for kind, where in kinds.items()}
            for column, kinds in layout(read).items()}


class IndexCollector:
    """The indexes of a data file being written, fed each chunk as it is written."""

    def __init__(self, spec: IndexSpec) -> None:
        self.spec = spec
        self.blooms = {i: bloom_filter.Builder(i.items, i.fpp)
                       for i in spec.indexes if i.kind is IndexKind.BLOOM_FILTER}
        self.bitmaps: dict[ColumnIndex, list[pa.Array]] = {i: [] for i in spec.indexes if i.kind is IndexKind.BITMAP}

    def add(self, chunk: pa.Table) -> None:
        for index, builder in self.blooms.items():
            for piece in chunk.column(index.column).chunks:
                builder.add(piece)
        for index, pieces in self.bitmaps.items():
            pieces.extend(chunk.column(index.column).chunks)

    def serialized(self) -> bytes:
        indexes: dict[str, dict[str, bytes | None]] = {}
        for index in self.spec.indexes:
            body: bytes | None
            if index.kind is IndexKind.BLOOM_FILTER:
                builder = self.blooms[index]
                body = builder.serialized() if builder.written else None
            else:
                pieces = self.bitmaps[index]
                body = bitmap_index.serialize(pa.concat_arrays(pieces)) if pieces else None
            indexes.setdefault(index.column, {})[index.kind.value] = body
        return serialize(indexes)


def may_contain(kind: str, body: bytes | None, values: pa.Array) -> bool:
    """Whether an index of ``kind`` may hold one of ``values`` (non-null, in the indexed
    column's type); True for a kind changelake does not know. An index of no rows holds none."""
    if body is None:
        return kind not in (IndexKind.BLOOM_FILTER, IndexKind.BITMAP)
    if kind == IndexKind.BLOOM_FILTER:
        return bloom_filter.may_contain(body, values)
    if kind == IndexKind.BITMAP:
        return bitmap_index.may_contain(body, values)
    return True


def index_file_name(data_file: str) -> str:
    """The name of a data file's index file, beside it."""
    return data_file + INDEX_SUFFIX


def index_files(extra_files: Sequence[str]) -> list[str]:
    """The index files among a data file's extra files."""
    return [name for name in extra_files if name.endswith(INDEX_SUFFIX)]
