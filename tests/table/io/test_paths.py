"""Paimon's partition directory names and table paths."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from changelake.table.io import paths


def test_partition_paths_escape_like_paimon() -> None:
    text = paths.partition_path(
        ["dt", "hr", "k"],
        ["2024/01:01", 7, None],
        [pa.string(), pa.int32(), pa.string()],
        "__DEFAULT_PARTITION__",
    )
    assert text == "dt=2024%2F01%3A01/hr=7/k=__DEFAULT_PARTITION__"


def test_partition_value_text_by_type() -> None:
    def text(value: object, arrow_type: pa.DataType, legacy: bool = False) -> str:
        return paths.partition_value_text(value, arrow_type, "d", legacy=legacy)

    assert text(dt.date(2024, 1, 2), pa.date32()) == "2024-01-02"
    assert text(True, pa.bool_()) == "true"
    assert text(1e7, pa.float64()) == "1.0E7"
    assert text(0.5, pa.float64()) == "0.5"
    stamp = dt.datetime(2024, 1, 2, 3, 4, 5)
    assert text(stamp, pa.timestamp("ms")) == "2024-01-02 03:04:05.000"
    assert text(1_700_000_000_123_456_780, pa.timestamp("ns")) == "2023-11-14 22:13:20.123456780"
    assert text(-1, pa.timestamp("ns", tz="UTC")) == "1969-12-31 23:59:59.999999999"
    assert text(" ", pa.string()) == "d"


def test_legacy_partition_names_are_paimons_default() -> None:
    def text(value: object, arrow_type: pa.DataType) -> str:
        return paths.partition_value_text(value, arrow_type, "d")

    assert text(dt.date(2024, 1, 2), pa.date32()) == "19724"
    assert text(dt.datetime(2024, 1, 2, 3, 4), pa.timestamp("ms")) == "2024-01-02T03:04"
    assert text(dt.datetime(2024, 1, 2, 3, 4, 5, 120000), pa.timestamp("us")) == "2024-01-02T03:04:05.120"
    assert text(dt.datetime(2024, 1, 2, 3, 4, 5, 123456), pa.timestamp("us")) == "2024-01-02T03:04:05.123456"
    # TIMESTAMP(9) partitions decode as nanoseconds since the epoch
    assert text(1_700_000_000_123_456_789, pa.timestamp("ns")) == "2023-11-14T22:13:20.123456789"
    assert text(1_700_000_000_120_000_000, pa.timestamp("ns")) == "2023-11-14T22:13:20.120"
    assert text(-60_000_000_000, pa.timestamp("ns")) == "1969-12-31T23:59"
    assert text(7, pa.int32()) == "7"
