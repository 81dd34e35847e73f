"""Where a table's files live, and Paimon's partition directory names."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

_ESCAPED = set("\"#%'*/:=?\\{}[]^")


def escape(text: str) -> str:
    """Paimon's (Hive's) path escaping of a partition name or value."""
    return "".join(
        f"%{ord(c):02X}" if ord(c) < 32 or ord(c) == 127 or c in _ESCAPED else c for c in text
    )


def _java_float(value: float) -> str:
    """Java's ``Double.toString``: plain notation in [1e-3, 1e7), else ``d.dddE±n``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    digits = decimal.Decimal(repr(value))
    if 1e-3 <= abs(value) < 1e7:
        text = format(digits, "f")
        return text if "." in text else text + ".0"
    mantissa, exponent = format(digits.normalize(), "e").split("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exponent)}"


def _timestamp_text(value: dt.datetime, precision: int) -> str:
    fraction = f"{value.microsecond * 1000:09d}"
    while len(fraction) > precision and fraction.endswith("0"):
        fraction = fraction[:-1]
    text = value.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text}.{fraction}" if fraction else text


def partition_value_text(value: Any, arrow_type: pa.DataType, default_name: str) -> str:
    """A partition value as Paimon casts it to a string for directory names."""
    if value is None:
        return default_name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_float(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        precision = {"s": 0, "ms": 3, "us": 6, "ns": 9}[arrow_type.unit]
        return _timestamp_text(value, precision)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = str(value)
    return default_name if not text.strip() else text


def partition_path(
    keys: Sequence[str], values: Sequence[Any], arrow_types: Sequence[pa.DataType], default_name: str
) -> str:
    """``k1=v1/k2=v2`` with Paimon's escaping ('' for an unpartitioned table)."""
    return "/".join(
        f"{escape(k)}={escape(partition_value_text(v, t, default_name))}"
        for k, v, t in zip(keys, values, arrow_types, strict=True)
    )


@dataclass(frozen=True)
class TablePaths:
    """The directory layout of one table."""

    root: str

    @property
    def snapshot_dir(self) -> str:
        return f"{self.root}/snapshot"

    def snapshot(self, snapshot_id: int) -> str:
        return f"{self.root}/snapshot/snapshot-{snapshot_id}"

    @property
    def schema_dir(self) -> str:
        return f"{self.root}/schema"

    def schema(self, schema_id: int) -> str:
        return f"{self.root}/schema/schema-{schema_id}"

    @property
    def manifest_dir(self) -> str:
        return f"{self.root}/manifest"

    def manifest(self, name: str) -> str:
        return f"{self.root}/manifest/{name}"

    @property
    def tag_dir(self) -> str:
        return f"{self.root}/tag"

    def tag(self, name: str) -> str:
        return f"{self.root}/tag/tag-{name}"

    def bucket_dir(self, partition: str, bucket: int) -> str:
        return f"{self.root}/{partition}/bucket-{bucket}" if partition else f"{self.root}/bucket-{bucket}"
