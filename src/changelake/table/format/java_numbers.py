"""Numbers as Java's ``Double.toString`` / ``Float.toString`` print them and as Paimon's
``Decimal.fromBigDecimal`` makes decimals of them, whole arrays at a time.

Java prints the digits its ``FloatingDecimal`` generates: a whole number below 2**63 from its
integer digits (``developLongDigits``), a value whose generation fits in longs by Steele and
White's method (:mod:`.java_digits`, not always the shortest: ``8.470000000000001E21``), and
otherwise the shortest digits that read back as the same value (Arrow's formatter), with two
where the shortest has one (``4.9E-324``); in plain notation for magnitudes in [1e-3, 1e7)
(``100.0``, ``0.001``) and ``d.dddE<n>`` otherwise (``1.0E20``, ``1.5E-7``); ``NaN``,
``Infinity``. Paimon casts a double to DECIMAL(p, s) through ``BigDecimal.valueOf`` (that
text), rounds HALF_UP to scale ``s`` and gives null when the result needs more than ``p``
digits.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.format import java_digits

# Arrow's shortest text of a finite float: sign, integer digits, fraction digits, exponent
_SHORTEST = r"^(?P<sign>-?)(?P<int>\d+)(?:\.(?P<frac>\d+))?(?:e(?P<exp>[+-]\d+))?$"
_PLAIN_EXPONENTS = range(-3, 7)  # Java's plain notation: 1e-3 <= |x| < 1e7
_WIDEST = 76  # digits of decimal256
# FloatingDecimal.insignificantDigitsNumber: decimal digits a whole number 2**(p2 + 1 + significand
# bits) or more carries beyond its significand's precision
_INSIGNIFICANT = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 8, 8, 8,
                           9, 9, 9, 9, 10, 10, 10, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 14, 14, 14, 15, 15, 15,
                           15, 16, 16, 16, 17, 17, 17, 18, 18, 18, 19])


def float_text(values: pa.Array) -> pa.Array:
    """``values`` (float32 or float64) as Java's ``Float.toString`` / ``Double.toString``."""
    values = _array(values)
    floats = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False))
    digits, exponent, negative = _digits(values, floats)
    finite = np.isfinite(floats)
    text = _scientific(digits, exponent)
    for e in _PLAIN_EXPONENTS:
        rows = pa.array(exponent == e)
        if pc.any(rows).as_py():
            text = pc.replace_with_mask(text, rows, _plain(pc.filter(digits, rows), e))
    text = pc.if_else(pa.array(floats == 0), "0.0", text)
    text = pc.binary_join_element_wise(pc.if_else(pa.array(negative), "-", ""), text, "")
    special = np.where(np.isnan(floats), "NaN", np.where(floats > 0, "Infinity", "-Infinity"))
    text = pc.if_else(pa.array(finite), text, pa.array(special))
    return pc.if_else(values.is_null(), pa.scalar(None, pa.string()), text)


def decimal_from_text(text: pa.Array, precision: int, scale: int) -> pa.Array:
    """Decimal numbers written as text (``-12.5``, ``1.0E20``; all parse) as DECIMAL(precision,
    scale): rounded HALF_UP (ties away from zero) to ``scale``, null where the rounded value
    has more than ``precision`` digits (Paimon's ``Decimal.fromBigDecimal``). Values whose
    magnitude is far out of range must be null already (:func:`beyond`)."""
    # Digits past scale + 1 cannot change a HALF_UP rounding at scale: they are cut first
    # (Arrow's unsafe cast truncates), then the one extra digit rounds.
    wide = pa.decimal256(_WIDEST, min(scale + 1, _WIDEST))
    cut = _array(text).cast(wide, safe=False)
    rounded = pc.round(cut, ndigits=scale, round_mode="half_towards_infinity")
    return _fit(rounded, precision, scale)


