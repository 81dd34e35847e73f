"""Values of a file written before its column's type changed, cast to the column's type as
Paimon's ``CastExecutors`` cast them (Java Paimon 0.9's ``org.apache.paimon.casting`` rules),
whole arrays at a time.

Paimon changes a column's type to any type its ``CastExecutors`` resolve a rule for, and its
readers cast every older file's values with that rule; Java's semantics differ from Arrow's
casts in many places, all followed here:

- integer to narrower integer wraps (``Number.byteValue``); FLOAT/DOUBLE to an integer
  truncates toward zero and saturates at the int (or long) range, NaN giving 0, then wraps;
- to DECIMAL(p, s) rounds HALF_UP (ties away from zero) and gives null when the value needs
  more than ``p`` digits; a double goes through its ``Double.toString`` text, a FLOAT through
  that of the double it widens to (``0.1f`` is 0.10000000149011612);
- DECIMAL to an integer truncates toward zero; to DOUBLE divides the unscaled long by 10^s
  (precision up to 18) or rounds the exact value;
- FLOAT/DOUBLE to text is ``Float.toString`` / ``Double.toString`` (``1.0``, ``1.0E20``), a
  decimal's is plain (``1.50``), a boolean's ``true``/``false``; CHAR(n) pads with spaces and
  CHAR(n) / VARCHAR(n) cut longer text; BINARY(n) pads with zero bytes, VARBINARY(n) cuts;
- text to an integer takes an optional sign, digits and an ignored fraction (``"1.9"`` is 1);
  to a boolean ``t``/``true``/``y``/``yes``/``1`` or ``f``/``false``/``n``/``no``/``0`` in any
  case; to DECIMAL as ``new BigDecimal(text)``; text that does not parse fails the read
  (DataError), as Java's read fails;
- an integer to BOOLEAN is ``intValue() != 0`` (a BIGINT by its low 32 bits).

Date and time rules are in :mod:`.temporal_casts`, number text in :mod:`.java_numbers`.
Nested types (Paimon 0.9 has no rule for them) keep Arrow's cast.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError
from changelake.table.format import java_numbers, temporal_casts, types
from changelake.table.format.types import PaimonType, root

INTEGERS = frozenset({"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"})
FLOATS = frozenset({"FLOAT", "DOUBLE"})
TEXT = frozenset({"CHAR", "VARCHAR", "STRING"})
BYTES = frozenset({"BINARY", "VARBINARY", "BYTES"})
TEMPORAL = frozenset({"DATE", "TIMESTAMP", "TIMESTAMP_LTZ", "TIME"})
_TRUE = pa.array(["t", "true", "y", "yes", "1"])
_FALSE = pa.array(["f", "false", "n", "no", "0"])
_JAVA_INT = r"^[+-]?(?P<whole>\d*)(?:\.\d*)?$"
_JAVA_DECIMAL = r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$"
# Double.parseDouble: blanks around, an optional d/f suffix, Java's names of the specials
_JAVA_DOUBLE = r"^[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[dDfF]?$"

Rule = Callable[[pa.Array, PaimonType, PaimonType], pa.Array]


def cast(values: pa.ChunkedArray | pa.Array, source: PaimonType, target: PaimonType, *,
         table: str, column: str, file: str) -> pa.Array:
    """``values`` of type ``source`` (as read from a file of an older schema) as ``target``
    values, by Paimon's cast rule for the two; DataError naming the column and file where
    a value fails the rule (Java Paimon's read fails on it too)."""
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    arrow_target = types.to_arrow(target)
    rule = _rule(root(source)[0], root(target)[0])
    try:
        result = array.cast(arrow_target) if rule is None else rule(array, source, target)
    except (pa.ArrowInvalid, ValueError) as exc:
        raise DataError(f"values written as {types.sql_string(source)} cannot be read as "
                        f"{types.sql_string(target)} (Paimon's cast fails too): {exc}",
                        table=table, column=column, file=file) from None
    return result if result.type == arrow_target else result.cast(arrow_target)


def check_held(values: pa.ChunkedArray | pa.Array, cast_values: pa.Array, source: PaimonType, target: PaimonType, *,
               table: str, column: str, file: str) -> None:
    """DataError unless the integers or decimals ``values`` (of a file newer than its reader,
    written as ``source``) came through their cast to the reader's narrower ``target`` unchanged:
    Paimon's cast would wrap an integer or null a decimal, and the reader get other values."""
    if root(target)[0] not in INTEGERS and root(target)[0] != "DECIMAL":
        return
    original = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if not cast(cast_values, target, source, table=table, column=column, file=file).equals(original):
        raise DataError(f"a value written as {types.sql_string(source)} does not fit {types.sql_string(target)}, "
                        "the type of the older schema this read is in (a stream keeps the schema it began "
                        "with): read in the table's newest schema (option scan.time-travel.schema=latest)",
                        table=table, column=column, file=file)


def _rule(source: str, target: str) -> Rule | None:
    """Paimon's rule for ``source`` to ``target`` roots; None where Arrow's cast is that rule
    or Paimon has none."""
    if source in TEMPORAL or target in TEMPORAL:
        return temporal_casts.rule(source, target)
    numeric = INTEGERS | FLOATS
    if target in TEXT:
        return _to_text
    if source in TEXT:
        from_text: dict[str, Rule] = {"BOOLEAN": _text_to_boolean, "DECIMAL": _text_to_decimal}
        if target in BYTES:
            return _text_to_binary
        return from_text.get(target, _text_to_integer if target in INTEGERS else
                             _text_to_float if target in FLOATS else None)
    if target in BYTES:
        return _to_binary if source in BYTES else None
    rules: list[tuple[bool, Rule]] = [
        (source in numeric and target in numeric, _numeric_to_numeric),
        (source in numeric and target == "DECIMAL", _number_to_decimal),
        (source == "DECIMAL" and target == "DECIMAL", _decimal_to_decimal),
        (source == "DECIMAL" and target in numeric, _decimal_to_number),
        (source == "BOOLEAN" and (target in numeric or target == "DECIMAL"), _boolean_to_number),
        (source in INTEGERS and target == "BOOLEAN", _integer_to_boolean),
    ]
    return next((rule for applies, rule in rules if applies), None)


# -- numbers ----------------------------------------------------------------------------------

def _numbers(array: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """The values as numpy (nulls as 0) and the validity to put back."""
    return np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False)), array.is_null()


