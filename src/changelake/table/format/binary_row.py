"""Paimon's BinaryRow: the byte layout of partition values, keys and stats.

A row is a header of ``ceil((arity + 8) / 64) * 8`` bytes (row kind, then null bits), one
8-byte little-endian slot per field, then a variable part. Fixed-size values sit in their
slot; strings and bytes of up to 7 bytes sit inline with ``0x80 | len`` in the slot's top
byte, longer ones (and high-precision decimals and timestamps) live in the variable part,
8-byte aligned, with ``offset << 32 | length`` in the slot.

Encoding is vectorized over whole Arrow columns (bucket hashing encodes every row);
decoding is for small metadata (partitions, min/max keys, stats).
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EXACT = decimal.Context(prec=80)  # decimal128 values need up to 38 digits, exactly


def header_size(arity: int) -> int:
    return ((arity + 63 + 8) // 64) * 8


@dataclass(frozen=True)
class EncodedRows:
    """Rows laid out back to back: row ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    data: np.ndarray
    offsets: np.ndarray

    def row(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()


def _is_compact_timestamp(t: pa.DataType) -> bool:
    return bool(t.unit in ("s", "ms"))


def _is_compact_decimal(t: pa.DataType) -> bool:
    return bool(t.precision <= 18)


def _slot_value(arr: pa.Array) -> np.ndarray:
    """The uint64 slot content of a fixed-size value column (nulls give 0)."""
    t = arr.type
    if pa.types.is_boolean(t):
        values = pc.fill_null(arr, False).to_numpy(zero_copy_only=False)
    elif pa.types.is_timestamp(t):
        values = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy() * (1000 if t.unit == "s" else 1)
    elif pa.types.is_date32(t) or pa.types.is_time32(t):
        values = pc.fill_null(arr.cast(pa.int32()), 0).to_numpy().view(np.uint32)
    elif pa.types.is_time64(t):
        values = (pc.fill_null(arr.cast(pa.int64()), 0).to_numpy() // 1000).astype(np.int32).view(np.uint32)
    elif pa.types.is_decimal(t):
        values = _decimal_words(arr)[:, 0]
    else:
        raw = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
        # Zero-extend narrow values: Java writes only the value's own bytes into the slot.
        values = raw.view(f"<u{raw.dtype.itemsize}")
    # int64 -> uint64 keeps the two's-complement bits; narrower unsigned views zero-extend.
    return np.asarray(values).astype(np.uint64)


def _decimal_words(arr: pa.Array) -> np.ndarray:
    """(n, 2) uint64 little-endian words of a decimal128 column's unscaled values."""
    arr = pc.fill_null(arr, pa.scalar(decimal.Decimal(0), arr.type))
    buf = arr.buffers()[1]
    words = np.frombuffer(buf, dtype="<u8", count=2 * (len(arr) + arr.offset))
    return words.reshape(-1, 2)[arr.offset :]


def _var_source(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, start, length) of every value of a string/binary column (nulls length 0)."""
    t = arr.type
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
        starts = (np.arange(len(arr), dtype=np.int64) + arr.offset) * width
        lengths = np.full(len(arr), width, dtype=np.int64)
    else:
        if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)
        else:
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)
        offsets = offsets[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
        data_buf = arr.buffers()[2]
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        starts = offsets[:-1]
        lengths = offsets[1:] - offsets[:-1]
    if arr.null_count:
        lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, lengths)
    return data, starts, lengths


def _decimal_var_source(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Big-endian minimal two's-complement bytes of each unscaled value (Java's toByteArray)."""
    words = _decimal_words(arr)
    n = len(words)
    big_endian = words.view(np.uint8).reshape(n, 16)[:, ::-1].copy()
    hi = words[:, 1].view(np.int64)
    negative = hi < 0
    magnitude = np.where(negative[:, None], ~words, words)
    bits = np.where(
        magnitude[:, 1] != 0,
        64 + _bit_length(magnitude[:, 1]),
        _bit_length(magnitude[:, 0]),
    )
    lengths = (bits // 8 + 1).astype(np.int64)
    if arr.null_count:
        lengths = np.where(arr.is_null().to_numpy(zero_copy_only=False), 0, lengths)
    starts = np.arange(n, dtype=np.int64) * 16 + (16 - lengths)
    return big_endian.reshape(-1), starts, lengths


def _bit_length(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values), dtype=np.int64)
    v = values.astype(np.uint64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = v >= (np.uint64(1) << np.uint64(shift))
        out += np.where(big, shift, 0)
        v = np.where(big, v >> np.uint64(shift), v)
    out += (v > 0).astype(np.int64)
    return out


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices into ``data`` of every byte of every value, and each byte's position
    within its value."""
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    within = np.arange(total, dtype=np.int64) - np.repeat(firsts, lengths)
    return np.repeat(starts, lengths) + within, within


def encode(columns: Sequence[pa.Array]) -> EncodedRows:
    """Encode the rows formed by ``columns`` (equal lengths, row kind +I) as BinaryRows."""
    arity = len(columns)
    n = len(columns[0]) if columns else 1
    head = header_size(arity)
    fixed_size = head + 8 * arity
    fixed = np.zeros((n, fixed_size // 8), dtype=np.uint64)
    # (slot, source bytes, start, bytes to copy, bytes reserved, low 32 bits of the slot)
    var_parts: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    var_len = np.zeros(n, dtype=np.int64)
    null_words = np.zeros((n, head // 8), dtype=np.uint64)
    for i, column in enumerate(columns):
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if isinstance(arr, pa.DictionaryArray):
            arr = arr.dictionary_decode()
        slot = head // 8 + i
        nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
        if nulls is not None:
            bit = i + 8
            null_words[:, bit // 64] |= np.where(nulls, np.uint64(1) << np.uint64(bit % 64), 0).astype(np.uint64)
        t = arr.type
        if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) \
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            data, starts, lengths = _var_source(arr)
            inline = lengths <= 7
            if nulls is not None:
                inline &= ~nulls
            fixed[:, slot] = _inline_slots(data, starts, lengths, inline)
            outline = ~inline if nulls is None else ~inline & ~nulls
            reserved = np.where(outline, (lengths + 7) // 8 * 8, 0)
            copied = np.where(outline, lengths, 0)
            var_parts.append((slot, data, starts, copied, reserved, copied))
            var_len += reserved
        elif pa.types.is_decimal(t) and not _is_compact_decimal(t):
            data, starts, lengths = _decimal_var_source(arr)
            reserved = np.full(n, 16, dtype=np.int64)
            var_parts.append((slot, data, starts, lengths, reserved, lengths))
            var_len += reserved
        elif pa.types.is_timestamp(t) and not _is_compact_timestamp(t):
            ints = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy().astype(np.int64)
            per_milli = 1000 if t.unit == "us" else 1_000_000
            millis = np.floor_divide(ints, per_milli)
            nanos = np.mod(ints, per_milli) * (1_000_000 // per_milli)
            if nulls is not None:
                nanos = np.where(nulls, 0, nanos)
            data = millis.astype("<i8").view(np.uint8)
            starts = np.arange(n, dtype=np.int64) * 8
            lengths = np.full(n, 8, dtype=np.int64)
            var_parts.append((slot, data, starts, lengths, lengths.copy(), nanos))
            var_len += 8
        else:
            fixed[:, slot] = _slot_value(arr)
    fixed[:, : head // 8] = null_words
    row_sizes = fixed_size + var_len
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_sizes, out=offsets[1:])
    if not var_parts:
        return EncodedRows(fixed.view(np.uint8).reshape(-1), offsets)
    cursor = np.full(n, fixed_size, dtype=np.int64)
    out = np.zeros(int(offsets[-1]), dtype=np.uint8)
    for slot, data, starts, lengths, reserved, low in var_parts:
        fixed[:, slot] = np.where(
            reserved > 0,
            (cursor.astype(np.uint64) << np.uint64(32)) | low.astype(np.uint64),
            fixed[:, slot],
        )
        src, within = _gather(data, starts, lengths)
        out[np.repeat(offsets[:-1] + cursor, lengths) + within] = data[src]
        cursor = cursor + reserved
    fixed_bytes = fixed.view(np.uint8).reshape(n, fixed_size)
    dest = (offsets[:-1, None] + np.arange(fixed_size, dtype=np.int64)[None, :]).reshape(-1)
    out[dest] = fixed_bytes.reshape(-1)
    return EncodedRows(out, offsets)


def _inline_slots(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, inline: np.ndarray) -> np.ndarray:
    """Slots of values stored inline: up to 7 bytes, then ``0x80 | len`` in the top byte."""
    n = len(lengths)
    slots = np.zeros(n, dtype=np.uint64)
    if not inline.any():
        return slots
    idx = starts[:, None] + np.arange(7, dtype=np.int64)[None, :]
    valid = (np.arange(7)[None, :] < lengths[:, None]) & inline[:, None]
    if len(data):
        picked = np.where(valid, data[np.clip(idx, 0, len(data) - 1)], 0).astype(np.uint64)
    else:
        picked = np.zeros((n, 7), dtype=np.uint64)
    for j in range(7):
        slots |= picked[:, j] << np.uint64(8 * j)
    marker = (np.uint64(0x80) | lengths.astype(np.uint64)) << np.uint64(56)
    return np.where(inline, slots | marker, 0).astype(np.uint64)


def encode_row(values: Sequence[pa.Scalar]) -> bytes:
    """One BinaryRow (row kind +I) of Arrow scalars, byte for byte what :func:`encode` makes
    of one-row columns of them. A file's keys and bounds are a few rows each, for which the
    whole-column steps of :func:`encode` cost far more than the values (every file written
    encodes some)."""
    arity = len(values)
    head = header_size(arity)
    header = bytearray(head)
    slots = [0] * arity
    var = bytearray()
    fixed_size = head + 8 * arity
    for i, scalar in enumerate(values):
        if isinstance(scalar, pa.DictionaryScalar):
            value_type = scalar.type.value_type
            scalar = scalar.value if scalar.is_valid else pa.scalar(None, value_type)
        valid = scalar.is_valid
        if not valid:
            header[(i + 8) // 8] |= 1 << ((i + 8) % 8)
        t = scalar.type
        if _is_var(t):
            if valid:
                raw = scalar.as_py()
                data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
                if len(data) <= 7:
                    slots[i] = int.from_bytes(data, "little") | (0x80 | len(data)) << 56
                else:
                    slots[i] = (fixed_size + len(var)) << 32 | len(data)
                    var += data + bytes(-len(data) % 8)
        elif pa.types.is_decimal(t) and not _is_compact_decimal(t):
            # Java's BigInteger.toByteArray at the start of 16 reserved bytes (a null's too)
            data = _java_bytes(_unscaled(scalar)) if valid else b""
            slots[i] = (fixed_size + len(var)) << 32 | len(data)
            var += data + bytes(16 - len(data))
        elif pa.types.is_timestamp(t) and not _is_compact_timestamp(t):
            per_milli = 1000 if t.unit == "us" else 1_000_000
            millis, rest = divmod(scalar.value, per_milli) if valid else (0, 0)
            slots[i] = (fixed_size + len(var)) << 32 | rest * (1_000_000 // per_milli)
            var += struct.pack("<q", millis)
        elif valid:
            word = _fixed_word(scalar)
            if word is None:  # a type only the column encoder knows
                return encode([pa.array([s.as_py()], s.type) for s in values]).row(0)
            slots[i] = word
    return bytes(header) + struct.pack(f"<{arity}Q", *slots) + bytes(var)


def _is_var(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _fixed_word(scalar: pa.Scalar) -> int | None:
    """The slot of a valid fixed-size value, as :func:`_slot_value` makes it (None: a type it
    has no rule for here)."""
    t = scalar.type
    if pa.types.is_boolean(t):
        return 1 if scalar.as_py() else 0
    if pa.types.is_integer(t):
        width: int = t.bit_width
        return int(scalar.as_py()) & ((1 << width) - 1)  # zero-extended, as Java writes it
    if pa.types.is_float32(t):
        return int(struct.unpack("<I", struct.pack("<f", scalar.as_py()))[0])
    if pa.types.is_float64(t):
        return int(struct.unpack("<Q", struct.pack("<d", scalar.as_py()))[0])
    if pa.types.is_timestamp(t):  # seconds or milliseconds: milliseconds in the slot
        return int(scalar.value * (1000 if t.unit == "s" else 1)) & _WORD
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return int(scalar.value) & 0xFFFFFFFF
    if pa.types.is_time64(t):
        return int(scalar.value // 1000) & 0xFFFFFFFF
    if pa.types.is_decimal(t):
        return _unscaled(scalar) & _WORD
    return None


_WORD = (1 << 64) - 1


def _unscaled(scalar: pa.Scalar) -> int:
    value = scalar.as_py()
    return int(_EXACT.scaleb(value, scalar.type.scale))


def _java_bytes(unscaled: int) -> bytes:
    """Java's ``BigInteger.toByteArray``: minimal big-endian two's complement."""
    magnitude = ~unscaled if unscaled < 0 else unscaled
    return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


def to_bytes(values: Sequence[Any], arrow_types: Sequence[pa.DataType]) -> bytes:
    """One BinaryRow from Python values (small metadata: partitions, min/max keys)."""
    return encode_row([pa.scalar(v, type=t) for v, t in zip(values, arrow_types, strict=True)])


def from_bytes(data: bytes, arrow_types: Sequence[pa.DataType]) -> tuple[Any, ...]:
    """Python values of a BinaryRow (small metadata only). A nanosecond timestamp
    (TIMESTAMP(7..9)) is an int, nanoseconds since the epoch: Python's datetime stops at
    microseconds, and keys, partitions and bounds must compare, prune and be read back
    exactly (``pa.scalar`` and :func:`to_bytes` take the int as it is)."""
    arity = len(arrow_types)
    head = header_size(arity)
    out: list[Any] = []
    for i, t in enumerate(arrow_types):
        bit = i + 8
        if data[bit // 8] & (1 << (bit % 8)):
            out.append(None)
            continue
        at = head + 8 * i
        slot = data[at : at + 8]
        out.append(_decode_value(data, slot, t))
    return tuple(out)


def _decode_value(row: bytes, slot: bytes, t: pa.DataType) -> Any:
    (word,) = struct.unpack("<Q", slot)
    types = pa.types
    if types.is_boolean(t):
        return slot[0] != 0
    if types.is_int8(t):
        return struct.unpack("<b", slot[:1])[0]
    if types.is_int16(t):
        return struct.unpack("<h", slot[:2])[0]
    if types.is_int32(t):
        return struct.unpack("<i", slot[:4])[0]
    if types.is_int64(t):
        return struct.unpack("<q", slot)[0]
    if types.is_float32(t):
        return struct.unpack("<f", slot[:4])[0]
    if types.is_float64(t):
        return struct.unpack("<d", slot)[0]
    if types.is_date32(t):
        return _EPOCH_DATE + dt.timedelta(days=struct.unpack("<i", slot[:4])[0])
    if types.is_time32(t) or types.is_time64(t):
        millis = struct.unpack("<i", slot[:4])[0]
        return (dt.datetime.min + dt.timedelta(milliseconds=millis)).time()
    if types.is_timestamp(t):
        if _is_compact_timestamp(t):
            millis, nanos = struct.unpack("<q", slot)[0], 0
        else:
            offset = word >> 32
            millis = struct.unpack("<q", row[offset : offset + 8])[0]
            nanos = word & 0xFFFFFFFF
        if t.unit == "ns":
            return millis * 1_000_000 + nanos
        value = _EPOCH + dt.timedelta(milliseconds=millis, microseconds=nanos // 1000)
        return value.replace(tzinfo=dt.UTC) if t.tz is not None else value
    if types.is_decimal(t):
        if _is_compact_decimal(t):
            unscaled = struct.unpack("<q", slot)[0]
        else:
            offset, length = word >> 32, word & 0xFFFFFFFF
            unscaled = int.from_bytes(row[offset : offset + length], "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-t.scale, _EXACT)
    raw = _var_bytes(row, slot, word)
    if types.is_string(t) or types.is_large_string(t):
        return raw.decode("utf-8")
    return raw


def _var_bytes(row: bytes, slot: bytes, word: int) -> bytes:
    if slot[7] & 0x80:
        return slot[: slot[7] & 0x7F]
    offset, length = word >> 32, word & 0xFFFFFFFF
    return row[offset : offset + length]


def serialize(row: bytes, arity: int) -> bytes:
    """A BinaryRow as manifests store it: a 4-byte big-endian arity, then the row."""
    return struct.pack(">i", arity) + row


def deserialize(data: bytes) -> tuple[int, bytes]:
    """Arity and row bytes of a manifest-stored BinaryRow."""
    return struct.unpack(">i", data[:4])[0], data[4:]
