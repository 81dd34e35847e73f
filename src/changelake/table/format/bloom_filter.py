"""Paimon's bloom-filter file index (``BloomFilterFileIndex`` over ``BloomFilter64``): the bytes
it stores and the hashes it sets, computed a whole column at a time.

A value's 64-bit hash (Paimon's ``FastHash``): strings and binaries by XXH64 (seed 0) of their
bytes (UTF-8 for strings); integers, dates, times and timestamps (milliseconds up to precision 3,
else microseconds) by Thomas Wang's 64-bit integer hash of their value as a Java ``long``;
floats and doubles by that hash of their IEEE 754 bits. The hash's low and high 32-bit halves
make the ``k`` bit positions ``h1 + i * h2`` (i = 1..k, Java int arithmetic, a negative one
bit-flipped) modulo the bit count. Stored: ``k`` as a big-endian int, then the bit set (bit
``p`` in byte ``p >> 3`` at ``1 << (p & 7)``).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

DEFAULT_ITEMS = 1_000_000
DEFAULT_FPP = 0.1
_INT = struct.Struct(">i")

_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P3 = np.uint64(1609587929392839161)
_P4 = np.uint64(9650029242287828579)
_P5 = np.uint64(2870177450012600261)

Hashes = npt.NDArray[np.uint64]


def supports(t: pa.DataType) -> bool:
    """Whether Paimon's bloom filter indexes a column of type ``t``."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_integer(t)
                or (pa.types.is_floating(t) and not pa.types.is_float16(t)) or pa.types.is_date32(t)
                or pa.types.is_time(t) or pa.types.is_timestamp(t))


def _rotl(x: Hashes, r: int) -> Hashes:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: Hashes, lane: Hashes) -> Hashes:
    return _rotl(acc + lane * _P2, 31) * _P1


def _merge(acc: Hashes, lane: Hashes) -> Hashes:
    return (acc ^ _round(np.zeros_like(lane), lane)) * _P1 + _P4


def _words(data: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], width: int) -> Hashes:
    """The little-endian ``width``-byte words at byte offsets ``at`` of ``data`` (a view of
    every byte offset's word, one byte apart, gathered once)."""
    dtype = np.dtype("<u8" if width == 8 else "<u4")
    windows = np.ndarray((data.size - width + 1,), dtype, buffer=data, strides=(1,))
    return np.asarray(windows[at], np.uint64)


def _rows_with(left: npt.NDArray[np.int64], need: int) -> slice | npt.NDArray[np.intp] | None:
    """The rows with at least ``need`` bytes left: all (a slice, no gather), some, or none."""
    on = left >= need
    if on.all():
        return slice(None)
    found = np.flatnonzero(on)
    return found if found.size else None


