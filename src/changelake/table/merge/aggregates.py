"""Aggregate functions of the aggregation merge engine (and of partial-update sequence groups):
``fields.<column>.aggregate-function`` and its per-column settings, and the whole-column kernels.

A kernel gets (column, frame, add rows, retract rows, initial row per key) and returns one value
per key. ``add``/``retract`` mark the sorted rows merged into the accumulator; ``init`` is the
sorted position whose value the accumulator starts from (-1: null).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError
from changelake.table.merge.frame import SortedFrame, from_numpy, is_numeric


class AggregateFunction(enum.StrEnum):
    """``fields.<column>.aggregate-function``: the functions changelake implements."""

    SUM = "sum"
    PRODUCT = "product"
    COUNT = "count"
    MAX = "max"
    MIN = "min"
    LAST_VALUE = "last_value"
    LAST_NON_NULL_VALUE = "last_non_null_value"
    FIRST_VALUE = "first_value"
    FIRST_NON_NULL_VALUE = "first_non_null_value"
    LISTAGG = "listagg"
    BOOL_AND = "bool_and"
    BOOL_OR = "bool_or"

    @classmethod
    def named(cls, text: str) -> AggregateFunction:
        """The function ``text`` names (any case, Paimon's aliases); ValueError saying why not."""
        name = text.strip().lower()
        name = _ALIASES.get(name, name)
        if name in _UNSUPPORTED:
            raise ValueError(f"aggregate function {name!r} is not supported by changelake")
        try:
            return cls(name)
        except ValueError:
            hint = difflib.get_close_matches(name, [f.value for f in cls], n=1)
            raise ValueError(
                f"unknown aggregate function {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
            ) from None

    def applies_to(self, data_type: pa.DataType) -> bool:
        """Whether Paimon accepts the function on a column of ``data_type``."""
        t = pa.types
        if self is AggregateFunction.PRODUCT and t.is_decimal(data_type):
            return False
        if self in (AggregateFunction.SUM, AggregateFunction.PRODUCT):
            return bool(t.is_integer(data_type) or t.is_floating(data_type) or t.is_decimal(data_type))
        if self is AggregateFunction.COUNT:
            return bool(t.is_int8(data_type) or t.is_int16(data_type) or t.is_int32(data_type) or t.is_int64(data_type))
        if self in (AggregateFunction.MAX, AggregateFunction.MIN):
            return not t.is_nested(data_type) and not t.is_null(data_type)
        if self is AggregateFunction.LISTAGG:
            return bool(t.is_string(data_type) or t.is_large_string(data_type))
        if self in (AggregateFunction.BOOL_AND, AggregateFunction.BOOL_OR):
            return bool(t.is_boolean(data_type))
        return True


_ALIASES = {"first_not_null_value": AggregateFunction.FIRST_NON_NULL_VALUE.value}
# Paimon functions changelake does not implement (rejected with their own message).
_UNSUPPORTED = frozenset({
    "collect", "merge_map", "merge_map_with_keytime", "nested_update", "nested_partial_update",
    "hll_sketch", "theta_sketch", "rbm32", "rbm64",
})  # fmt: skip

# Functions whose Paimon aggregator implements ``retract``; the others reject -U/-D rows unless
# ``fields.<f>.ignore-retract`` is set.
RETRACTABLE = frozenset({
    AggregateFunction.SUM, AggregateFunction.PRODUCT, AggregateFunction.COUNT,
    AggregateFunction.LAST_VALUE, AggregateFunction.LAST_NON_NULL_VALUE,
})  # fmt: skip
# What partial-update supports inside a sequence group (Paimon allows every function there). Not
# count: a row with an older sequence is merged reversed (the row's value as the accumulator, the
# count as the input), which for count is not the commutative update it is for sum.
PARTIAL_UPDATE_FUNCTIONS = frozenset({
    AggregateFunction.SUM, AggregateFunction.MAX, AggregateFunction.MIN, AggregateFunction.BOOL_AND,
    AggregateFunction.BOOL_OR, AggregateFunction.LAST_VALUE, AggregateFunction.LAST_NON_NULL_VALUE,
})  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class FieldAggregate:
    """The aggregate function of one column (``fields.<column>.*`` options)."""

    column: str
    function: AggregateFunction
    ignore_retract: bool = False
    delimiter: str = ","
    distinct: bool = False

    @property
    def accepts_retract(self) -> bool:
        return self.ignore_retract or self.function in RETRACTABLE

    def aggregate(
        self, column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray
    ) -> pa.Array:
        """Per key, the accumulator after merging the ``add`` and ``retract`` rows into ``init``'s
        value (the functions that pick a row, last/first value, are the engines' own)."""
        return _KERNELS[self.function](column, f, add, retract, init, self)


# -- functions that pick a row: per key, the sorted position of the value (-1: null) -------------


def _init_values(values: np.ndarray, valid: np.ndarray, init: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    safe = np.maximum(init, 0)
    ok = (init >= 0) & valid[safe] if len(values) else init >= 0
    return values[safe], ok


def last_value(f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray) -> np.ndarray:
    """The value of the last add (a retraction after it makes it null); ``init`` with neither."""
    last = f.last_where(add | retract)
    return np.where(last >= 0, np.where(add[np.maximum(last, 0)], last, -1), init)


def first_value(f: SortedFrame, add: np.ndarray, before: np.ndarray, init: np.ndarray) -> np.ndarray:
    """Paimon's first_value / first_non_null_value: the first counted add; after a reset the
    reset's value when the aggregator was already initialised by a counted add before it."""
    initialised = f.any(before)
    first = f.first_where(add)
    return np.where(initialised, init, np.where(first >= 0, first, init))


def group_last_non_null(
    f: SortedFrame, valid: np.ndarray, winner: np.ndarray, part: np.ndarray, retract: np.ndarray, init: np.ndarray
) -> np.ndarray:
    """last_non_null_value inside a partial-update sequence group: adds with a newer or equal
    sequence overwrite with non-null values, retractions of a non-null value clear the field,
    adds with an older sequence only fill a null field."""
    hard = (winner & f.add & valid) | (retract & valid)
    last_hard = f.last_where(hard)
    older = part & ~winner & f.add & valid
    after_hard = f.first_where(older & (f.pos > last_hard[f.gid]))
    init_valid = (init >= 0) & valid[np.maximum(init, 0)]
    no_hard = np.where(init_valid, init, after_hard)
    return np.where(last_hard >= 0, np.where(f.add[np.maximum(last_hard, 0)], last_hard, after_hard), no_hard)


# -- functions that compute values ------------------------------------------------------------------


def _sum(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    data_type = column.type
    if pa.types.is_decimal(data_type):
        return _decimal_sum(column, f, add, retract, init, agg)
    values, valid = f.numeric(column)
    plus, minus = add & valid, retract & valid
    init_values, init_ok = _init_values(values, valid, init)
    has = f.any(plus | minus) | init_ok
    if pa.types.is_floating(data_type):
        signed = np.where(plus, values, np.where(minus, -values, 0)).astype(values.dtype)
        total = np.add.reduceat(signed, f.starts) + np.where(init_ok, init_values, 0).astype(values.dtype)
        return from_numpy(total, has, data_type)
    wide = values.astype(np.int64)
    signed = np.where(plus, wide, np.where(minus, -wide, 0))
    start = np.where(init_ok, init_values, 0).astype(np.int64)
    total = np.add.reduceat(signed, f.starts) + start
    magnitude = np.add.reduceat(np.abs(signed.astype(np.float64)), f.starts) + np.abs(start.astype(np.float64))
    risky = magnitude >= 2.0**62
    if risky.any():  # rare: redo the sums that may overflow int64 exactly, then range-check
        exact_values = values.astype(object)
        exact = np.add.reduceat(np.where(plus, exact_values, np.where(minus, -exact_values, 0)), f.starts)
        exact = exact + np.where(init_ok, init_values.astype(object), 0)
        _check_range(exact[risky & has], data_type, agg, "sum")
    _check_range(total[has], data_type, agg, "sum")
    return from_numpy(total, has, data_type)


def _count(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    """Paimon's count (TINYINT..BIGINT): each merged add holding a value counts +1, each retraction
    holding one -1; the values themselves are never added. The accumulator starts from ``init``'s
    value, or null, which any merged row (a null one too) turns into 0 first; so the result is
    null only when no row was merged and ``init`` holds no value. A merged row counts 1 when it
    meets newer rows, so the count depends on which rows were merged before, as in Paimon."""
    data_type = column.type
    values, valid = f.numeric(column)
    init_values, init_ok = _init_values(values, valid, init)
    has = f.any(add | retract) | init_ok
    signed = (add & valid).astype(np.int64) - (retract & valid).astype(np.int64)
    start = np.where(init_ok, init_values, 0).astype(np.int64)
    delta = np.add.reduceat(signed, f.starts)
    total = start + delta  # |delta| <= rows, so only a start near the int64 bounds can wrap
    risky = np.abs(start.astype(np.float64)) >= 2.0**62
    if risky.any():
        exact = start[risky].astype(object) + delta[risky].astype(object)
        _check_range(exact[has[risky]], data_type, agg, "count")
    _check_range(total[has], data_type, agg, "count")
    return from_numpy(total, has, data_type)


def _check_range(values: np.ndarray, data_type: pa.DataType, agg: FieldAggregate, what: str) -> None:
    if not len(values):
        return
    # Paimon's integer types are all signed; the numpy dtype of the same width bounds them.
    info = np.iinfo(np.dtype(f"int{data_type.bit_width}"))
    low, high = min(values), max(values)
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        raise DataError(f"{what} {bad} overflows {data_type}", column=agg.column)


def _decimal_sum(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    data_type = column.type
    wide_type = pa.decimal128(38, data_type.scale)
    valid = f.valid(column)
    plus, minus = add & valid, retract & valid
    chosen = np.flatnonzero(plus | minus)
    values = f.take(column, chosen).cast(wide_type)
    signed = pc.if_else(pa.array(minus[chosen]), pc.negate(values), values)
    sums = _group_aggregate(signed, f.gid[chosen], "sum", f.groups)
    init_ok = (init >= 0) & valid[np.maximum(init, 0)]
    if init_ok.any():
        start = f.take(column, np.where(init_ok, init, -1)).cast(wide_type)
        both = pc.add(pc.fill_null(sums, pa.scalar(0, wide_type)), pc.fill_null(start, pa.scalar(0, wide_type)))
        sums = pc.if_else(pa.array(f.any(plus | minus) | init_ok), both, pa.nulls(f.groups, wide_type))
    try:
        return sums.cast(data_type)
    except pa.ArrowInvalid:
        raise DataError(f"sum overflows {data_type}", column=agg.column) from None


def _group_aggregate(values: pa.Array, groups: np.ndarray, function: str, count: int) -> pa.Array:
    """Arrow's ``function`` of ``values`` per group number; null for groups without values."""
    table = pa.table({"g": pa.array(groups, pa.int64()), "v": values})
    result = table.group_by("g", use_threads=False).aggregate([("v", function)])
    slots = np.full(count, -1, dtype=np.int64)
    slots[np.asarray(result.column("g").to_numpy())] = np.arange(result.num_rows)
    out = result.column(f"v_{function}").take(pa.array(slots, mask=slots < 0))
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _extreme(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    is_max = agg.function is AggregateFunction.MAX
    data_type = column.type
    if pa.types.is_boolean(data_type):
        as_bool = AggregateFunction.BOOL_OR if is_max else AggregateFunction.BOOL_AND
        return _bool(column, f, add, retract, init, FieldAggregate(column=agg.column, function=as_bool))
    if is_numeric(data_type):
        values, valid = f.numeric(column)
        chosen = add & valid
        init_values, init_ok = _init_values(values, valid, init)
        ufunc: np.ufunc
        if pa.types.is_floating(data_type):
            # Java orders NaN above every number: max takes it, min ignores it.
            fill = -np.inf if is_max else np.inf
            ufunc = np.maximum if is_max else np.fmin
        else:
            info = np.iinfo(values.dtype)
            fill = info.min if is_max else info.max
            ufunc = np.maximum if is_max else np.minimum
        best = ufunc.reduceat(np.where(chosen, values, fill).astype(values.dtype), f.starts)
        best = np.where(init_ok, ufunc(best, init_values), best)
        return from_numpy(best, f.any(chosen) | init_ok, data_type)
    valid = f.valid(column)
    init_ok = (init >= 0) & valid[np.maximum(init, 0)]
    chosen = np.concatenate([np.flatnonzero(add & valid), init[init_ok]])
    groups = np.concatenate([f.gid[add & valid], np.flatnonzero(init_ok)])
    return _group_aggregate(f.take(column, chosen), groups, "max" if is_max else "min", f.groups)


def _bool(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    values, valid = f.numeric(column)
    chosen = add & valid
    init_values, init_ok = _init_values(values, valid, init)
    if agg.function is AggregateFunction.BOOL_AND:
        best = np.minimum.reduceat(np.where(chosen, values, 1), f.starts)
        best = np.where(init_ok, np.minimum(best, init_values), best)
    else:
        best = np.maximum.reduceat(np.where(chosen, values, 0), f.starts)
        best = np.where(init_ok, np.maximum(best, init_values), best)
    return pa.array(best.astype(bool), mask=~(f.any(chosen) | init_ok), type=pa.bool_())


def _product(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    """Paimon's product: adds multiply; a retraction divides (Java integer division for
    integers), unless nothing was multiplied yet."""
    data_type = column.type
    values, valid = f.numeric(column)
    plus = add & valid
    init_values, init_ok = _init_values(values, valid, init)
    first_add = f.first_where(plus)
    live_from = np.where(init_ok, -1, np.where(first_add >= 0, first_add, f.n))
    divide = retract & valid & (f.pos > live_from[f.gid])
    has = init_ok | (first_add >= 0)
    if pa.types.is_floating(data_type):
        one = values.dtype.type(1)
        product = np.multiply.reduceat(np.where(plus, values, one), f.starts) * np.where(init_ok, init_values, one)
        divisor = np.multiply.reduceat(np.where(divide, values, one), f.starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            return from_numpy((product / divisor).astype(values.dtype), has, data_type)
    wide = values.astype(np.int64)
    start = np.where(init_ok, init_values, 1).astype(np.int64)
    if not divide.any():
        product = np.multiply.reduceat(np.where(plus, wide, 1), f.starts) * start
        magnitude = np.multiply.reduceat(np.abs(np.where(plus, wide, 1).astype(np.float64)), f.starts)
        _check_product(magnitude * np.abs(start.astype(np.float64)), has, data_type, agg)
        _check_range(product[has], data_type, agg, "product")
        return from_numpy(product, has, data_type)
    return _integer_product_with_division(wide, plus, divide, start, has, f, data_type, agg)


def _check_product(magnitude: np.ndarray, has: np.ndarray, data_type: pa.DataType, agg: FieldAggregate) -> None:
    if (magnitude[has] >= 2.0**63).any():
        raise DataError(f"product overflows {data_type}", column=agg.column)


def _integer_product_with_division(
    values: np.ndarray,
    plus: np.ndarray,
    divide: np.ndarray,
    start: np.ndarray,
    has: np.ndarray,
    f: SortedFrame,
    data_type: pa.DataType,
    agg: FieldAggregate,
) -> pa.Array:
    """Each key's rows split into blocks that end at a retraction: the accumulator is multiplied
    by the block's adds, then divided (truncating) by the retraction. Vectorized over keys; the
    loop runs once per retraction of the key with the most."""
    divisions = np.cumsum(divide) - divide
    block = divisions - divisions[f.starts][f.gid]
    # Segments of (key, block) are contiguous in sorted order.
    boundary = np.ones(f.n, dtype=bool)
    boundary[1:] = (f.gid[1:] != f.gid[:-1]) | (block[1:] != block[:-1])
    seg_starts = np.flatnonzero(boundary)
    seg_key = f.gid[seg_starts]
    seg_block = block[seg_starts]
    seg_product = np.multiply.reduceat(np.where(plus, values, 1), seg_starts)
    seg_magnitude = np.multiply.reduceat(np.abs(np.where(plus, values, 1).astype(np.float64)), seg_starts)
    seg_divisor = np.multiply.reduceat(np.where(divide, values, 1), seg_starts)
    seg_divides = np.logical_or.reduceat(divide, seg_starts)
    if (seg_divides & (seg_divisor == 0)).any():
        raise DataError("product retraction divides by zero", column=agg.column)
    acc = start.copy()
    magnitude = np.abs(start.astype(np.float64))
    by_block = np.argsort(seg_block, kind="stable")
    bounds = np.searchsorted(seg_block[by_block], np.arange(int(seg_block.max()) + 2))
    for b in range(len(bounds) - 1):
        segs = by_block[bounds[b] : bounds[b + 1]]
        keys = seg_key[segs]
        magnitude[keys] *= seg_magnitude[segs]
        _check_product(magnitude[keys], has[keys], data_type, agg)
        acc[keys] = acc[keys] * seg_product[segs]
        divides = seg_divides[segs]
        dividend, divisor = acc[keys[divides]], seg_divisor[segs[divides]]
        quotient = np.abs(dividend) // np.abs(divisor)
        acc[keys[divides]] = np.where((dividend < 0) ^ (divisor < 0), -quotient, quotient)
        magnitude[keys[divides]] = np.abs(acc[keys[divides]].astype(np.float64))
    _check_range(acc[has], data_type, agg, "product")
    return from_numpy(acc, has, data_type)


def _listagg(
    column: pa.ChunkedArray, f: SortedFrame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    """Paimon's listagg: non-blank strings joined by the delimiter in order; the first one is kept
    as it is; with ``distinct`` later strings add only their tokens not seen before."""
    ordered = f.take(column, f.pos)
    blank = np.asarray(
        pc.fill_null(pc.or_(pc.equal(pc.utf8_length(ordered), 0), pc.utf8_is_space(ordered)), True).to_numpy(
            zero_copy_only=False
        ),
        dtype=bool,
    )
    words = add & ~blank
    init_word = (init >= 0) & ~blank[np.maximum(init, 0)]
    first = f.first_where(words)
    head = np.where(init_word, init, first)
    tail = words & (f.pos > head[f.gid]) & (head[f.gid] >= 0)
    delimiter = agg.delimiter
    head_values = ordered.take(pa.array(np.maximum(head, 0)))
    if agg.distinct:
        joined, count = _distinct_tokens(ordered, f, head, tail, delimiter)
    else:
        chosen = np.flatnonzero(tail)
        count = np.bincount(f.gid[chosen], minlength=f.groups)
        offsets = np.concatenate(([0], np.cumsum(count))).astype(np.int32)
        lists = pa.ListArray.from_arrays(pa.array(offsets), ordered.take(pa.array(chosen)).cast(pa.string()))
        joined = pc.binary_join(lists, delimiter)
    head_values = head_values.cast(pa.string())
    combined = pc.if_else(pa.array(count > 0), pc.binary_join_element_wise(head_values, joined, delimiter), head_values)
    # Without any non-blank string the accumulator is what it started as (null, or a blank init).
    fallback = f.take(column, init).cast(pa.string())
    return pc.if_else(pa.array(head >= 0), combined, fallback).cast(column.type)


def _distinct_tokens(
    ordered: pa.Array, f: SortedFrame, head: np.ndarray, tail: np.ndarray, delimiter: str
) -> tuple[pa.Array, np.ndarray]:
    """Per key, the tail's non-blank tokens not seen before (in the head or earlier), joined."""
    if not delimiter:
        raise DataError("listagg with distinct needs a non-empty delimiter")
    heads = np.flatnonzero(head >= 0)
    sources = np.concatenate([head[heads], np.flatnonzero(tail)])
    source_key = np.concatenate([heads, f.gid[tail]])
    source_is_head = np.concatenate([np.ones(len(heads), bool), np.zeros(int(tail.sum()), bool)])
    # Order sources by (key, head first, position).
    by = np.lexsort((sources, ~source_is_head, source_key))
    sources, source_key, source_is_head = sources[by], source_key[by], source_is_head[by]
    pieces = pc.split_pattern(ordered.take(pa.array(sources)).cast(pa.string()), delimiter)
    tokens = pc.list_flatten(pieces)
    parent = np.asarray(pc.list_parent_indices(pieces).to_numpy(), dtype=np.int64)
    token_key = source_key[parent]
    token_head = source_is_head[parent]
    token_blank = np.asarray(
        pc.fill_null(pc.or_(pc.equal(pc.utf8_length(tokens), 0), pc.utf8_is_space(tokens)), True).to_numpy(
            zero_copy_only=False
        ),
        dtype=bool,
    )
    keep = token_head | ~token_blank
    tokens, token_key, token_head = tokens.filter(pa.array(keep)), token_key[keep], token_head[keep]
    encoded = pc.dictionary_encode(tokens)
    ids = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    pair = token_key * (len(encoded.dictionary) + 1) + ids
    _, first = np.unique(pair, return_index=True)
    fresh = np.zeros(len(pair), dtype=bool)
    fresh[first] = True
    emit = fresh & ~token_head
    count = np.bincount(token_key[emit], minlength=f.groups)
    offsets = np.concatenate(([0], np.cumsum(count))).astype(np.int32)
    lists = pa.ListArray.from_arrays(pa.array(offsets), tokens.filter(pa.array(emit)))
    return pc.binary_join(lists, delimiter), count


_Kernel = Callable[[pa.ChunkedArray, SortedFrame, np.ndarray, np.ndarray, np.ndarray, FieldAggregate], pa.Array]
_KERNELS: dict[AggregateFunction, _Kernel] = {
    AggregateFunction.SUM: _sum,
    AggregateFunction.PRODUCT: _product,
    AggregateFunction.COUNT: _count,
    AggregateFunction.MAX: _extreme,
    AggregateFunction.MIN: _extreme,
    AggregateFunction.BOOL_AND: _bool,
    AggregateFunction.BOOL_OR: _bool,
    AggregateFunction.LISTAGG: _listagg,
}
