"""The bytes of Paimon's file indexes: the container (``FileIndexFormat``), bloom filters
(``BloomFilter64`` with ``FastHash``) and bitmap indexes (version 1 written, 1 and 2 read).
Java Paimon reading and writing them is tested in tests/integration/test_file_index_interop.py;
here each part is checked against the specification it follows."""

from __future__ import annotations

import random
import struct

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from changelake.errors import CorruptMetadataError
from changelake.table.format import bitmap_index, bloom_filter, file_index

_M = 2**64
_P1, _P2, _P3, _P4, _P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                           9650029242287828579, 2870177450012600261)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) % _M


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * _P2) % _M, 31) * _P1 % _M


def _xxh64(data: bytes) -> int:
    """XXH64 with seed 0, one value at a time, straight from its specification."""
    n, p = len(data), 0
    if n >= 32:
        v = [(_P1 + _P2) % _M, _P2, 0, (-_P1) % _M]
        while p <= n - 32:
            v = [_round(v[i], int.from_bytes(data[p + 8 * i:p + 8 * i + 8], "little")) for i in range(4)]
            p += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) % _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) % _M
    else:
        h = _P5
    h = (h + n) % _M
    while p + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[p:p + 8], "little")), 27) * _P1 + _P4) % _M
        p += 8
    if p + 4 <= n:
        h = (_rotl(h ^ (int.from_bytes(data[p:p + 4], "little") * _P1 % _M), 23) * _P2 + _P3) % _M
        p += 4
    while p < n:
        h = _rotl(h ^ (data[p] * _P5 % _M), 11) * _P1 % _M
        p += 1
    h ^= h >> 33
    h = h * _P2 % _M
    h ^= h >> 29
    h = h * _P3 % _M
    return h ^ (h >> 32)


def _java_long(x: int) -> int:
    return (x + 2**63) % _M - 2**63


def _wang(key: int) -> int:
    """Thomas Wang's 64-bit hash with Java's long arithmetic (``>>`` keeps the sign)."""
    key = _java_long(~key + (key << 21))
    key = _java_long(key ^ (key >> 24))
    key = _java_long(key + (key << 3) + (key << 8))
    key = _java_long(key ^ (key >> 14))
    key = _java_long(key + (key << 2) + (key << 4))
    key = _java_long(key ^ (key >> 28))
    return _java_long(key + (key << 31))


def test_xxhash64_of_whole_columns_matches_the_specification() -> None:
    # published XXH64 values (seed 0)
    known = {b"": 0xEF46DB3751D8E999, b"a": 0xD24EC4F1A98C6E5B, b"abc": 0x44BC2CF5AD770999}
    assert [int(h) for h in bloom_filter.xxhash64(pa.array(list(known), pa.binary()))] == list(known.values())
    rng = random.Random(7)
    values = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 140))) for _ in range(600)]
    column = pa.array(values, pa.binary()).slice(5)  # an offset into the buffers
    assert [int(h) for h in bloom_filter.xxhash64(column)] == [_xxh64(v) for v in values[5:]]
    texts = ["", "é", "naïve 東京", "x" * 33]
    assert [int(h) for h in bloom_filter.hashes(pa.array(texts, pa.large_string()))] == \
        [_xxh64(t.encode()) for t in texts]


def test_numbers_and_times_hash_as_java_longs() -> None:
    ints = [0, 1, -1, 2**31 - 1, -(2**31), 123456789]
    assert [int(h) for h in bloom_filter.hashes(pa.array(ints, pa.int32())).view(np.int64)] == \
        [_wang(i) for i in ints]
    big = [2**63 - 1, -(2**63), 3_000_000_019]
    assert [int(h) for h in bloom_filter.long_hash(np.array(big, np.int64)).view(np.int64)] == [_wang(i) for i in big]
    # a double by its bits, a float by its bits sign-extended from an int, NaN canonical
    doubles = bloom_filter.java_longs(pa.array([1.5, -0.0, float("nan")], pa.float64()))
    assert list(doubles) == [struct.unpack(">q", struct.pack(">d", v))[0] for v in (1.5, -0.0)] + [0x7FF8000000000000]
    floats = bloom_filter.java_longs(pa.array([-2.5], pa.float32()))
    assert list(floats) == [struct.unpack(">i", struct.pack(">f", -2.5))[0]]
    # timestamps: milliseconds up to precision 3, else microseconds (rounded down)
    assert list(bloom_filter.java_longs(pa.array([-1, 1_500], pa.timestamp("ns")))) == [-1, 1]
    assert list(bloom_filter.java_longs(pa.array([7], pa.timestamp("s")))) == [7000]
    assert list(bloom_filter.java_longs(pa.array([7], pa.timestamp("ms", tz="UTC")))) == [7]
    assert list(bloom_filter.java_longs(pa.array([3_001], pa.time64("us")))) == [3]
    assert list(bloom_filter.java_longs(pa.array([19_000], pa.date32()))) == [19_000]


