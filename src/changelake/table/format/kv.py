"""The key-value layout of primary-key data files and the sort/merge over it.

A data file holds ``_KEY_<k>`` for every primary key that is not a partition key, then
``_SEQUENCE_NUMBER`` and ``_VALUE_KIND``, then every table column; rows sorted by key then
sequence. Sorting and merging are whole-column numpy/Arrow operations.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.format import binary_row

KEY_PREFIX = "_KEY_"
SEQUENCE = "_SEQUENCE_NUMBER"
VALUE_KIND = "_VALUE_KIND"



class RowKind(enum.IntEnum):
    """The kind of a change row, stored as ``_VALUE_KIND`` (Paimon's RowKind byte values)."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    @property
    def symbol(self) -> str:
        """``+I``, ``-U``, ``+U`` or ``-D``."""
        return ROW_KIND_SYMBOLS[self]


ROW_KIND_SYMBOLS = ("+I", "-U", "+U", "-D")
# The kinds as plain ints, for whole-column numpy and Arrow comparisons.
INSERT = int(RowKind.INSERT)
UPDATE_BEFORE = int(RowKind.UPDATE_BEFORE)
UPDATE_AFTER = int(RowKind.UPDATE_AFTER)
DELETE = int(RowKind.DELETE)


def key_column(name: str) -> str:
    return KEY_PREFIX + name


def file_schema(value_schema: pa.Schema, key_names: Sequence[str]) -> pa.Schema:
    """Arrow schema of a data file for a table with these columns and trimmed keys."""
    keys = [pa.field(key_column(k), value_schema.field(k).type, nullable=False) for k in key_names]
    system = [pa.field(SEQUENCE, pa.int64(), nullable=False), pa.field(VALUE_KIND, pa.int8(), nullable=False)]
    return pa.schema(keys + system + list(value_schema))


def _numpy_key(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """A numpy view that sorts like the column, for fixed-width integer-like columns."""
    t = arr.type
    if pa.types.is_integer(t):
        return np.asarray(arr.to_numpy())
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        width = pa.int64() if t.bit_width == 64 else pa.int32()
        return np.asarray(arr.cast(width).to_numpy())
    if pa.types.is_boolean(t):
        return np.asarray(arr.to_numpy(zero_copy_only=False))
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return _float_order(np.asarray(arr.to_numpy(zero_copy_only=False)))
    return None


def _float_order(values: np.ndarray) -> np.ndarray:
    """Integers ordered like Java's ``Double.compare`` (one NaN, greatest; -0.0 < 0.0), which
    is how Paimon orders and equates float keys."""
    wide = values.astype(np.float64)
    wide = np.where(np.isnan(wide), np.nan, wide)
    bits = wide.view(np.int64)
    return np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)


def comparable(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """The column itself, or for floats int64s ordered like Paimon orders float keys."""
    if pa.types.is_floating(column.type):
        return pa.array(_float_order(np.asarray(column.to_numpy(zero_copy_only=False))))
    return column


def sort_indices(keys: Sequence[pa.Array | pa.ChunkedArray], seq: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row order by (keys..., seq), stable for ties."""
    numeric = [_numpy_key(k) for k in keys]
    seq_np = np.asarray(seq.to_numpy())
    if all(n is not None for n in numeric):
        columns = [seq_np] + [n for n in reversed(numeric) if n is not None]
        return np.asarray(np.lexsort(columns), dtype=np.int64)
    table = pa.table({f"k{i}": comparable(k) for i, k in enumerate(keys)} | {"seq": seq_np})
    order = [(f"k{i}", "ascending") for i in range(len(keys))] + [("seq", "ascending")]
    return np.asarray(pc.sort_indices(table, sort_keys=order).to_numpy(), dtype=np.int64)


def group_ends(sorted_keys: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """Mask of rows that are the last of their key among rows sorted by key."""
    n = len(sorted_keys[0])
    if n == 0:
        return np.zeros(0, dtype=bool)
    changed = np.zeros(n - 1, dtype=bool)
    for column in sorted_keys:
        numeric = _numpy_key(column)
        if numeric is not None:
            changed |= numeric[1:] != numeric[:-1]
        else:
            diff = pc.not_equal(column[1:], column[:-1])
            changed |= np.asarray(pc.fill_null(diff, True).to_numpy(zero_copy_only=False))
    return np.append(changed, True)


def deduplicate(table: pa.Table, key_names: Sequence[str]) -> pa.Table:
    """Last row (highest sequence) of every key, sorted by key; delete markers kept."""
    if table.num_rows <= 1:
        return table
    keys = [table.column(k) for k in key_names]
    order = sort_indices(keys, table.column(SEQUENCE))
    sorted_keys = [k.take(order) for k in keys]
    return table.take(order[group_ends(sorted_keys)])


def drop_retractions(table: pa.Table) -> pa.Table:
    """Rows that are not -U/-D (what a reader of merged data sees)."""
    kinds = table.column(VALUE_KIND)
    return table.filter(pc.or_(pc.equal(kinds, INSERT), pc.equal(kinds, UPDATE_AFTER)))


class KeyCodec:
    """Decodes serialized key BinaryRows (file min/max keys) into comparable tuples; a bounded
    cache keeps the keys decoded recently, since the same files are compared again and again."""

    def __init__(self, types: Sequence[pa.DataType]) -> None:
        self.types = list(types)
        self._decode = functools.lru_cache(maxsize=65536)(self._decode_uncached)

    def __call__(self, data: bytes) -> tuple[Any, ...]:
        return self._decode(data)

    def _decode_uncached(self, data: bytes) -> tuple[Any, ...]:
        return binary_row.from_bytes(binary_row.deserialize(data)[1], self.types)

    def clear(self) -> None:
        """Drop the cached keys."""
        self._decode.cache_clear()
