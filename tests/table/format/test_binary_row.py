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