def test_bloom_filter_sizing_and_bytes() -> None:
    assert bloom_filter.sizing(1_000_000, 0.1) == (4_792_536, 3)  # BloomFilter64's defaults
    builder = bloom_filter.Builder(1000, 0.01)
    builder.add(pa.array([f"v{i}" for i in range(1000)] + [None]))
    body = builder.serialized()
    assert struct.unpack(">i", body[:4])[0] == builder.k and len(body) == 4 + builder.num_bits // 8
    present = pa.array([f"v{i}" for i in range(0, 1000, 37)])
    assert all(bloom_filter.may_contain(body, present.slice(i, 1)) for i in range(len(present)))
    absent = [bloom_filter.may_contain(body, pa.array([f"w{i}"])) for i in range(2000)]
    assert sum(absent) < 60  # about 1% false positives


def _v2(keys: list[int], rows: int) -> bytes:
    """A version-2 bitmap index of INT keys, one row each, all in one index block."""
    block = struct.pack(">i", len(keys)) + b"".join(struct.pack(">iii", k, -1 - i, 0) for i, k in enumerate(keys))
    head = bytes([2]) + struct.pack(">ii", rows, len(keys)) + b"\0" + struct.pack(">i", 1)
    return head + struct.pack(">ii", keys[0], 0) + struct.pack(">i", len(block)) + block


def test_bitmap_index_holds_each_value_and_reads_both_versions() -> None:
    values = pa.array([3, 5, 3, None, 7, None, 3], pa.int32())
    body = bitmap_index.serialize(values)
    # version, rows, distinct values, nulls (two: a bitmap at offset 0)
    assert body[:1] == b"\x01" and struct.unpack(">ii?i", body[1:14]) == (7, 3, True, 0)
    for value, expected in ((3, True), (5, True), (7, True), (4, False)):
        assert bitmap_index.may_contain(body, pa.array([value], pa.int32())) is expected
    # a value of one row is stored as -1 - row, with no bitmap; a value of three as a bitmap
    entries = {struct.unpack(">i", body[14 + 8 * i:18 + 8 * i])[0]: struct.unpack(">i", body[18 + 8 * i:22 + 8 * i])[0]
               for i in range(3)}
    assert entries[5] == -2 and entries[7] == -5
    nulls = BitMap([3, 5]).serialize()
    assert body[38:38 + len(nulls)] == nulls and BitMap.deserialize(body[38 + len(nulls):]) == BitMap([0, 2, 6])
    strings = bitmap_index.serialize(pa.array(["b", "a", "b", "東"]))
    assert bitmap_index.may_contain(strings, pa.array(["東"]))
    assert not bitmap_index.may_contain(strings, pa.array(["c"]))
    stamps = bitmap_index.serialize(pa.array([1_000, 2_000], pa.timestamp("us")))
    assert bitmap_index.may_contain(stamps, pa.array([2_000], pa.timestamp("us")))
    v2 = _v2([10, 20, 30], 3)
    assert bitmap_index.may_contain(v2, pa.array([20], pa.int32()))
    assert not bitmap_index.may_contain(v2, pa.array([25], pa.int32()))
    with pytest.raises(CorruptMetadataError, match="version 3"):
        bitmap_index.may_contain(b"\x03" + v2[1:], pa.array([20], pa.int32()))


def test_index_file_layout() -> None:
    indexes: dict[str, dict[str, bytes | None]] = {"id": {"bloom-filter": b"\x00\x00\x00\x01\xff", "bitmap": None},
                                                   "名\0": {"bitmap": b"xyz"}}
    data = file_index.serialize(indexes)
    magic, version, head_length, columns = struct.unpack(">qiii", data[:20])
    assert (magic, version, columns) == (1493475289347502, 1, 2)
    assert data[20:24] == b"\x00\x02id"  # Java's writeUTF
    assert b"\x00\x05\xe5\x90\x8d\xc0\x80" in data[:head_length]  # modified UTF-8: NUL as two bytes
    assert data[head_length:] == b"\x00\x00\x00\x01\xffxyz"
    assert file_index.parse(data) == indexes
    with pytest.raises(CorruptMetadataError, match="magic"):
        file_index.parse(b"\0" * 24)
    with pytest.raises(CorruptMetadataError, match="truncated"):
        file_index.parse(data[:30])
    # an index of no rows holds nothing; an unknown kind may hold anything
    assert not file_index.may_contain("bitmap", None, pa.array([1]))
    assert file_index.may_contain("range-bitmap", b"", pa.array([1]))