def _with_nulls(values: np.ndarray, nulls: pa.Array, data_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=data_type, mask=np.asarray(nulls.to_numpy(zero_copy_only=False)))


def _java_integral(floats: np.ndarray, *, long: bool) -> np.ndarray:
    """Java's ``(int) d`` / ``(long) d``: toward zero, saturating, NaN 0."""
    whole = np.trunc(np.nan_to_num(floats.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
    if not long:
        return np.clip(whole, -(2.0**31), 2.0**31 - 1).astype(np.int64)
    big = whole >= 2.0**63
    small = whole < -(2.0**63)
    safe = np.where(big | small, 0.0, whole).astype(np.int64)
    return np.where(big, np.iinfo(np.int64).max, np.where(small, np.iinfo(np.int64).min, safe))


def _numeric_to_numeric(array: pa.Array, source: PaimonType, target: PaimonType) -> pa.Array:
    arrow_target = types.to_arrow(target)
    source_root, target_root = root(source)[0], root(target)[0]
    if source_root in INTEGERS and target_root in INTEGERS:
        return array.cast(arrow_target, safe=False)  # Number.intValue() and friends wrap
    values, nulls = _numbers(array)
    if target_root in FLOATS:
        with np.errstate(over="ignore"):  # a double too large for a float is infinite, as in Java
            return _with_nulls(values.astype(arrow_target.to_pandas_dtype()), nulls, arrow_target)
    integral = _java_integral(values, long=target_root == "BIGINT")
    return _with_nulls(integral.astype(arrow_target.to_pandas_dtype()), nulls, arrow_target)


def _number_to_decimal(array: pa.Array, source: PaimonType, target: PaimonType) -> pa.Array:
    precision, scale = root(target)[1]
    if root(source)[0] in INTEGERS:
        return java_numbers.decimal_from_text(array.cast(pa.string()), precision, scale)
    doubles = array.cast(pa.float64())  # Number.doubleValue(): a FLOAT widens exactly
    values, _ = _numbers(doubles)
    if not np.isfinite(values).all():
        raise ValueError("NaN and infinite values have no decimal (BigDecimal.valueOf fails on them)")
    beyond = java_numbers.beyond(doubles, precision, scale)
    text = pc.if_else(pa.array(beyond), pa.scalar(None, pa.string()), java_numbers.float_text(doubles))
    return java_numbers.decimal_from_text(text, precision, scale)


def _decimal_to_decimal(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    precision, scale = root(target)[1]
    return java_numbers.decimal_from_decimal(array, precision, scale)


def _decimal_to_number(array: pa.Array, source: PaimonType, target: PaimonType) -> pa.Array:
    arrow_target = types.to_arrow(target)
    if root(target)[0] in INTEGERS:  # castToIntegral: toward zero, then the narrowing wraps
        return array.cast(pa.int64(), safe=False).cast(arrow_target, safe=False)
    precision, scale = root(source)[1]
    if precision <= 18:  # DecimalUtils.doubleValue: the unscaled long over 10^scale, in doubles
        unscaled = pc.cast(pc.replace_substring(array.cast(pa.string()), ".", ""), pa.int64())
        values, nulls = _numbers(unscaled)
        doubles = values.astype(np.float64) / np.float64(10.0**scale)
    else:  # BigDecimal.doubleValue: the exact value rounded
        values, nulls = _numbers(array.cast(pa.string()).cast(pa.float64()))
        doubles = values
    return _with_nulls(doubles.astype(arrow_target.to_pandas_dtype()), nulls, arrow_target)


def _boolean_to_number(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    ones = array.cast(pa.int32())
    if root(target)[0] == "DECIMAL":
        precision, scale = root(target)[1]
        return java_numbers.decimal_from_text(ones.cast(pa.string()), precision, scale)
    return ones.cast(types.to_arrow(target))


def _integer_to_boolean(array: pa.Array, _source: PaimonType, _target: PaimonType) -> pa.Array:
    return pc.not_equal(array.cast(pa.int32(), safe=False), 0)  # intValue() != 0


# -- text -------------------------------------------------------------------------------------

def _to_text(array: pa.Array, source: PaimonType, target: PaimonType) -> pa.Array:
    """Any value as Paimon prints it, then fitted to CHAR(n) / VARCHAR(n)."""
    source_root = root(source)[0]
    if source_root in FLOATS:
        text = java_numbers.float_text(array)
    elif source_root in BYTES:
        text = array.cast(pa.string())  # BinaryString.fromBytes: the bytes as UTF-8
    else:
        text = array.cast(pa.string())  # integers, decimals (plain), booleans, text
    return _fit_text(text, target)


def _fit_text(text: pa.Array, target: PaimonType) -> pa.Array:
    """BinaryStringUtils.toCharacterString: cut to the length, CHAR padded with spaces."""
    name, params = root(target)
    if name == "STRING" or not params:
        return text
    cut = pc.utf8_slice_codeunits(text, 0, params[0])
    return pc.utf8_rpad(cut, width=params[0], padding=" ") if name == "CHAR" else cut


def _checked(text: pa.Array, pattern: str, what: str) -> None:
    """ValueError naming the first value of ``text`` that does not match ``pattern``."""
    bad = pc.invert(pc.fill_null(pc.match_substring_regex(text, pattern), True))
    if pc.any(bad).as_py():
        first = pc.filter(text, bad)[0].as_py()
        raise ValueError(f"{first!r} is not {what}")


def _text_to_integer(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """BinaryStringUtils.toInt / toLong (toByte, toShort: toInt checked to fit): the fraction
    is dropped, anything else that is not a digit fails, as does a value out of range."""
    _checked(array, _JAVA_INT, "a whole number")
    sign_alone = pc.fill_null(pc.is_in(array, pa.array(["", "+", "-"])), False)
    if pc.any(sign_alone).as_py():
        raise ValueError("an empty text or a lone sign is not a whole number")
    whole = pc.extract_regex(array, _JAVA_INT).field("whole")
    negative = pc.starts_with(array, "-")
    digits = pc.if_else(pc.equal(whole, ""), "0", whole)
    numbers = pc.binary_join_element_wise(pc.if_else(negative, "-", ""), digits, "").cast(pa.int64())
    return numbers.cast(types.to_arrow(target))  # a safe cast: out of range fails, as Java's


def _text_to_float(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """Double.parseDouble / Float.parseFloat (the float rounded once, from the text)."""
    trimmed = pc.utf8_trim_whitespace(array)
    _checked(trimmed, _JAVA_DOUBLE, "a number")
    plain = pc.replace_substring_regex(trimmed, r"[dDfF]$", "")
    plain = pc.replace_substring(pc.replace_substring(plain, "Infinity", "inf"), "NaN", "nan")
    return plain.cast(types.to_arrow(target))


def _text_to_decimal(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """``new BigDecimal(text)`` (no blanks), HALF_UP to the scale, null when too large."""
    _checked(array, _JAVA_DECIMAL, "a decimal number")
    precision, scale = root(target)[1]
    beyond = java_numbers.beyond(array.cast(pa.float64()), precision, scale)
    text = pc.if_else(pa.array(beyond), pa.scalar(None, pa.string()), array)
    return java_numbers.decimal_from_text(text, precision, scale)


def _text_to_boolean(array: pa.Array, _source: PaimonType, _target: PaimonType) -> pa.Array:
    lower = pc.utf8_lower(array)
    yes, no = pc.is_in(lower, _TRUE), pc.is_in(lower, _FALSE)
    unknown = pc.and_(pc.invert(pc.or_(yes, no)), array.is_valid())
    if pc.any(unknown).as_py():
        raise ValueError(f"{pc.filter(array, unknown)[0].as_py()!r} is not a boolean")
    return pc.if_else(array.is_null(), pa.scalar(None, pa.bool_()), yes)


# -- bytes ------------------------------------------------------------------------------------

def _text_to_binary(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    return _to_binary(array.cast(pa.binary()), _source, target)


def _to_binary(array: pa.Array, _source: PaimonType, target: PaimonType) -> pa.Array:
    """BinaryStringUtils.toBinaryString: BINARY(n) cut or padded with zero bytes to ``n``,
    VARBINARY(n) cut to ``n``."""
    name, params = root(target)
    data = array.cast(pa.binary())
    if name == "BYTES" or not params:
        return data
    cut = pc.binary_slice(data, 0, params[0])
    if name == "VARBINARY":
        return cut
    zeros = pa.repeat(pa.scalar(b"\x00" * params[0]), len(cut))
    return pc.binary_slice(pc.binary_join_element_wise(cut, zeros, b""), 0, params[0])
