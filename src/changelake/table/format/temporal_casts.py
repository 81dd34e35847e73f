"""Paimon's cast rules for dates and timestamps (Java Paimon 0.9's ``TimestampToTimestamp``,
``DateToTimestamp``, ``TimestampToDate``, ``TimestampToNumericPrimitive``,
``NumericPrimitiveToTimestamp``, ``DateToString``, ``TimestampToString``, ``StringToDate``
and ``StringToTimestamp`` rules), whole arrays at a time.

Java works on milliseconds and nanoseconds within the millisecond, dividing with Java's
integer division (toward zero): a timestamp cut to a precision of 3 or less moves toward the
epoch (``1969-12-31 23:59:59.5`` at precision 0 is ``1970-01-01 00:00:00``), and so does a
timestamp made a date or a number of seconds. Text is
``yyyy-MM-dd HH:mm:ss`` with a fraction of at least ``precision`` digits (trailing zeros
beyond it dropped). Java turns local-time-zone timestamps with the JVM's default zone; here
that zone is UTC, the zone changelake gives every TIMESTAMP_LTZ. A TIME is milliseconds of the
day, as in Java; text to TIME keeps Arrow's cast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.format import types
from changelake.table.format.types import PaimonType, root

Rule = Callable[[pa.Array, PaimonType, PaimonType], pa.Array]
_TIMESTAMPS = frozenset({"TIMESTAMP", "TIMESTAMP_LTZ"})
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_MILLIS_PER_DAY = 86_400_000


def rule(source: str, target: str) -> Rule | None:
    """The rule for ``source`` to ``target`` roots, one of them DATE, TIMESTAMP,
    TIMESTAMP_LTZ or TIME; None for Arrow's cast (text to TIME)."""
    text = {"CHAR", "VARCHAR", "STRING"}
    rules: list[tuple[bool, Rule]] = [
        (source in _TIMESTAMPS and target in _TIMESTAMPS, _timestamp_to_timestamp),
        (source == "DATE" and target in _TIMESTAMPS, _date_to_timestamp),
        (source in _TIMESTAMPS and target == "DATE", _timestamp_to_date),
        (source in _TIMESTAMPS and target in ("INT", "BIGINT"), _timestamp_to_seconds),
        (source in ("INT", "BIGINT") and target in _TIMESTAMPS, _seconds_to_timestamp),
        (source == "DATE" and target in text, _date_to_text),
        (source in _TIMESTAMPS and target in text, _timestamp_to_text),
        (source in text and target == "DATE", _text_to_date),
        (source in text and target in _TIMESTAMPS, _text_to_timestamp),
        (source == "TIME" and target in text, _time_to_text),
        (source in _TIMESTAMPS and target == "TIME", _timestamp_to_time),
        (source == "TIME" and target in _TIMESTAMPS, _time_to_timestamp),
    ]
    return next((r for applies, r in rules if applies), None)


def _precision(paimon_type: PaimonType) -> int:
    return _precision_or(paimon_type, 6)


def _precision_or(paimon_type: PaimonType, default: int) -> int:
    params = root(paimon_type)[1]
    return params[0] if params else default


