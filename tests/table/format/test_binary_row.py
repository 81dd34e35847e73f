"""BinaryRow bytes and bucket numbers against the bytes of a real Paimon table (pypaimon 2.1.0 output)."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from changelake.table.format import binary_row, bucket

# A manifest entry of a table pypaimon 2.1.0 wrote (its _PARTITION and key bytes).
PARTITION_2024_01_01 = bytes.fromhex(
    "00000001" "0000000000000000" "0a00000010000000" "323032342d30312d" "3031000000000000"
)
KEY_3 = bytes.fromhex("00000001" "0000000000000000" "0300000000000000")


def test_partition_and_key_bytes_match_reference() -> None:
    part = binary_row.serialize(binary_row.to_bytes(["2024-01-01"], [pa.string()]), 1)
    assert part == PARTITION_2024_01_01
    assert binary_row.serialize(binary_row.to_bytes([3], [pa.int64()]), 1) == KEY_3
    arity, row = binary_row.deserialize(PARTITION_2024_01_01)
    assert arity == 1
    assert binary_row.from_bytes(row, [pa.string()]) == ("2024-01-01",)


def test_reference_bucket_numbers() -> None:
    ids = pa.array(range(1, 8), pa.int64())
    assert bucket.buckets([ids], 2).tolist() == [0, 0, 1, 0, 0, 0, 1]


def test_inline_string_slot_layout() -> None:
    row = binary_row.to_bytes(["abc"], [pa.string()])
    assert row[8:16] == b"abc" + b"\x00" * 4 + bytes([0x80 | 3])


def test_null_bit_and_zero_slot() -> None:
    row = binary_row.to_bytes([None, 5], [pa.int32(), pa.int32()])
    assert row[1] & 0x01  # bit 8 of the header = field 0
    assert row[8:16] == b"\x00" * 8
    assert binary_row.from_bytes(row, [pa.int32(), pa.int32()]) == (None, 5)


VALUES = [
    (True, pa.bool_()),
    (-7, pa.int8()),
    (-300, pa.int16()),
    (123456, pa.int32()),
    (-(2**40), pa.int64()),
    (1.5, pa.float32()),
    (-2.25, pa.float64()),
    ("short", pa.string()),
    ("a longer string value", pa.string()),
    (b"\x00\x01\x02", pa.binary()),
    (b"0123456789abcdef", pa.binary()),
    (dt.date(1969, 7, 20), pa.date32()),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 123000), pa.timestamp("ms")),
    (dt.datetime(1960, 1, 2, 3, 4, 5, 123456), pa.timestamp("us")),
    (dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC), pa.timestamp("us", tz="UTC")),
    # nanoseconds since the epoch, exact (a datetime would stop at the microsecond)
    (1_700_000_000_123_456_789, pa.timestamp("ns")),
    (-1, pa.timestamp("ns", tz="UTC")),
    (decimal.Decimal("-12345.67"), pa.decimal128(10, 2)),
    (decimal.Decimal("-123456789012345678901234.567890"), pa.decimal128(38, 6)),
    (decimal.Decimal("0.000000"), pa.decimal128(38, 6)),
]


@pytest.mark.parametrize(("value", "arrow_type"), VALUES, ids=[str(t) for _, t in VALUES])
def test_round_trip_every_type(value: object, arrow_type: pa.DataType) -> None:
    row = binary_row.to_bytes([value, None, value], [arrow_type, arrow_type, arrow_type])
    assert len(row) % 8 == 0
    assert binary_row.from_bytes(row, [arrow_type] * 3) == (value, None, value)


def test_vectorized_encoding_equals_row_by_row() -> None:
    strings = pa.array(["", "a", "abcdefg", "abcdefgh", None, "x" * 40])
    ints = pa.array([1, -2, 3, None, 5, 6], pa.int64())
    encoded = binary_row.encode([strings, ints])
    for i in range(len(strings)):
        single = binary_row.to_bytes([strings[i].as_py(), ints[i].as_py()], [pa.string(), pa.int64()])
        assert encoded.row(i) == single


def test_decimal_java_byte_array_lengths() -> None:
    # Java's BigInteger.toByteArray: minimal two's complement, so 127 -> 1 byte, 128 -> 2 bytes.
    t = pa.decimal128(38, 0)
    for unscaled, length in [(0, 1), (127, 1), (128, 2), (-128, 1), (-129, 2), (2**70, 9)]:
        row = binary_row.to_bytes([decimal.Decimal(unscaled)], [t])
        slot = int.from_bytes(row[8:16], "little")
        assert slot & 0xFFFFFFFF == length
        assert binary_row.from_bytes(row, [t]) == (decimal.Decimal(unscaled),)


EVERY_TYPE = [
    *VALUES,
    (200, pa.uint8()),
    (-1, pa.int8()),
    (2**63 - 1, pa.uint64()),
    (float("nan"), pa.float64()),
    (-0.0, pa.float32()),
    (float("-inf"), pa.float64()),
    (dt.time(1, 2, 3), pa.time32("s")),
    (dt.time(1, 2, 3, 4000), pa.time32("ms")),
    (dt.time(23, 59, 59, 999999), pa.time64("us")),
    (86_399_999_999_999, pa.time64("ns")),
    (dt.datetime(1900, 1, 1), pa.timestamp("s")),
    ("abcdefg", pa.large_string()),
    ("abcdefgh", pa.string()),
    (b"0123456789", pa.large_binary()),
    (b"abc", pa.binary(3)),
    (b"0123456789", pa.binary(10)),
    (decimal.Decimal("123456789012345678"), pa.decimal128(18, 0)),
    (decimal.Decimal("-1"), pa.decimal128(38, 0)),
    (decimal.Decimal("-99999999999999999999999999999999999999"), pa.decimal128(38, 0)),
    (dt.date(2024, 2, 29), pa.date32()),
]


def test_one_row_encoder_equals_column_encoder() -> None:
    # Every type alone and null, then all of them in one row (variable parts one after another).
    for value, arrow_type in EVERY_TYPE:
        for v in (value, None):
            column = pa.array([v], arrow_type)
            assert binary_row.encode_row([column[0]]) == binary_row.encode([column]).row(0), (v, arrow_type)
    columns = [pa.array([v, None], t) for v, t in EVERY_TYPE]
    encoded = binary_row.encode(columns)
    for row in range(2):
        assert binary_row.encode_row([c[row] for c in columns]) == encoded.row(row)
    words = pa.array(["a", "a much longer word", None]).dictionary_encode()
    for row in range(3):
        assert binary_row.encode_row([words[row]]) == binary_row.encode([words]).row(row)
    assert binary_row.encode_row([]) == binary_row.encode([]).row(0)


def test_row_hashes_alike_in_any_batch() -> None:
    # Rows without nulls hash their all-zero header once per batch: the same hashes as rows
    # hashed among rows with nulls (whose headers differ).
    ids = pa.array([1, None, 3, -4, 2**40], pa.int64())
    names = pa.array(["a", "b", None, "d", "e"])
    together = bucket.hash_rows(binary_row.encode([ids, names]))
    alone = [bucket.hash_rows(binary_row.encode([ids.slice(i, 1), names.slice(i, 1)]))[0] for i in range(5)]
    assert together.tolist() == alone
    assert bucket.buckets([pa.array(range(1, 8), pa.int64())], 2).tolist() == [0, 0, 1, 0, 0, 0, 1]
