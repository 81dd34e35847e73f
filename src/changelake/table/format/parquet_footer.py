"""INT96 leaf columns in the Parquet files pyarrow writes, by retyping their footer.

Apache Paimon writes TIMESTAMP(7..9) and TIMESTAMP_LTZ(7..9) as INT96 and 0..3 as INT64
millis, 4..6 as INT64 micros (``ParquetSchemaConverter.createTimestampWithLogicalType``); its
reader takes nothing else for them (``ParquetSplitReaderUtil`` wants INT96 above precision 6,
INT64 at or below). pyarrow writes INT96 for every timestamp column of a file or for none
(``use_deprecated_int96_timestamps`` is one flag of the whole writer). So a data file's
precision 7..9 columns are written as FIXED_LEN_BYTE_ARRAY(12) holding INT96's bytes, whose
pages are laid out as INT96's are (12 bytes a value, no logical type, no statistics), and
the footer then says INT96 for those leaves, in the schema and in every column chunk. Both
physical types are one-byte Thrift values (7 and 3), so the footer is changed in place: its
length, and every offset in the file, stay as they are.

The footer is Parquet's ``FileMetaData`` in Thrift's compact protocol; this module reads just
enough of it to find those bytes (``SchemaElement.type`` and ``ColumnMetaData.type``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import pyarrow as pa

# Thrift compact protocol types
_TRUE, _FALSE, _I8, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT, _UUID = range(1, 14)
# Parquet's physical types, as the zigzag varint bytes the compact protocol stores them in
_INT96 = 3
_FIXED_LEN_BYTE_ARRAY = 7
_MAGIC = b"PAR1"


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


class _Cursor:
    """Reads Thrift compact-protocol values from ``data`` at ``pos`` onwards."""

    def __init__(self, data: bytearray) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, type) of each field of a struct, up to its stop byte; the caller reads
        or skips each value before asking for the next field."""
        last = 0
        while header := self.byte():
            delta = header >> 4
            last = last + delta if delta else _zigzag(self.varint())
            yield last, header & 0x0F

    def list_header(self) -> tuple[int, int]:
        """(size, element type) of a list or set."""
        header = self.byte()
        size = header >> 4
        return (self.varint() if size == 15 else size), header & 0x0F

    def skip(self, kind: int, *, element: bool = False) -> None:
        """Pass over a value of ``kind`` (a boolean field's value is in its header; a boolean
        element of a list or map takes one byte)."""
        if kind in (_TRUE, _FALSE):
            self.pos += 1 if element else 0
        elif kind == _I8:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _UUID:
            self.pos += 16
        elif kind == _BINARY:
            size = self.varint()
            self.pos += size
        elif kind in (_LIST, _SET):
            size, inner = self.list_header()
            for _ in range(size):
                self.skip(inner, element=True)
        elif kind == _MAP:
            size = self.varint()
            if size:
                kinds = self.byte()
                for _ in range(size):
                    self.skip(kinds >> 4, element=True)
                    self.skip(kinds & 0x0F, element=True)
        elif kind == _STRUCT:
            for _, inner in self.fields():
                self.skip(inner)
        else:
            raise ValueError(f"Thrift compact type {kind} at byte {self.pos} of a Parquet footer")


def _i32_at(cursor: _Cursor) -> tuple[int, int]:
    """(position, value) of an i32 field's value."""
    at = cursor.pos
    return at, _zigzag(cursor.varint())


def _schema_leaf(cursor: _Cursor) -> tuple[int, int, int] | None:
    """A ``SchemaElement``: (position of its physical type, the type, its type_length) for a
    leaf, None for a group."""
    kind: tuple[int, int] | None = None
    length = 0
    for field, value_kind in cursor.fields():
        if field == 1 and value_kind == _I32:
            kind = _i32_at(cursor)
        elif field == 2 and value_kind == _I32:
            length = _i32_at(cursor)[1]
        else:
            cursor.skip(value_kind)
    return None if kind is None else (kind[0], kind[1], length)