def decimal_from_decimal(values: pa.Array, precision: int, scale: int) -> pa.Array:
    """Decimals rescaled to DECIMAL(precision, scale) as Paimon's ``castToDecimal``: HALF_UP,
    null on overflow."""
    values = _array(values)
    source: pa.Decimal128Type = values.type
    if scale >= source.scale and precision - scale >= source.precision - source.scale:
        return values.cast(pa.decimal128(precision, scale))
    wide = pa.decimal256(_WIDEST, min(scale + 1, _WIDEST))
    cut = values.cast(wide, safe=False) if scale + 1 < source.scale else values.cast(wide)
    rounded = pc.round(cut, ndigits=scale, round_mode="half_towards_infinity")
    return _fit(rounded, precision, scale)


def beyond(values: pa.Array, precision: int, scale: int) -> np.ndarray:
    """Where float ``values`` are certainly too large for DECIMAL(precision, scale) (at least
    ten times its largest value), so they are null without being parsed."""
    floats = np.abs(np.asarray(_array(values).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64))
    with np.errstate(invalid="ignore"):
        return np.asarray(floats >= 10.0 ** (precision - scale + 1))


def _fit(rounded: pa.Array, precision: int, scale: int) -> pa.Array:
    """Rounded decimals of scale ``scale`` as DECIMAL(precision, scale), null where too large."""
    limit = pa.scalar(10 ** (precision - scale), pa.decimal256(_WIDEST, 0)).cast(rounded.type)
    overflow = pc.greater_equal(pc.abs(rounded), limit)
    kept = pc.if_else(overflow, pa.scalar(None, rounded.type), rounded)
    target = pa.decimal128(precision, scale)
    # values are within range now; the unsafe cast only drops the scale digits already zero
    return kept.cast(pa.decimal256(_WIDEST, scale), safe=False).cast(target)


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _digits(values: pa.Array, floats: np.ndarray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Per value: its significant digits (no leading or trailing zeros), the power of ten of
    the first (``x = d.ddd * 10**exponent``), and whether it is negative (zeros and
    non-finite values give meaningless digits, replaced by the caller)."""
    finite = np.isfinite(floats)
    source = pa.array(np.where(finite, floats, 1.0).astype(floats.dtype)).cast(pa.string())
    parts = pc.extract_regex(source, _SHORTEST)
    whole, fraction = parts.field("int"), pc.fill_null(parts.field("frac"), "")
    exp_text = pc.if_else(pc.equal(parts.field("exp"), ""), "0", parts.field("exp"))
    raw = pc.binary_join_element_wise(whole, fraction, "")
    significant = pc.utf8_ltrim(raw, characters="0")
    leading = pc.subtract(pc.utf8_length(raw), pc.utf8_length(significant))
    exponent = pc.subtract(pc.add(pc.utf8_length(whole), pc.cast(pc.utf8_ltrim(exp_text, characters="+"),
                                                                  pa.int32())), pa.scalar(1, pa.int32()))
    exponent = pc.subtract(pc.cast(exponent, pa.int64()), pc.cast(leading, pa.int64()))
    digits = pc.utf8_rtrim(significant, characters="0")
    exponents = np.asarray(exponent.to_numpy())
    digits = _two_digits_where_one(digits, exponents, floats)
    digits, exponents = _long_digits(digits, exponents, floats)
    digits, exponents = _steele_white_digits(digits, exponents, floats)
    return digits, exponents, np.asarray(np.signbit(floats))


def _steele_white_digits(digits: pa.Array, exponent: np.ndarray, floats: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Java's own digits where its digit generation runs in ints or longs
    (:func:`java_digits.long_path`), in place of the shortest."""
    magnitude = np.abs(floats.astype(np.float64))
    usable = np.isfinite(magnitude) & (magnitude > 0)
    chosen, generated, count, first = java_digits.long_path(np.where(usable, magnitude, 1.0),
                                                            single=floats.dtype == np.float32)
    chosen &= usable
    if not chosen.any():
        return digits, exponent
    widths = count[chosen]
    text = pa.array(generated[chosen]).cast(pa.string())
    short = widths > np.asarray(pc.utf8_length(text).to_numpy())
    for width in np.unique(widths[short]):  # a leading zero digit is Java's too (rare)
        rows = pa.array(short & (widths == width))
        text = pc.replace_with_mask(text, rows, pc.utf8_lpad(pc.filter(text, rows), width=int(width), padding="0"))
    exponent = exponent.copy()
    exponent[chosen] = first[chosen]
    return pc.replace_with_mask(digits, pa.array(chosen), text), exponent


def _long_digits(digits: pa.Array, exponent: np.ndarray, floats: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Java prints a whole number below 2**63 from its integer digits, rounding away only the
    digits its significand cannot hold (``FloatingDecimal.developLongDigits``): more digits
    than the shortest text for some numbers past 2**53 (2**24 for a float)."""
    magnitude = np.abs(floats.astype(np.float64))
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(magnitude) & (magnitude >= 1) & (magnitude < 2.0**63) & (magnitude == np.floor(magnitude))
    if not whole.any():
        return digits, exponent
    significant_bits = 24 if floats.dtype == np.float32 else 53
    values = magnitude[whole].astype(np.uint64)
    binary_exponent = np.frexp(magnitude[whole])[1] - 1
    extra = binary_exponent - significant_bits - 1
    dropped = np.where((binary_exponent > significant_bits) & (extra > 1),
                       _INSIGNIFICANT[np.clip(extra, 0, len(_INSIGNIFICANT) - 1)], 0)
    scale = np.power(np.uint64(10), dropped.astype(np.uint64))
    kept = values // scale + (values % scale >= scale // np.uint64(2)).astype(np.uint64) * (dropped > 0)
    text = pa.array(kept).cast(pa.string())
    exponent = exponent.copy()
    exponent[whole] = np.asarray(pc.utf8_length(text).to_numpy()) - 1 + dropped
    return pc.replace_with_mask(digits, pa.array(whole), pc.utf8_rtrim(text, characters="0")), exponent


def _two_digits_where_one(digits: pa.Array, exponent: np.ndarray, floats: np.ndarray) -> pa.Array:
    """Java prints at least two significant digits, the two closest to the value: where the
    shortest text has one, they are the value's own two leading digits rounded (``4.9`` for
    Double.MIN_VALUE, whose shortest text is ``5``; ``1.0`` for 1e20, printed ``1``)."""
    one = np.asarray(pc.equal(pc.utf8_length(digits), 1).to_numpy(zero_copy_only=False)) & np.isfinite(floats)
    if not one.any():
        return digits
    # the value scaled to [10, 100) in long double where it fits, and rounded to two digits
    magnitude = np.abs(floats[one].astype(np.longdouble))
    scaled = magnitude * np.power(np.longdouble(10), (1 - exponent[one]).astype(np.longdouble))
    two = np.rint(scaled).astype(np.int64)
    shortest = np.asarray(pc.cast(pc.filter(digits, pa.array(one)), pa.int64()).to_numpy())
    two = np.where((two >= 10) & (two < 100), two, shortest * 10)
    text = pc.utf8_rtrim(pa.array(two).cast(pa.string()), characters="0")
    return pc.replace_with_mask(digits, pa.array(one), text)


def _scientific(digits: pa.Array, exponent: np.ndarray) -> pa.Array:
    first = pc.utf8_slice_codeunits(digits, 0, 1)
    rest = pc.utf8_slice_codeunits(digits, 1, 64)
    rest = pc.if_else(pc.equal(rest, ""), "0", rest)
    return pc.binary_join_element_wise(first, ".", rest, "E", pa.array(exponent).cast(pa.string()), "")


def _plain(digits: pa.Array, exponent: int) -> pa.Array:
    """``digits`` as plain notation where the first digit is at ``10**exponent``."""
    if exponent < 0:
        return pc.binary_join_element_wise("0." + "0" * (-exponent - 1), digits, "")
    whole = pc.utf8_rpad(pc.utf8_slice_codeunits(digits, 0, exponent + 1), width=exponent + 1, padding="0")
    fraction = pc.utf8_slice_codeunits(digits, exponent + 1, 64)
    return pc.binary_join_element_wise(whole, ".", pc.if_else(pc.equal(fraction, ""), "0", fraction), "")
