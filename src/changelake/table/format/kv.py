"""The key-value layout of primary-key data files.

A data file holds ``_KEY_<k>`` for every primary key that is not a partition key, then
``_SEQUENCE_NUMBER`` and ``_VALUE_KIND``, then every table column; rows sorted by key then
sequence (the sort lives in ``changelake.table.merge.sort``). A thin file (Paimon's
``data-file.thin-mode``) leaves out the ``_KEY_<k>`` columns, which repeat the columns ``<k>``;
``data_file`` writes and reads both, and the engine always works on the full layout.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

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


def conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s ``schema`` columns in its types: the table itself when it has them already
    (a cast goes through a compute kernel per column even when types match, and a lookup
    compaction conforms every piece of rows it reads)."""
    if table.schema.names != schema.names:
        table = table.select(schema.names)
    return table if table.schema.equals(schema) else table.cast(schema)


def drop_retractions(table: pa.Table) -> pa.Table:
    """Rows that are not -U/-D (what a reader of merged data sees)."""
    kinds = np.asarray(table.column(VALUE_KIND).to_numpy())
    keep = (kinds == INSERT) | (kinds == UPDATE_AFTER)
    return table if keep.all() else table.filter(pa.array(keep))


def float_order(values: np.ndarray) -> np.ndarray:
    """Integers ordered like Java's ``Double.compare`` orders ``values`` (one NaN, greatest;
    -0.0 < 0.0), which is how Paimon orders and equates float keys (a float widens to a double
    in the same order)."""
    wide = values.astype(np.float64)
    wide = np.where(np.isnan(wide), np.nan, wide)
    bits = wide.view(np.int64)
    return np.where(bits < 0, bits ^ np.int64(0x7FFFFFFFFFFFFFFF), bits)


class KeyCodec:
    """Decodes serialized key BinaryRows (file min/max keys) into tuples ordered as Paimon
    orders keys (see :meth:`__call__`); a bounded cache keeps the keys decoded recently, since
    the same files are compared again and again."""

    def __init__(self, types: Sequence[pa.DataType]) -> None:
        self.types = list(types)
        self._floats = [i for i, t in enumerate(self.types) if pa.types.is_floating(t)]
        self._decode = functools.lru_cache(maxsize=65536)(self._decode_uncached)

    def __call__(self, data: bytes) -> tuple[Any, ...]:
        """The key, comparable with ``<`` and ``==`` as Paimon compares keys: float columns as
        integers in Java's ``Double.compare`` order (Python's floats equate -0.0 with 0.0 and
        compare nothing with NaN, so files of distinct keys overlapped and NaN keys broke the
        order of files by key)."""
        return self._decode(data)

    def values(self, data: bytes) -> tuple[Any, ...]:
        """The key's column values as they are (for showing)."""
        return binary_row.from_bytes(binary_row.deserialize(data)[1], self.types)

    def _decode_uncached(self, data: bytes) -> tuple[Any, ...]:
        key = self.values(data)
        if not self._floats:
            return key
        ordered = list(key)
        for i, order in zip(self._floats, float_order(np.array([key[i] for i in self._floats])), strict=True):
            ordered[i] = int(order)
        return tuple(ordered)

    def clear(self) -> None:
        """Drop the cached keys."""
        self._decode.cache_clear()