def xxhash64(values: pa.Array) -> Hashes:
    """XXH64 (seed 0) of each value of a string or binary array without nulls, every value at
    once: one numpy pass per 32-byte stripe of the longest value, then at most seven for the
    tails."""
    if pa.types.is_fixed_size_binary(values.type):
        values = values.cast(pa.binary())
    if pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type):
        values = values.cast(pa.large_binary())
        offset_type: type[np.int64] | type[np.int32] = np.int64
    else:
        values = values.cast(pa.binary())
        offset_type = np.int32
    n = len(values)
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], offset_type)[values.offset:values.offset + n + 1].astype(np.int64)
    body = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    data = np.concatenate([body[:offsets[-1] if n else 0], np.zeros(32, np.uint8)])
    starts, lengths = offsets[:-1], np.diff(offsets)
    h = np.full(n, _P5, np.uint64)
    big = np.flatnonzero(lengths >= 32)
    if big.size:
        v1 = np.full(big.size, (int(_P1) + int(_P2)) % 2**64, np.uint64)
        v2 = np.full(big.size, _P2, np.uint64)
        v3 = np.zeros(big.size, np.uint64)
        v4 = np.full(big.size, 2**64 - int(_P1), np.uint64)
        stripes = lengths[big] // 32
        for stripe in range(int(stripes.max())):
            live = stripes > stripe
            at = starts[big][live] + 32 * stripe
            v1[live] = _round(v1[live], _words(data, at, 8))
            v2[live] = _round(v2[live], _words(data, at + 8, 8))
            v3[live] = _round(v3[live], _words(data, at + 16, 8))
            v4[live] = _round(v4[live], _words(data, at + 24, 8))
        acc = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        for lane in (v1, v2, v3, v4):
            acc = _merge(acc, lane)
        h[big] = acc
    h += lengths.astype(np.uint64)
    at = starts + (lengths // 32) * 32
    left = lengths % 32
    for need, width in ((8, 8), (8, 8), (8, 8), (4, 4), (1, 1), (1, 1), (1, 1)):
        on = _rows_with(left, need)
        if on is None:
            continue
        if width == 8:
            h[on] = _rotl(h[on] ^ _round(np.zeros_like(h[on]), _words(data, at[on], 8)), 27) * _P1 + _P4
        elif width == 4:
            h[on] = _rotl(h[on] ^ (_words(data, at[on], 4) * _P1), 23) * _P2 + _P3
        else:
            h[on] = _rotl(h[on] ^ (data[at[on]].astype(np.uint64) * _P5), 11) * _P1
        at[on] += width
        left[on] -= width
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def _shr(x: Hashes, n: int) -> Hashes:
    """Java's ``>>`` on longs (arithmetic shift) of ``x``'s bits."""
    return (x.view(np.int64) >> np.int64(n)).view(np.uint64)


def long_hash(keys: npt.NDArray[np.int64]) -> Hashes:
    """Thomas Wang's 64-bit integer hash of each key, as Paimon's ``FastHash.getLongHash``."""
    k = keys.astype(np.int64).view(np.uint64)
    k = ~k + (k << np.uint64(21))
    k ^= _shr(k, 24)
    k = k + (k << np.uint64(3)) + (k << np.uint64(8))
    k ^= _shr(k, 14)
    k = k + (k << np.uint64(2)) + (k << np.uint64(4))
    k ^= _shr(k, 28)
    return np.asarray(k + (k << np.uint64(31)), np.uint64)


def java_longs(values: pa.Array) -> npt.NDArray[np.int64]:
    """The Java ``long`` Paimon hashes or keys a non-binary value by, for an array without nulls:
    the integer itself; a float's or double's IEEE 754 bits (a float's as a sign-extended int,
    NaNs as Java's one canonical NaN); a date's days; a time's milliseconds of the day; a
    timestamp's milliseconds (precision up to 3) or microseconds (rounded down)."""
    t = values.type
    if pa.types.is_floating(t):
        width = np.float32 if pa.types.is_float32(t) else np.float64
        floats = values.to_numpy(zero_copy_only=False).astype(width)
        floats = np.where(np.isnan(floats), width(np.nan), floats)
        bits = floats.view(np.int32 if width is np.float32 else np.int64)
        return bits.astype(np.int64)
    if pa.types.is_timestamp(t) or pa.types.is_time(t):
        unit = t.unit
        raw = values.view(pa.int64() if t.bit_width == 64 else pa.int32()).to_numpy(zero_copy_only=False)
        raw = raw.astype(np.int64)
        millis = pa.types.is_time(t) or unit in ("s", "ms")
        per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
        target = 1_000 if millis else 1_000_000
        scaled = raw * (target // per_second) if per_second <= target else raw // (per_second // target)
        return np.asarray(scaled, np.int64)
    if pa.types.is_date32(t):
        values = values.view(pa.int32())
    return np.asarray(values.to_numpy(zero_copy_only=False), np.int64)


def hashes(values: pa.Array) -> Hashes:
    """Paimon's 64-bit hash of each non-null value of ``values``."""
    if values.null_count:
        values = pc.drop_null(values)
    t = values.type
    if pa.types.is_dictionary(t):
        values = values.cast(t.value_type)
        t = values.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return xxhash64(values)
    return long_hash(java_longs(values))


def _positions(hashed: Hashes, k: int, num_bits: int) -> list[npt.NDArray[np.int32]]:
    """The bit positions of each hash, one array per hash function, as ``BloomFilter64.addHash``
    sets them: in Java int arithmetic (uint32 wraps the same), a negative sum bit-flipped."""
    low = hashed.astype(np.uint32)
    high = (hashed >> np.uint64(32)).astype(np.uint32)
    found = []
    for i in range(1, k + 1):
        combined = (low + np.uint32(i) * high).view(np.int32)
        combined ^= combined >> np.int32(31)  # ~x for a negative x
        found.append(combined % np.int32(num_bits))
    return found


def sizing(items: int, fpp: float) -> tuple[int, int]:
    """The bit count and hash count of a filter for ``items`` values at false-positive rate
    ``fpp`` (``BloomFilter64``'s constructor: the bits rounded up past a multiple of 8)."""
    nb = int(-items * math.log(fpp) / (math.log(2) * math.log(2)))
    num_bits = nb + (8 - nb % 8)
    return num_bits, max(1, math.floor(num_bits / items * math.log(2) + 0.5))


class Builder:
    """A bloom filter being filled, one written chunk of a column at a time."""

    def __init__(self, items: int, fpp: float) -> None:
        self.num_bits, self.k = sizing(items, fpp)
        self.bits = np.zeros(self.num_bits, np.bool_)
        self.written = False

    def add(self, values: pa.Array) -> None:
        self.written = True  # as Paimon's writers: a column of nulls only still has an index
        if len(values) > values.null_count:
            for positions in _positions(hashes(values), self.k, self.num_bits):
                self.bits[positions] = True

    def serialized(self) -> bytes:
        return _INT.pack(self.k) + np.packbits(self.bits, bitorder="little").tobytes()


def may_contain(index: bytes, values: pa.Array) -> bool:
    """Whether a serialized filter may hold one of ``values`` (non-null, in the column's type)."""
    if len(index) <= 4:
        return True
    k = _INT.unpack_from(index)[0]
    data = np.frombuffer(index, np.uint8, offset=4)
    every = np.ones(len(values), np.bool_)
    for positions in _positions(hashes(values), k, data.size * 8):
        every &= ((data[positions >> 3] >> (positions & 7).astype(np.uint8)) & 1).astype(np.bool_)
    return bool(every.any())
