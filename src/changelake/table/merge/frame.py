"""The sorted frame every merge works on: rows sorted by (key, sequence.field..., sequence
number, input position), so each key's rows form one contiguous segment of the sorted order.

Per column, the result of each segment comes from ``reduceat`` kernels over masks ("the last row
of the segment that is an add and holds a value"), or from Arrow group-bys where numpy has no
kernel. Nothing loops over rows or keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.option_values import SortOrder
from changelake.table.format import kv
from changelake.table.merge import sort

# A merged column: per key either the sorted position of the row whose value it takes (-1: null),
# or the computed values.
Result: TypeAlias = "np.ndarray | pa.Array"


class SortedFrame:
    """Rows sorted by (key, sequence); each key's rows are one contiguous segment."""

    def __init__(self, order: np.ndarray, ends: np.ndarray, kinds: np.ndarray, sequence: np.ndarray) -> None:
        n = len(order)
        self.order = order
        self.n = n
        self.lasts = np.flatnonzero(ends)
        self.starts = np.concatenate(([0], self.lasts[:-1] + 1)).astype(np.int64)
        self.groups = len(self.starts)
        self.counts = self.lasts - self.starts + 1
        self.gid = np.repeat(np.arange(self.groups, dtype=np.int64), self.counts)
        self.pos = np.arange(n, dtype=np.int64)
        self.kinds = kinds[order]
        self.sequence = sequence[order]
        self.add = (self.kinds == kv.INSERT) | (self.kinds == kv.UPDATE_AFTER)
        self.retract = ~self.add
        self.single = self.counts == 1
        self.multi_row = ~self.single[self.gid]

    @staticmethod
    def of(rows: pa.Table, key_columns: Sequence[str], sequence_fields: Sequence[str], order: SortOrder) -> SortedFrame:
        keys = [rows.column(k) for k in key_columns]
        ranks = [pa.array(sort_rank(rows.column(s), order)) for s in sequence_fields]
        indices = sort.sort_indices([*keys, *ranks], rows.column(kv.SEQUENCE))
        ends = sort.group_ends([k.take(indices) for k in keys])
        kinds = np.asarray(rows.column(kv.VALUE_KIND).to_numpy())
        sequence = np.asarray(rows.column(kv.SEQUENCE).to_numpy())
        return SortedFrame(indices, ends, kinds, sequence)

    # -- per-key reductions over masks of sorted rows -------------------------------------------

    def last_where(self, mask: np.ndarray) -> np.ndarray:
        """Per key, the last sorted position where ``mask`` holds; -1 when none."""
        return np.asarray(np.maximum.reduceat(np.where(mask, self.pos, -1), self.starts), dtype=np.int64)

    def first_where(self, mask: np.ndarray) -> np.ndarray:
        """Per key, the first sorted position where ``mask`` holds; -1 when none."""
        first = np.minimum.reduceat(np.where(mask, self.pos, self.n), self.starts)
        return np.where(first == self.n, -1, first).astype(np.int64)

    def any(self, mask: np.ndarray) -> np.ndarray:
        return np.asarray(np.logical_or.reduceat(mask, self.starts), dtype=bool)

    def exclusive_cummax(self, code: np.ndarray) -> np.ndarray:
        """Per row, the maximum of ``code`` (>= -1) over the earlier rows of its key; -1 for none."""
        span = int(code.max()) + 2 if self.n else 2
        offset = self.gid * span
        running = np.maximum.accumulate(code + offset) - offset
        out = np.empty_like(running)
        out[1:] = running[:-1]
        out[self.starts] = -1
        return out

    # -- sorted views of columns ------------------------------------------------------------------

    def valid(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        if column.null_count == 0:
            return np.ones(self.n, dtype=bool)
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return np.asarray(valid[self.order])

    def numeric(self, column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Sorted values (nulls as 0) and validity of an integer, float, temporal or bool column."""
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        array = array.cast(numeric_type(array.type))
        values = np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False))
        return values[self.order], self.valid(array)

    def take(self, column: pa.ChunkedArray | pa.Array, positions: np.ndarray) -> pa.Array:
        """Values of ``column`` at sorted ``positions`` (-1: null)."""
        missing = positions < 0
        rows = self.order[np.where(missing, 0, positions)]
        indices = pa.array(rows, mask=missing) if missing.any() else pa.array(rows)
        taken = column.take(indices)
        return taken.combine_chunks() if isinstance(taken, pa.ChunkedArray) else taken

    # -- output -------------------------------------------------------------------------------

    def max_sequence(self) -> np.ndarray:
        return np.asarray(np.maximum.reduceat(self.sequence, self.starts), dtype=np.int64)

    def pick_rows(self, rows: pa.Table, positions: np.ndarray) -> pa.Table:
        """Whole rows at sorted ``positions`` (one per key), with the key's maximum sequence."""
        picked = rows.take(pa.array(self.order[positions]))
        index = picked.schema.get_field_index(kv.SEQUENCE)
        return picked.set_column(index, picked.schema.field(index), pa.array(self.max_sequence(), pa.int64()))

    def assemble(
        self, rows: pa.Table, key_columns: Sequence[str], results: Mapping[str, Result], kinds: np.ndarray
    ) -> pa.Table:
        """The merged table: keys, max sequence, ``kinds``, merged columns; a key with a single row
        keeps that row unchanged (Paimon never calls the merge function for it)."""
        single = self.single
        any_single = bool(single.any())
        columns: list[pa.Array | pa.ChunkedArray] = []
        for field in rows.schema:
            name = field.name
            if name == kv.SEQUENCE:
                columns.append(pa.array(self.max_sequence(), pa.int64()))
            elif name == kv.VALUE_KIND:
                merged_kinds = np.where(single, self.kinds[self.starts], kinds) if any_single else kinds
                columns.append(pa.array(merged_kinds.astype(np.int8), pa.int8()))
            elif name in key_columns or name not in results:
                columns.append(self.take(rows.column(name), self.lasts))
            else:
                result = results[name]
                if isinstance(result, np.ndarray):
                    positions = np.where(single, self.starts, result) if any_single else result
                    columns.append(self.take(rows.column(name), positions))
                else:
                    if any_single:
                        original = self.take(rows.column(name), self.starts)
                        result = pc.if_else(pa.array(single), original, result.cast(field.type))
                    columns.append(result.cast(field.type))
        return pa.Table.from_arrays(columns, schema=rows.schema)


def value_columns(rows: pa.Table) -> list[str]:
    """The table columns of key-value ``rows`` (not the ``_KEY_*`` and system columns)."""
    return [n for n in rows.column_names if not n.startswith(kv.KEY_PREFIX) and n not in (kv.SEQUENCE, kv.VALUE_KIND)]


def numeric_type(data_type: pa.DataType) -> pa.DataType:
    """The numeric type numpy works on for an integer, float, temporal or bool type."""
    if pa.types.is_timestamp(data_type) or pa.types.is_time64(data_type) or pa.types.is_duration(data_type):
        return pa.int64()
    if pa.types.is_date32(data_type) or pa.types.is_time32(data_type):
        return pa.int32()
    if pa.types.is_date64(data_type):
        return pa.int64()
    if pa.types.is_boolean(data_type):
        return pa.int8()
    return data_type


def is_numeric(data_type: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_integer(data_type) or t.is_floating(data_type) or t.is_temporal(data_type) or t.is_boolean(data_type)
    )


def from_numpy(values: np.ndarray, valid: np.ndarray, data_type: pa.DataType) -> pa.Array:
    """Per-key ``values`` (null where not ``valid``) as an Arrow array of ``data_type``."""
    array = (
        pa.array(values, mask=~valid, type=numeric_type(data_type))
        if len(values)
        else pa.array([], numeric_type(data_type))
    )
    return array.cast(data_type)


def _dense_rank(array: pa.Array) -> np.ndarray:
    """0 for nulls, 1..k for the k distinct values ascending, NaN above every number: how Paimon
    compares sequence fields (``java.lang.Double.compare`` in GenerateUtils.generateCompare).
    Arrow's own placement puts nulls and NaN last, then nulls are set apart here: pyarrow 25
    deprecated ``null_placement`` for this, and pyarrow 19 ranked NaN and null alike."""
    rank = np.asarray(pc.rank(array, sort_keys="ascending", tiebreaker="dense").to_numpy(), dtype=np.int64)
    if array.null_count == 0:
        return rank
    return np.where(np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool), rank, 0)


def sort_rank(column: pa.ChunkedArray | pa.Array, order: SortOrder) -> np.ndarray:
    """Integers ordering the values as Paimon orders sequence fields: nulls first, then the values
    ascending or descending; equal values get equal numbers."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rank = _dense_rank(array)
    if order is SortOrder.ASCENDING or len(rank) == 0:
        return rank
    return np.where(rank > 0, int(rank.max()) + 1 - rank, 0)


def sequence_code(columns: Sequence[pa.ChunkedArray | pa.Array], frame: SortedFrame) -> np.ndarray:
    """Per sorted row, a number ordering its sequence-group fields lexicographically (nulls
    first, ascending), -1 when they are all null."""
    return _lexicographic_code([_array(c) for c in columns], frame.order)


def restart_codes(columns: Sequence[pa.ChunkedArray | pa.Array], not_null: Sequence[bool],
                  frame: SortedFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per sorted row, the :func:`sequence_code` of its sequence-group fields, and, in the same
    order, that of a record restarted from the row, which keeps only the NOT NULL ones (the
    others null; -1 when all are null)."""
    if all(not_null):
        code = sequence_code(columns, frame)
        return code, code
    if not any(not_null):
        return sequence_code(columns, frame), np.full(frame.n, -1, dtype=np.int64)
    # Both in one ranking: the columns, followed by the columns as restarted.
    arrays = [_array(c) for c in columns]
    doubled = [pa.concat_arrays([a, a if keep else pa.nulls(len(a), a.type)]) for a, keep in zip(arrays, not_null,
                                                                                               strict=True)]
    code = _lexicographic_code(doubled, np.concatenate([frame.order, frame.order + len(arrays[0])]))
    return code[: frame.n], code[frame.n :]


def _array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _lexicographic_code(arrays: Sequence[pa.Array], order: np.ndarray) -> np.ndarray:
    """Per position of ``order``, a number ordering the arrays' values there lexicographically
    (nulls first, ascending), -1 when they are all null."""
    code: np.ndarray | None = None
    all_null = np.ones(len(order), dtype=bool)
    for array in arrays:
        rank = _dense_rank(array)[order]  # nulls 0, values 1..k
        all_null &= rank == 0
        code = rank if code is None else np.unique(code * (int(rank.max()) + 1) + rank, return_inverse=True)[1]
    assert code is not None
    return np.where(all_null, -1, np.asarray(code, dtype=np.int64).reshape(-1))
