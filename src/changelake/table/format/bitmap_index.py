"""Paimon's bitmap file index (``BitmapFileIndex``): per distinct value of a column, the
positions of its rows in the data file as a Roaring bitmap.

Written in version 1, the layout every Paimon reader takes (Java Paimon 0.9 knows no other):
the version byte, the row count, the number of distinct non-null values, whether there are
nulls (and then the nulls' offset), then each value with its offset, then the bitmaps
(RoaringBitmap's portable format). A value of one row stores ``-1 - row`` as its offset and no
bitmap; the nulls' bitmap, when there are more than one, comes first. Values are keyed as
Java writes them: a string as its UTF-8 length (int) and bytes, an integer, date or time
(milliseconds) as a big-endian int of its width, a timestamp as a long of milliseconds
(precision up to 3) or microseconds. Version 2 (Paimon 1.x's default, values in index blocks)
is read too."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import CorruptMetadataError
from changelake.table.format import bloom_filter, deletion_vector

VERSION_1 = 1
VERSION_2 = 2
_INT = struct.Struct(">i")


def supports(t: pa.DataType) -> bool:
    """Whether Paimon's bitmap index keys a column of type ``t`` (strings, integers, dates,
    times, timestamps)."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)
                or pa.types.is_date32(t) or pa.types.is_time(t) or pa.types.is_timestamp(t))


def _width(t: pa.DataType) -> int:
    """Bytes of a non-string key of type ``t``: its integer's width; 4 for dates and times; 8
    for timestamps (a long)."""
    if pa.types.is_integer(t):
        return int(t.bit_width // 8)
    return 8 if pa.types.is_timestamp(t) else 4


def _keys(values: pa.Array) -> pa.Array:
    """The values as the keys Java compares: strings as they are, the rest as Java integers."""
    t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return values
    longs = bloom_filter.java_longs(pc.drop_null(values)) if values.null_count else bloom_filter.java_longs(values)
    if values.null_count:
        filled = np.zeros(len(values), np.int64)
        filled[np.asarray(values.is_valid())] = longs
        return pa.array(filled, mask=np.asarray(values.is_null()))
    return pa.array(longs)


def _encoded(keys: pa.Array, t: pa.DataType) -> list[bytes]:
    """Each key's bytes in the index's meta."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [_INT.pack(len(b)) + b for b in (s.encode() for s in keys.to_pylist())]
    width = _width(t)
    raw = keys.to_numpy(zero_copy_only=False).astype(f">i{width}")
    return [raw[i:i + 1].tobytes() for i in range(len(raw))]


def _entries(keys: pa.Array, t: pa.DataType, offsets: np.ndarray) -> bytes:
    """The meta's value entries: each key's bytes and its offset, fixed-width keys at once."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        pairs = zip(_encoded(keys, t), offsets.tolist(), strict=True)
        return b"".join(key + _INT.pack(offset) for key, offset in pairs)
    entries = np.empty(len(keys), np.dtype([("key", f">i{_width(t)}"), ("offset", ">i4")]))
    entries["key"] = keys.to_numpy(zero_copy_only=False)
    entries["offset"] = offsets
    return entries.tobytes()


def serialize(values: pa.Array) -> bytes:
    """The version-1 index of a column's values (every row of the data file, in order). Rows
    are grouped by value with one stable sort; only values of more than one row get a bitmap."""
    encoded = pc.dictionary_encode(_keys(values))
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    distinct = len(encoded.dictionary)
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes + 1, minlength=distinct + 1)  # the nulls' first, then each value's
    starts = np.cumsum(counts) - counts
    nulls = order[:counts[0]]
    bodies = []
    head = [bytes([VERSION_1]), _INT.pack(len(values)), _INT.pack(distinct), bytes([1 if nulls.size else 0])]
    if nulls.size == 1:
        head.append(_INT.pack(-1 - int(nulls[0])))
    elif nulls.size:
        head.append(_INT.pack(0))
        bodies.append(deletion_vector.bitmap_of(nulls).serialize())
    value_counts, value_starts = counts[1:], starts[1:]
    offsets = -1 - order[value_starts].astype(np.int64)  # a value of one row: -1 - its row
    offset = sum(len(b) for b in bodies)
    for value in np.flatnonzero(value_counts > 1).tolist():
        bitmap = deletion_vector.bitmap_of(order[value_starts[value]:value_starts[value] + value_counts[value]])
        bodies.append(bitmap.serialize())
        offsets[value] = offset
        offset += len(bodies[-1])
    return b"".join([*head, _entries(encoded.dictionary, values.type, offsets), *bodies])


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def int32(self) -> int:
        value: int = _INT.unpack_from(self.data, self.at)[0]
        self.at += 4
        return value

    def byte(self) -> int:
        self.at += 1
        return self.data[self.at - 1]

    def key(self, t: pa.DataType) -> bytes:
        """One key's bytes as :func:`_encoded` writes them."""
        start = self.at
        self.at += 4 + self.int32() if pa.types.is_string(t) or pa.types.is_large_string(t) else _width(t)
        return self.data[start:self.at]


def _stored_keys(index: bytes, t: pa.DataType) -> Iterator[bytes]:
    """The encoded keys of a version-1 or version-2 index."""
    cursor = _Cursor(index)
    version = cursor.byte()
    if version not in (VERSION_1, VERSION_2):
        raise CorruptMetadataError(f"bitmap file index of version {version}; changelake reads 1 and 2")
    cursor.int32()  # rows
    distinct = cursor.int32()
    has_nulls = cursor.byte()
    if has_nulls:
        cursor.int32()
        if version == VERSION_2:
            cursor.int32()
    if version == VERSION_1:
        for _ in range(distinct):
            yield cursor.key(t)
            cursor.int32()
        return
    blocks = cursor.int32()
    for _ in range(blocks):  # each block's first key and offset: its entries follow the body offset
        cursor.key(t)
        cursor.int32()
    cursor.int32()
    for _ in range(blocks):
        for _ in range(cursor.int32()):
            yield cursor.key(t)
            cursor.int32()
            cursor.int32()


def may_contain(index: bytes, values: pa.Array) -> bool:
    """Whether the index holds rows of one of ``values`` (non-null, in the column's type)."""
    try:
        wanted = set(_encoded(_keys(values), values.type))
        return any(key in wanted for key in _stored_keys(index, values.type))
    except (struct.error, IndexError):
        raise CorruptMetadataError("bitmap file index is truncated") from None