def _parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Milliseconds since the epoch (floored, as Paimon's Timestamp keeps them), nanoseconds
    within the millisecond (0..999999), and the null mask."""
    unit = array.type.unit
    values = np.asarray(array.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    per_milli = _PER_SECOND[unit] // 1000 if unit in ("us", "ns") else 1
    if unit == "s":
        return values * 1000, np.zeros_like(values), _nulls(array)
    millis = values // per_milli
    return millis, (values - millis * per_milli) * (1_000_000 // per_milli), _nulls(array)


def _nulls(array: pa.Array) -> np.ndarray:
    return np.asarray(array.is_null().to_numpy(zero_copy_only=False))


def _java_div(values: np.ndarray, divisor: int) -> np.ndarray:
    """Java's long division: toward zero."""
    return np.where(values < 0, -((-values) // divisor), values // divisor)


def _timestamp(millis: np.ndarray, nanos: np.ndarray, nulls: np.ndarray, target: PaimonType) -> pa.Array:
    """Milliseconds and nanoseconds within them as ``target`` timestamps."""
    arrow_type = types.to_arrow(target)
    unit = arrow_type.unit
    if unit in ("s", "ms"):
        values = millis // (1000 if unit == "s" else 1)
    else:
        per_milli = _PER_SECOND[unit] // 1000
        values = millis * per_milli + nanos // (1_000_000 // per_milli)
    return pa.array(values, pa.int64(), mask=nulls).cast(arrow_type)


def _timestamp_to_timestamp(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """DateTimeUtils.truncate: precision 3 or less zeroes the milliseconds' last digits (Java
    division, toward zero), a finer one the nanoseconds' last digits."""
    millis, nanos, nulls = _parts(array)
    precision = _precision(target)
    if precision <= 3:
        step = 10 ** (3 - precision)
        millis, nanos = _java_div(millis, step) * step, np.zeros_like(nanos)
    else:
        step = 10 ** (9 - precision)
        nanos = nanos // step * step
    return _timestamp(millis, nanos, nulls, target)


def _date_to_timestamp(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    days = np.asarray(array.cast(pa.int32()).fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
    return _timestamp(days * _MILLIS_PER_DAY, np.zeros_like(days), _nulls(array), target)


def _timestamp_to_date(array: pa.Array, _source: PaimonType, _target: PaimonType) -> pa.Array:
    """``(int) (millis / MILLIS_PER_DAY)``: before 1970, toward the epoch."""
    millis, _, nulls = _parts(array)
    days = _java_div(millis, _MILLIS_PER_DAY).astype(np.int32)
    return pa.array(days, pa.int32(), mask=nulls).cast(pa.date32())


def _timestamp_to_seconds(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """``unixTimestamp(millis)``: milliseconds / 1000 toward zero; INT wraps."""
    millis, _, nulls = _parts(array)
    seconds = pa.array(_java_div(millis, 1000), pa.int64(), mask=nulls)
    return seconds.cast(types.to_arrow(target), safe=False)


def _seconds_to_timestamp(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    seconds = np.asarray(array.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    return _timestamp(seconds * 1000, np.zeros_like(seconds), _nulls(array), target)


def _date_to_text(array: pa.Array, _source: PaimonType, _target: PaimonType) -> pa.Array:
    return array.cast(pa.string())  # DateTimeUtils.formatDate: yyyy-MM-dd


def _timestamp_to_text(array: pa.Array, source: PaimonType, _target: PaimonType) -> pa.Array:
    """DateTimeUtils.formatTimestamp: ``yyyy-MM-dd HH:mm:ss`` and the nanoseconds of the second
    as nine digits, trailing zeros dropped down to ``precision`` digits (none at 0)."""
    millis, nanos, nulls = _parts(array)
    seconds = np.floor_divide(millis, 1000)
    of_second = (millis - seconds * 1000) * 1_000_000 + nanos
    whole = pa.array(seconds, pa.int64(), mask=nulls).cast(pa.timestamp("s"))
    text = pc.strftime(whole, format="%Y-%m-%d %H:%M:%S")
    nine = pc.utf8_lpad(pa.array(of_second).cast(pa.string()), width=9, padding="0")
    significant = 9 - np.asarray(pc.subtract(pc.utf8_length(nine), pc.utf8_length(
        pc.utf8_rtrim(nine, characters="0"))).to_numpy())
    keep = np.maximum(significant, _precision(source))
    result = text
    for length in np.unique(keep):
        if length == 0:
            continue
        fraction = pc.utf8_slice_codeunits(nine, 0, int(length))
        with_fraction = pc.binary_join_element_wise(text, fraction, ".")
        result = pc.if_else(pa.array(keep == length), with_fraction, result)
    return result


# DateTimeUtils.parseDate: up to the first blank (not a leading one), y[-m[-d]] with blanks
# around each part; DEFAULT_TIMESTAMP_FORMATTER: yyyy-M-d with an optional " H:m:s[.fraction]"
_DATE_PART = r"^([^ ]+) .*$"
_DATE = r"^\s*(?P<y>\d+)\s*(?:-\s*(?P<m>\d+)\s*(?:-\s*(?P<d>\d+)\s*)?)?$"
_TIMESTAMP = (r"^(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})"
              r"(?: (?P<h>\d{1,2}):(?P<mi>\d{1,2}):(?P<s>\d{1,2})(?:\.(?P<f>\d{0,9}))?)?$")


def _fields(array: pa.Array, pattern: str, defaults: dict[str, int], what: str) -> dict[str, np.ndarray]:
    """The named groups of ``pattern`` in each value as integers (``defaults`` where a group
    is absent); ValueError naming the first value that does not match."""
    matched = pc.fill_null(pc.match_substring_regex(array, pattern), True)
    if not pc.all(matched).as_py():
        raise ValueError(f"{pc.filter(array, pc.invert(matched))[0].as_py()!r} is not {what}")
    parts = pc.extract_regex(pc.fill_null(array, _EPOCH_TEXT), pattern)
    fields = {}
    for name, default in defaults.items():
        text = pc.fill_null(parts.field(name), "")
        if name == "f":  # the fraction as nanoseconds
            text = pc.if_else(pc.equal(text, ""), text, pc.utf8_rpad(text, width=9, padding="0"))
        text = pc.if_else(pc.equal(text, ""), str(default), text)
        fields[name] = np.asarray(text.cast(pa.int64()).to_numpy())
    return fields


_EPOCH_TEXT = "1970-01-01"


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (valid ones)."""
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    of_era = y - era * 400
    of_year = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    of_cycle = of_era * 365 + of_era // 4 - of_era // 100 + of_year
    return np.asarray(era * 146097 + of_cycle - 719468)


def _month_days(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    following_year = year + (month == 12)
    following = np.where(month == 12, 1, month + 1)
    first = np.ones_like(month)
    return np.asarray(_days_from_civil(following_year, following, first) - _days_from_civil(year, month, first))


def _text_to_date(array: pa.Array, _source: PaimonType, _target: PaimonType) -> pa.Array:
    """BinaryStringUtils.toDate: digits alone are days since the epoch; else a date as
    DateTimeUtils.parseDate reads it (``2024-2-9``, ``2024-02-29 12:00``, ``2024``), one that
    does not exist failing."""
    nulls = _nulls(array)
    numeric = np.asarray(pc.fill_null(pc.match_substring_regex(array, r"^\d+$"), False).to_numpy(zero_copy_only=False))
    text = pc.replace_substring_regex(array, _DATE_PART, r"\1")
    dated = pc.if_else(pa.array(numeric), pa.scalar(None, pa.string()), text)
    parts = _fields(dated, _DATE, {"y": 1970, "m": 1, "d": 1}, "a date")
    year, month, day = parts["y"], parts["m"], parts["d"]
    given = ~numeric & ~nulls
    valid = (year <= 9999) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)
    valid &= day <= np.where(valid, _month_days(np.where(valid, year, 1970), np.where(valid, month, 1)), 31)
    if (given & ~valid).any():
        raise ValueError(f"{array[int(np.argmax(given & ~valid))].as_py()!r} is not a date")
    days = _days_from_civil(np.where(valid, year, 1970), np.where(valid, month, 1), np.where(valid, day, 1))
    whole = pc.if_else(pa.array(numeric), array, pa.scalar(None, pa.string())).cast(pa.int32())
    days = np.where(numeric, np.asarray(whole.fill_null(0).to_numpy(zero_copy_only=False)), days)
    return pa.array(days.astype(np.int32), pa.int32(), mask=nulls).cast(pa.date32())


def _text_to_timestamp(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """DateTimeUtils.parseTimestampData: ``yyyy-M-d`` with an optional ``H:m:s`` and fraction
    (no blanks around), resolved as Java's SMART resolver does (a day past the month's end is
    its last day, 24:00:00 the next day's start), the fraction cut to the precision."""
    nulls = _nulls(array)
    parts = _fields(array, _TIMESTAMP, {"y": 1970, "m": 1, "d": 1, "h": 0, "mi": 0, "s": 0, "f": 0}, "a timestamp")
    year, month, day = parts["y"], parts["m"], parts["d"]
    hour, minute, second, nanos = parts["h"], parts["mi"], parts["s"], parts["f"]
    midnight_after = (hour == 24) & (minute == 0) & (second == 0) & (nanos == 0)
    valid = (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31) & ((hour < 24) | midnight_after)
    valid &= (minute < 60) & (second < 60)
    bad = ~valid & ~nulls
    if bad.any():
        raise ValueError(f"{array[int(np.argmax(bad))].as_py()!r} is not a timestamp")
    month = np.where(valid, month, 1)
    day = np.minimum(np.where(valid, day, 1), _month_days(year, month))
    seconds = (_days_from_civil(year, month, day) * 86_400 + np.where(midnight_after, 86_400, hour * 3600)
               + minute * 60 + second)
    step = 10 ** (9 - min(_precision(target), 9))
    nanos = nanos // step * step
    values = pa.array(seconds * 1_000_000_000 + nanos, pa.int64(), mask=nulls).cast(pa.timestamp("ns"))
    return _timestamp_to_timestamp(values, "TIMESTAMP(9)", target)


def _time_millis(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A TIME's milliseconds of the day (Java keeps no finer part) and the null mask."""
    as_int = pa.int32() if array.type.bit_width == 32 else pa.int64()
    values = np.asarray(array.cast(as_int).fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
    return (values // 1000 if array.type.unit == "us" else values), _nulls(array)


def _time_to_text(array: pa.Array, source: PaimonType, _target: PaimonType) -> pa.Array:
    """DateTimeUtils.formatTimestampMillis: ``HH:mm:ss``, then for a precision above 0 the
    milliseconds' digits up to the precision, trailing zeros dropped but one kept."""
    millis, nulls = _time_millis(array)
    millis = np.mod(millis, _MILLIS_PER_DAY)  # Java adds days until it is not negative
    hours, minutes, seconds = millis // 3_600_000, millis // 60_000 % 60, millis // 1000 % 60
    text = pc.binary_join_element_wise(*(_two_digits(part, nulls) for part in (hours, minutes, seconds)), ":")
    precision = min(_precision_or(source, 0), 3)
    if precision == 0:
        return text
    three = pc.utf8_lpad(pa.array(millis % 1000).cast(pa.string()), width=3, padding="0")
    fraction = pc.utf8_rtrim(pc.utf8_slice_codeunits(three, 0, precision), characters="0")
    fraction = pc.if_else(pc.equal(fraction, ""), "0", fraction)
    return pc.binary_join_element_wise(text, fraction, ".")


def _timestamp_to_time(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """``(int) (millis % MILLIS_PER_DAY)``: Java's remainder, negative before 1970."""
    millis, _, nulls = _parts(array)
    of_day = np.fmod(millis, _MILLIS_PER_DAY)
    arrow_type = types.to_arrow(target)
    values = of_day * 1000 if arrow_type.unit == "us" else of_day
    return pa.array(values, pa.int64(), mask=nulls).cast(pa.int32() if arrow_type.bit_width == 32 else pa.int64()) \
        .cast(arrow_type)


def _time_to_timestamp(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """``Timestamp.fromEpochMillis(time)``: that time of 1970-01-01."""
    millis, nulls = _time_millis(array)
    return _timestamp(millis, np.zeros_like(millis), nulls, target)


def _two_digits(values: np.ndarray, nulls: np.ndarray) -> pa.Array:
    return pc.utf8_lpad(pa.array(values, pa.int64(), mask=nulls).cast(pa.string()), width=2, padding="0")
