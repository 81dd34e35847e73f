"""The digits Java 17's ``Double.toString`` / ``Float.toString`` print where its
``FloatingDecimal.dtoa`` works in 32- or 64-bit integers, whole arrays at a time.

Java 17 generates digits with Steele and White's method and a symmetric stopping test: for
most values that is the shortest text, but not for all (``8.47E21`` prints as
``8.470000000000001E21``, ``1.0E23`` as ``9.999999999999999E22``). Where the method's numbers
fit in a long (values of moderate exponent: the common case) its steps are followed here
exactly, ints and longs wrapping as Java's do; values that need its big integers keep the
shortest text (:mod:`.java_numbers`).
"""

from __future__ import annotations

import numpy as np

# FDBigInteger.LONG_5_POW and FloatingDecimal.N_5_BITS (approximately ceil(log2(5**i)))
_FIVE_POW = np.array([5**i for i in range(27)], dtype=np.int64)
_FIVE_BITS = np.array([0, 3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28, 31, 33, 35, 38, 40, 42, 45, 47, 49, 52, 54,
                       56, 59, 61])
_SIGNIFICAND = 53  # bits of a double's significand (Java shifts a float's to the same place)
_MAX_DIGITS = 20


def long_path(magnitude: np.ndarray, *, single: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For finite non-zero ``magnitude`` (float64 holding doubles, or floats when
    ``single``): where Java's digit generation runs in ints or longs (mask), and there its
    digits as an integer, their count and the power of ten of the first digit."""
    size = len(magnitude)
    mantissa, exponent = np.frexp(magnitude)
    fract = (mantissa * 2.0**_SIGNIFICAND).astype(np.int64)  # the normalized significand, hidden bit at 52
    bin_exp = exponent.astype(np.int64) - 1
    normal_bits, subnormal_base = (24, 149) if single else (53, 1074)
    smallest_normal = 2.0**-126 if single else 2.0**-1022
    significant_bits = np.where(magnitude < smallest_normal, exponent.astype(np.int64) + subnormal_base, normal_bits)
    low_bit = fract & -fract
    tail_zeros = np.log2(low_bit.astype(np.float64)).astype(np.int64)
    fract_bits = _SIGNIFICAND - tail_zeros
    tiny_bits = np.maximum(0, fract_bits - bin_exp - 1)
    dec_exp = _estimate_dec_exp(mantissa, bin_exp)

    b5 = np.maximum(0, -dec_exp)
    b2 = b5 + tiny_bits + bin_exp
    s5 = np.maximum(0, dec_exp)
    s2 = s5 + tiny_bits
    m2 = b2 - significant_bits
    b2 = b2 - (fract_bits - 1)
    common = np.minimum(b2, s2)
    b2, s2, m2 = b2 - common, s2 - common, m2 - common
    m2 = np.where(fract_bits == 1, m2 - 1, m2)  # the ULP below a power of two is half as wide
    negative_m2 = np.minimum(m2, 0)
    b2, s2, m2 = b2 - negative_m2, s2 - negative_m2, m2 - negative_m2
    b_bits = fract_bits + b2 + np.where(b5 < len(_FIVE_BITS), _FIVE_BITS[np.minimum(b5, 26)], b5 * 3)
    ten_s_bits = s2 + 1 + np.where(s5 + 1 < len(_FIVE_BITS), _FIVE_BITS[np.minimum(s5 + 1, 26)], (s5 + 1) * 3)
    easy_whole = (tiny_bits == 0) & (bin_exp <= 62) & (bin_exp >= -21)  # developLongDigits' case, not this one
    chosen = (b_bits < 64) & (ten_s_bits < 64) & ~easy_whole
    ints = chosen & (b_bits < 32) & (ten_s_bits < 32)

    digits = np.zeros(size, dtype=np.uint64)
    count = np.zeros(size, dtype=np.int64)
    if not chosen.any():
        return chosen, digits, count, dec_exp
    at = np.nonzero(chosen)[0]
    picked, exp_at, found = _generate(fract[at] >> tail_zeros[at], b2[at], b5[at], s2[at], s5[at], m2[at],
                                      dec_exp[at], ints[at])
    digits[at], count[at], dec_exp = picked, found, dec_exp.copy()
    dec_exp[at] = exp_at
    return chosen & (count > 0), digits, count, dec_exp


def _generate(shifted: np.ndarray, b2: np.ndarray, b5: np.ndarray, s2: np.ndarray, s5: np.ndarray, m2: np.ndarray,
              dec_exp: np.ndarray, ints: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dtoa's digit loop for values whose B, S and M fit in longs (ints where ``ints``): the
    digits as an integer, the exponent of the first, their count."""
    with np.errstate(over="ignore"):
        b = (shifted * _FIVE_POW[b5]) << b2
        s = _FIVE_POW[s5] << s2
        m = _FIVE_POW[b5] << m2
        tens = s * 10

        def wrap(values: np.ndarray) -> np.ndarray:
            """Java's int arithmetic where the method runs in ints."""
            return np.where(ints, values.astype(np.int32).astype(np.int64), values)

        q = b // s
        b = 10 * (b % s)
        m = wrap(m * 10)
        low = b < m
        high = wrap(b + m) > tens
        skip = (q == 0) & ~high  # a leading zero: the estimate was one too high
        dec_exp = np.where(skip, dec_exp - 1, dec_exp)
        digits = np.where(skip, 0, q).astype(np.uint64)
        count = np.where(skip, 0, 1)
        plain = (dec_exp >= -3) & (dec_exp < 8)  # Java's E-form needs a second digit
        low, high = low & plain, high & plain
        for _ in range(_MAX_DIGITS):
            active = np.nonzero(~low & ~high)[0]
            if not len(active):
                break
            ab, am = b[active], m[active]
            digit = ab // s[active]
            ab = 10 * (ab % s[active])
            am = np.where(ints[active], (am * 10).astype(np.int32).astype(np.int64), am * 10)
            overflowed = am <= 0
            summed = np.where(ints[active], (ab + am).astype(np.int32).astype(np.int64), ab + am)
            b[active], m[active] = ab, am
            low[active] = overflowed | (ab < am)
            high[active] = overflowed | (summed > tens[active])
            digits[active] = digits[active] * np.uint64(10) + digit.astype(np.uint64)
            count[active] += 1
        difference = wrap(wrap(b << 1) - tens)
        odd = digits % np.uint64(2) == 1
        round_up = high & (~low | (difference > 0) | ((difference == 0) & odd))
        digits = np.where(round_up, digits + np.uint64(1), digits)
        carried = round_up & (digits == np.power(np.uint64(10), count.astype(np.uint64)))
        digits = np.where(carried, digits // np.uint64(10), digits)  # "1" then zeros, one place up
        dec_exp = np.where(carried, dec_exp + 1, dec_exp)
    return digits, dec_exp, count


def _estimate_dec_exp(mantissa: np.ndarray, bin_exp: np.ndarray) -> np.ndarray:
    """FloatingDecimal.estimateDecExp: floor of an estimate of log10 of the value."""
    d2 = mantissa * 2.0  # the significand in [1, 2)
    estimate = (d2 - 1.5) * 0.289529654 + 0.176091259 + bin_exp.astype(np.float64) * 0.301029995663981
    return np.floor(estimate).astype(np.int64)
