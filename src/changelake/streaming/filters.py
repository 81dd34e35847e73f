"""Spark's pushed filters as a pyarrow expression for the planner.

Comparisons, ``IN`` and null tests on partition and primary-key columns translate: those are
what the planner prunes manifests and files by. A batch read applies the expression to the
merged rows as well, so a translated filter is applied in full and Spark need not evaluate it
again. The values must convert exactly to the column's type, and only types whose comparisons
agree with Spark's translate: not floats (Spark orders NaN above every number, Arrow does not)
and not timestamps (Spark's values carry no column precision or time zone).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

_COMPARISONS: dict[type[Filter], Callable[[Any, Any], Any]] = {
    EqualTo: operator.eq,
    GreaterThan: operator.gt,
    GreaterThanOrEqual: operator.ge,
    LessThan: operator.lt,
    LessThanOrEqual: operator.le,
}
_PUSHABLE_TYPES = ("is_integer", "is_string", "is_large_string", "is_boolean", "is_date32", "is_decimal",
                   "is_binary", "is_large_binary")


def push(filters: Sequence[Filter], schema: pa.Schema,
         columns: Collection[str]) -> tuple[pc.Expression | None, list[Filter]]:
    """The filters on ``columns`` that translate, as one expression (None: none translate), and
    the filters left for Spark."""
    pushed: list[pc.Expression] = []
    left: list[Filter] = []
    for spark_filter in filters:
        expression = _translate(spark_filter, schema, columns)
        if expression is None:
            left.append(spark_filter)
        else:
            pushed.append(expression)
    combined = None
    for expression in pushed:
        combined = expression if combined is None else combined & expression
    return combined, left


def _translate(spark_filter: Filter, schema: pa.Schema, columns: Collection[str]) -> pc.Expression | None:
    if isinstance(spark_filter, Not):
        # Only ``a <> v``: Arrow's negation of IN and of null tests differs from Spark's on nulls.
        inner = spark_filter.child
        if type(inner) is EqualTo:
            equal = _translate(inner, schema, columns)
            return None if equal is None else ~equal
        return None
    path: tuple[str, ...] = getattr(spark_filter, "attribute", ())
    if len(path) != 1 or path[0] not in columns:
        return None
    name = path[0]
    data_type = schema.field(name).type
    if not any(getattr(pa.types, check)(data_type) for check in _PUSHABLE_TYPES):
        return None
    field = pc.field(name)
    if isinstance(spark_filter, IsNull):
        return field.is_null()
    if isinstance(spark_filter, IsNotNull):
        return field.is_valid()
    if isinstance(spark_filter, In):
        # A null in the list never matches (``a IN (1, NULL)`` is never true for a null ``a``).
        values = [v for v in spark_filter.value if v is not None]
        array = _array(values, data_type)
        return None if array is None else field.isin(array)
    if isinstance(spark_filter, EqualNullSafe):
        if spark_filter.value is None:
            return field.is_null()
        scalar = _array([spark_filter.value], data_type)
        return None if scalar is None else field == pc.scalar(scalar[0])
    compare = _COMPARISONS.get(type(spark_filter))
    value = getattr(spark_filter, "value", None)
    if compare is None or value is None:
        return None
    scalar = _array([value], data_type)
    return None if scalar is None else compare(field, pc.scalar(scalar[0]))


def _array(values: list[Any], data_type: pa.DataType) -> pa.Array | None:
    """``values`` as an array of the column's type, or None when one does not convert exactly."""
    try:
        return pa.array(values, type=data_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
