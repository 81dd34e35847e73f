"""Values as Paimon's system tables print them: Java's ``toString`` of Paimon's internal
objects (value statistics, key ranges) and Paimon's cast-to-STRING (partitions).

Paimon's system tables are strings built by the JVM, so the renderings follow Java:
``Double.toString`` (``1.0``, ``1.0E10``), ``LocalDateTime.toString`` (``2024-01-02T03:04``),
``Duration.toString`` (``PT24H``), ``AbstractMap.toString`` (``{a=1, b=x}``).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from changelake.table.io import paths

_EPOCH_DATE = dt.date(1970, 1, 1)
_PRECISION = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _scientific(digits: str, exponent: int) -> str:
    """Java's computerized scientific notation of ``0.<digits> * 10**exponent`` digits."""
    return f"{digits[0]}.{digits[1:] or '0'}E{exponent}"


def java_floating(value: float, *, single: bool) -> str:
    """``Double.toString`` (or ``Float.toString`` with ``single``): the shortest digits that
    read back to the value, plain within [1e-3, 1e7) and scientific outside it."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    shortest = str(np.float32(value)) if single else repr(value)
    exact = decimal.Decimal(shortest)
    sign = "-" if exact.is_signed() else ""
    if exact == 0:
        return f"{sign}0.0"
    magnitude = abs(exact)
    if decimal.Decimal("1e-3") <= magnitude < decimal.Decimal("1e7"):
        whole, _, fraction = format(magnitude, "f").partition(".")
        return f"{sign}{whole}.{fraction.rstrip('0') or '0'}"
    _, digit_tuple, exponent = magnitude.normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    return sign + _scientific(digits, len(digits) - 1 + int(exponent))


def local_date_time(value: dt.datetime | int) -> str:
    """``LocalDateTime.toString`` of a timestamp (a datetime, or nanoseconds since the epoch):
    seconds only when not zero, fractions in groups of 3 digits."""
    return paths.local_date_time_text(value)


def duration(value: dt.timedelta) -> str:
    """``Duration.toString`` of a non-negative duration: ``PT24H``, ``PT1H30M``, ``PT0.5S``."""
    micros = value // dt.timedelta(microseconds=1)
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if secs == 0 and fraction == 0 and text != "PT":
        return text
    return text + str(secs) + (f".{fraction:06d}".rstrip("0") if fraction else "") + "S"


def internal_object(value: Any, data_type: pa.DataType) -> str:
    """``toString`` of the object Paimon's ``InternalRow`` getters return for a value: a
    string itself, a DATE as its epoch day, a TIME as its millisecond of the day, a
    TIMESTAMP as a ``LocalDateTime``, a DECIMAL in plain notation."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_floating(value, single=pa.types.is_float32(data_type))
    if pa.types.is_timestamp(data_type) or isinstance(value, dt.datetime):
        return local_date_time(value)
    if isinstance(value, dt.date):
        return str((value - _EPOCH_DATE).days)
    if isinstance(value, dt.time):
        return str(((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        # Java prints a byte[] as an identity hash ("[B@1b6d3586"); the hex digits say more.
        return value.hex()
    return str(value)


def cast_to_string(value: Any, data_type: pa.DataType) -> str:
    """Paimon's cast of a value to STRING (``CastExecutors.resolveToString``)."""
    if pa.types.is_timestamp(data_type) or isinstance(value, dt.datetime):
        return paths.timestamp_text(value, _PRECISION[data_type.unit] if pa.types.is_timestamp(data_type) else 3)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        millis = f"{value.microsecond // 1000:03d}"
        precision = 3 if pa.types.is_time32(data_type) and data_type.unit == "ms" else 0
        return value.strftime("%H:%M:%S") + (f".{millis[:precision]}" if precision else "")
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return internal_object(value, data_type)


def row_text(values: Sequence[Any], types: Sequence[pa.DataType]) -> str:
    """Paimon's cast of a row to STRING: ``{v1, v2}`` (partitions in the files, buckets and
    manifests tables)."""
    return "{" + ", ".join("null" if v is None else cast_to_string(v, t) for v, t in zip(values, types,
                                                                                       strict=True)) + "}"


def object_array(values: Sequence[Any], types: Sequence[pa.DataType]) -> str:
    """``Arrays.toString`` of a row's internal objects: ``[v1, v2]`` (key ranges)."""
    return "[" + ", ".join(internal_object(v, t) for v, t in zip(values, types, strict=True)) + "]"


def sorted_map(pairs: Iterable[tuple[str, str]]) -> str:
    """``TreeMap.toString`` of already-rendered values: ``{a=1, b=x}``, keys in order."""
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(pairs)) + "}"