def _column_types(cursor: _Cursor) -> list[tuple[int, int]]:
    """A ``RowGroup``: (position, value) of each of its column chunks' physical type."""
    types = []
    for field, kind in cursor.fields():
        if field != 1 or kind != _LIST:
            cursor.skip(kind)
            continue
        size, _ = cursor.list_header()
        for _ in range(size):  # ColumnChunk
            found = None
            for chunk_field, chunk_kind in cursor.fields():
                if chunk_field != 3 or chunk_kind != _STRUCT:
                    cursor.skip(chunk_kind)
                    continue
                for meta_field, meta_kind in cursor.fields():  # ColumnMetaData
                    if meta_field == 1 and meta_kind == _I32:
                        found = _i32_at(cursor)
                    else:
                        cursor.skip(meta_kind)
            if found is None:
                raise ValueError("a column chunk of a Parquet footer has no metadata")
            types.append(found)
    return types


def retype_int96(footer: bytearray, leaves: Sequence[int]) -> None:
    """Make the leaf columns at ``leaves`` (indices in the schema's depth-first leaf order,
    which is the column chunks' order) INT96 in a serialized ``FileMetaData``; each must be
    FIXED_LEN_BYTE_ARRAY(12)."""
    cursor = _Cursor(footer)
    schema: list[tuple[int, int, int]] = []
    row_groups: list[list[tuple[int, int]]] = []
    for field, kind in cursor.fields():
        if field == 2 and kind == _LIST:
            size, _ = cursor.list_header()
            schema += [leaf for _ in range(size) if (leaf := _schema_leaf(cursor)) is not None]
        elif field == 4 and kind == _LIST:
            size, _ = cursor.list_header()
            row_groups += [_column_types(cursor) for _ in range(size)]
        else:
            cursor.skip(kind)
    for index in leaves:
        at, physical, length = schema[index]
        if (physical, length) != (_FIXED_LEN_BYTE_ARRAY, 12):
            raise ValueError(f"Parquet leaf column {index} is of physical type {physical} ({length} bytes), "
                             "not FIXED_LEN_BYTE_ARRAY(12)")
        chunks = [group[index] for group in row_groups]
        if any(value != _FIXED_LEN_BYTE_ARRAY for _, value in chunks):
            raise ValueError(f"a column chunk of Parquet leaf column {index} disagrees with the schema")
        # zigzag(7) = 14 and zigzag(3) = 6: one varint byte each
        for position in [at, *(position for position, _ in chunks)]:
            footer[position] = 2 * _INT96


class Int96Sink:
    """A Parquet writer's sink that passes bytes on to ``target`` until :meth:`hold`, then
    keeps them (the rest of the file: the last pages, the footer, its length and the magic)
    until :meth:`release` writes them with the footer's ``leaves`` retyped as INT96."""

    def __init__(self, target: pa.NativeFile, leaves: Sequence[int]) -> None:
        self.target = target
        self.leaves = list(leaves)
        self.held: bytearray | None = None
        self.closed = False

    def write(self, data: bytes | memoryview) -> int:
        if self.held is None:
            self.target.write(data)
        else:
            self.held += data
        return len(data)

    def tell(self) -> int:
        return int(self.target.tell()) + (0 if self.held is None else len(self.held))

    def flush(self) -> None:
        self.target.flush()

    def writable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True  # the writer's end; :meth:`release` and the owner close the target

    def hold(self) -> None:
        """Keep what is written from now on."""
        self.held = bytearray()

    def release(self) -> None:
        """Write what was kept, the footer retyped."""
        if self.held is None or len(self.held) < 8 or self.held[-4:] != _MAGIC:
            raise ValueError("the Parquet writer did not end the file while its sink held the bytes")
        tail = self.held
        (length,) = struct.unpack("<i", tail[-8:-4])
        if length + 8 > len(tail):
            raise ValueError("a Parquet footer began before its sink held the bytes")
        footer = bytearray(tail[-8 - length:-8])
        retype_int96(footer, self.leaves)
        tail[-8 - length:-8] = footer
        self.held = None
        self.target.write(tail)
