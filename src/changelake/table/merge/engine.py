"""Merge engines of primary-key tables: ``deduplicate``, ``first-row``, ``partial-update`` and
``aggregation``, with ``sequence.field`` and ``ignore-delete``, as Apache Paimon merges.

Every merge is whole-column: the rows are sorted once by (key, sequence.field..., sequence number,
input position), so each key's rows form one contiguous segment of the sorted order; per column,
the result of each segment comes from ``reduceat`` kernels over masks ("the last row of the segment
that is an add and holds a value"), or from Arrow group-bys where numpy has no kernel (decimal
sums, string min/max). Nothing loops over rows or keys.

Paimon's merge functions are followed exactly, including their quirks (see ``MergeEngine.merge``):
a key with a single row is returned as it is (Paimon's ``ReducerMergeFunctionWrapper``); a retraction
that is the first row of a partial-update merge initialises the row with its values; a delete that
removes the record (``*.remove-record-on-delete``) resets the row to the delete's values, and later
adds build on those.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError, OptionError, RowKindError
from changelake.options import TableOptions, parse_bool
from changelake.table.format import kv
from changelake.table.format.schema import TableSchema

DEDUPLICATE = "deduplicate"
PARTIAL_UPDATE = "partial-update"
AGGREGATION = "aggregation"
FIRST_ROW = "first-row"
ENGINES = (DEDUPLICATE, PARTIAL_UPDATE, AGGREGATION, FIRST_ROW)

SUM, PRODUCT, COUNT, MAX, MIN = "sum", "product", "count", "max", "min"
LAST_VALUE, LAST_NON_NULL_VALUE = "last_value", "last_non_null_value"
FIRST_VALUE, FIRST_NON_NULL_VALUE = "first_value", "first_non_null_value"
LISTAGG, BOOL_AND, BOOL_OR = "listagg", "bool_and", "bool_or"
FUNCTIONS = (
    SUM, PRODUCT, COUNT, MAX, MIN, LAST_VALUE, LAST_NON_NULL_VALUE, FIRST_VALUE, FIRST_NON_NULL_VALUE,
    LISTAGG, BOOL_AND, BOOL_OR,
)  # fmt: skip
# Functions whose Paimon aggregator implements ``retract``; the others reject -U/-D rows unless
# ``fields.<f>.ignore-retract`` is set.
RETRACTABLE = frozenset({SUM, PRODUCT, COUNT, LAST_VALUE, LAST_NON_NULL_VALUE})
# What partial-update supports inside a sequence group (Paimon allows every function there). Not
# count: a row with an older sequence is merged reversed (the row's value as the accumulator, the
# count as the input), which for count is not the commutative update it is for sum.
PARTIAL_UPDATE_FUNCTIONS = frozenset({SUM, MAX, MIN, BOOL_AND, BOOL_OR, LAST_VALUE, LAST_NON_NULL_VALUE})
_ALIASES = {"first_not_null_value": FIRST_NON_NULL_VALUE}
_NOT_IMPLEMENTED = frozenset({
    "collect", "merge_map", "merge_map_with_keytime", "nested_update", "nested_partial_update",
    "hll_sketch", "theta_sketch", "rbm32", "rbm64",
})  # fmt: skip

_FIELDS = "fields."
_DEFAULT_FUNCTION = "fields.default-aggregate-function"
_FIELD_SUFFIXES = ("aggregate-function", "sequence-group", "ignore-retract", "list-agg-delimiter", "distinct")

_RETRACT_KINDS = (kv.UPDATE_BEFORE, kv.DELETE)


@dataclass(frozen=True)
class FieldAggregate:
    """The aggregate function of one column (``fields.<column>.*`` options)."""

    column: str
    function: str
    ignore_retract: bool = False
    delimiter: str = ","
    distinct: bool = False

    @property
    def accepts_retract(self) -> bool:
        return self.ignore_retract or self.function in RETRACTABLE


@dataclass(frozen=True)
class SequenceGroup:
    """``fields.<sequence_fields>.sequence-group = <fields>`` of a partial-update table."""

    sequence_fields: tuple[str, ...]
    fields: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.sequence_fields + self.fields


@dataclass(frozen=True)
class MergeEngine:
    """How rows of one key merge: a table's merge engine with its options, parsed and checked."""

    engine: str = DEDUPLICATE
    table: str = ""
    primary_keys: tuple[str, ...] = ()
    sequence_fields: tuple[str, ...] = ()
    sequence_ascending: bool = True
    ignore_delete: bool = False
    # partial-update.remove-record-on-delete / aggregation.remove-record-on-delete
    remove_record_on_delete: bool = False
    sequence_groups: tuple[SequenceGroup, ...] = ()
    # index into sequence_groups of partial-update.remove-record-on-sequence-group
    delete_group: int | None = None
    # aggregation: one per non-key column; partial-update: sequence-group fields with a function
    aggregates: tuple[FieldAggregate, ...] = ()

    # -- construction -----------------------------------------------------------------------

    @staticmethod
    def of(schema: TableSchema, options: TableOptions) -> MergeEngine:
        """The merge engine a table's schema and options describe; OptionError naming the table
        and the option for anything Paimon would reject (or changelake does not implement)."""
        return _Parser(schema, options.raw, options.table).parse()

    @property
    def keeps_last_row(self) -> bool:
        """Merging keeps each key's last row as it is (deduplicate by commit order)."""
        return self.engine == DEDUPLICATE and not self.sequence_fields

    @property
    def needs_lookup(self) -> bool:
        """Compaction drops keys already in older levels (first-row's lookup compaction)."""
        return self.engine == FIRST_ROW

    @property
    def keys_unique_across_levels(self) -> bool:
        """No key lives in two files above level 0, so such files read raw without merging."""
        return self.needs_lookup

    # -- input ------------------------------------------------------------------------------

    def input_mask(self, kinds: np.ndarray) -> np.ndarray | None:
        """Rows a writer keeps: with ``ignore-delete`` the -U/-D rows are dropped before they are
        written, as Paimon's table write does; None when every row is kept."""
        if not self.ignore_delete:
            return None
        keep = ~np.isin(kinds, _RETRACT_KINDS)
        return None if keep.all() else keep

    def check_input(self, kinds: np.ndarray, table_name: str) -> None:
        """RowKindError when the engine cannot merge the input's -U/-D rows (Paimon fails the
        merge later; changelake refuses them before anything is written)."""
        if self.ignore_delete or len(kinds) == 0:
            return
        retracts = np.isin(kinds, _RETRACT_KINDS)
        if not retracts.any():
            return
        if self.engine == FIRST_ROW:
            raise RowKindError(
                f"table {table_name}: the first-row merge engine cannot accept -U/-D rows "
                f"({int(retracts.sum())} in the input); set 'ignore-delete'='true' to ignore them"
            )
        if self.engine == PARTIAL_UPDATE and not self.sequence_groups and not self.remove_record_on_delete:
            raise RowKindError(
                f"table {table_name}: the partial-update merge engine cannot accept -U/-D rows "
                f"({int(retracts.sum())} in the input) by default; either set 'ignore-delete'='true' "
                "to ignore them, or 'partial-update.remove-record-on-delete'='true' to remove the whole "
                "row on -D, or configure 'fields.<seq>.sequence-group' to retract the group's columns"
            )
        if self.engine in (AGGREGATION, PARTIAL_UPDATE):
            needs_retract = retracts
            if self.engine == AGGREGATION and self.remove_record_on_delete:
                needs_retract = kinds == kv.UPDATE_BEFORE
            if not needs_retract.any():
                return
            rejecting = [a for a in self.aggregates if not a.accepts_retract]
            if rejecting:
                raise RowKindError(_retract_message(table_name, rejecting, int(needs_retract.sum())))

    def required_columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` plus the columns a merge of them needs (sequence fields, the sequence
        fields of their sequence groups), for reads that project columns."""
        wanted = list(columns)
        extra = list(self.sequence_fields)
        for index, group in enumerate(self.sequence_groups):
            if index == self.delete_group or any(c in wanted for c in group.columns):
                extra.extend(group.sequence_fields)
        return wanted + [c for c in dict.fromkeys(extra) if c not in wanted]

    # -- merge ------------------------------------------------------------------------------

    def merge(self, rows: pa.Table, key_columns: Sequence[str], *, drop_deletes: bool) -> pa.Table:
        """One row per key, sorted by key: the merge of the key's rows in sequence order.

        ``rows`` is in data-file layout (``_KEY_*`` columns, ``_SEQUENCE_NUMBER``,
        ``_VALUE_KIND``, then table columns, possibly a projection), in any order. Rows of a key
        are merged in the order of the sequence fields (nulls first, ``sequence.field.sort-order``),
        then the sequence number, then the input position. The result keeps the layout; its
        sequence number is the key's maximum; its kind is the merged kind (deduplicate and
        first-row: the winning row's; partial-update and aggregation: +I, or -D when the record is
        removed; a key with one row keeps that row as it is). ``drop_deletes`` drops keys whose
        result is -U/-D; otherwise they stay as delete markers for older data. With ``ignore-delete``
        the -U/-D rows are skipped (a key with nothing else has no result).
        """
        if self.ignore_delete and rows.num_rows:
            kinds = np.asarray(rows.column(kv.VALUE_KIND).to_numpy())
            keep = self.input_mask(kinds)
            if keep is not None:
                rows = rows.filter(pa.array(keep))
        if rows.num_rows == 0:
            return rows
        try:
            merged = self._merge(rows, key_columns)
        except DataError as exc:
            if str(exc).startswith(f"table {self.table}:"):
                raise
            raise type(exc)(f"table {self.table}: {exc}") from None
        return kv.drop_retractions(merged) if drop_deletes else merged

    def _merge(self, rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
        if self.engine == DEDUPLICATE and not self.sequence_fields:
            merged = kv.deduplicate(rows, key_columns)
        else:
            frame = _Frame.of(rows, key_columns, self.sequence_fields, self.sequence_ascending)
            if self.engine == DEDUPLICATE:
                merged = frame.pick_rows(rows, frame.lasts)
            elif self.engine == FIRST_ROW:
                merged = self._first_row(rows, frame)
            elif self.engine == PARTIAL_UPDATE:
                merged = frame.assemble(rows, key_columns, *self._partial_update(rows, frame))
            else:
                merged = frame.assemble(rows, key_columns, *self._aggregation(rows, frame))
        return merged

    # -- engines ----------------------------------------------------------------------------

    def _first_row(self, rows: pa.Table, frame: _Frame) -> pa.Table:
        bad = frame.retract & frame.multi_row
        if bad.any():
            raise RowKindError(
                f"table {self.table}: the first-row merge engine cannot accept -U/-D rows "
                f"({int(bad.sum())} found while merging); set 'ignore-delete'='true' to ignore them"
            )
        return frame.pick_rows(rows, frame.starts)

    def _partial_update(self, rows: pa.Table, frame: _Frame) -> tuple[dict[str, Result], np.ndarray]:
        f = frame
        if not self.sequence_groups and not self.remove_record_on_delete:
            bad = f.retract & f.multi_row
            if bad.any():
                raise RowKindError(
                    f"table {self.table}: the partial-update merge engine cannot merge -U/-D rows "
                    f"({int(bad.sum())} found); set 'ignore-delete', "
                    "'partial-update.remove-record-on-delete' or sequence groups"
                )
        present = set(rows.column_names)
        groups = [g for g in self.sequence_groups if any(c in present for c in g.columns)]
        for group in groups:
            missing = [s for s in group.sequence_fields if s not in present]
            if missing:
                raise DataError(
                    f"table {self.table}: merging columns of a sequence group needs its sequence fields {missing}"
                )
        codes = [_sequence_code([rows.column(s) for s in g.sequence_fields], f) for g in groups]

        # Rows that reset the record to their own values (and mark it deleted).
        if self.remove_record_on_delete:
            reset = f.kinds == kv.DELETE
        elif self.delete_group is not None:
            group = self.sequence_groups[self.delete_group]
            if group not in groups:
                raise DataError(f"table {self.table}: merging needs the sequence fields {group.sequence_fields}")
            code = codes[groups.index(group)]
            reset = (f.kinds == kv.DELETE) & (code >= 0) & (code >= f.exclusive_cummax(code))
        else:
            reset = np.zeros(f.n, dtype=bool)
        last_reset = f.last_where(reset)
        start = np.where(last_reset >= 0, last_reset, f.starts)
        # The record starts from the start row's values after a reset, or when the first row is a
        # retraction (Paimon's initRow); otherwise it starts empty and the first row is merged.
        start_is_state = (last_reset >= 0) | f.retract[start]
        start_row = start[f.gid]
        at_start = f.pos == start_row
        processed = (f.pos > start_row) | (at_start & ~reset)
        init = np.where(start_is_state, start, -1)

        results: dict[str, Result] = {}
        grouped = {c for g in groups for c in g.columns}
        contributes = (processed & f.add) | (at_start & start_is_state[f.gid])
        for name in self._value_columns(rows):
            if name not in grouped:
                results[name] = f.last_where(contributes & f.valid(rows.column(name)))
        aggregates = {a.column: a for a in self.aggregates}
        for group, code in zip(groups, codes, strict=True):
            live = np.where(f.pos >= start_row, code, -1)  # the record's history starts at its start row
            part = processed & (live >= 0)
            winner = part & (live >= f.exclusive_cummax(live))
            last_winner = f.last_where(winner)
            for name in group.sequence_fields:
                results[name] = np.where(last_winner >= 0, last_winner, init)
            winner_value = np.where(f.add[np.maximum(last_winner, 0)], last_winner, -1)
            for name in group.fields:
                if name not in present:
                    continue
                agg = aggregates.get(name)
                if agg is None:
                    results[name] = np.where(last_winner >= 0, winner_value, init)
                    continue
                column = rows.column(name)
                retract = part & f.retract
                if agg.ignore_retract:
                    retract = np.zeros(f.n, dtype=bool)
                elif not agg.accepts_retract:  # also retractions before a reset: Paimon merged them
                    self._reject_retract(agg, f.retract & ~reset & (code >= 0) & f.multi_row)
                if agg.function == LAST_VALUE:
                    results[name] = _last_value(f, winner & f.add, retract, init)
                elif agg.function == LAST_NON_NULL_VALUE:
                    results[name] = _group_last_non_null(f, f.valid(column), winner, part, retract, init)
                else:
                    results[name] = _AGGREGATORS[agg.function](column, f, part & f.add, retract, init, agg)
        has_add = f.any(f.add)
        kinds = np.where(reset[f.lasts] | ~has_add, kv.DELETE, kv.INSERT).astype(np.int8)
        return results, kinds

    def _aggregation(self, rows: pa.Table, frame: _Frame) -> tuple[dict[str, Result], np.ndarray]:
        f = frame
        reset = (f.kinds == kv.DELETE) if self.remove_record_on_delete else np.zeros(f.n, dtype=bool)
        init = f.last_where(reset)
        after = f.pos > init[f.gid]
        add, retract = after & f.add, after & f.retract
        before = f.add & ~after
        aggregates = {a.column: a for a in self.aggregates}
        results: dict[str, Result] = {}
        for name in self._value_columns(rows):
            agg = aggregates.get(name)
            if agg is None:  # a primary-key column: every row holds the key's value
                results[name] = f.lasts
                continue
            column = rows.column(name)
            column_retract = retract
            if agg.ignore_retract:
                column_retract = np.zeros(f.n, dtype=bool)
            elif not agg.accepts_retract:  # Paimon fails on any retraction it merges, also before a reset
                self._reject_retract(agg, f.retract & ~reset & f.multi_row)
            function = agg.function
            if function == LAST_VALUE:
                results[name] = _last_value(f, add, column_retract, init)
            elif function == LAST_NON_NULL_VALUE:
                valid = f.valid(column)
                results[name] = _last_value(f, add & valid, column_retract & valid, init)
            elif function in (FIRST_VALUE, FIRST_NON_NULL_VALUE):
                counted = f.valid(column) if function == FIRST_NON_NULL_VALUE else np.ones(f.n, dtype=bool)
                results[name] = _first_value(f, add & counted, before & counted, init)
            else:
                results[name] = _AGGREGATORS[function](column, f, add, column_retract, init, agg)
        kinds = np.where(reset[f.lasts], kv.DELETE, kv.INSERT).astype(np.int8)
        return results, kinds

    def _value_columns(self, rows: pa.Table) -> list[str]:
        return [
            n for n in rows.column_names if not n.startswith(kv.KEY_PREFIX) and n not in (kv.SEQUENCE, kv.VALUE_KIND)
        ]

    def _reject_retract(self, agg: FieldAggregate, retract: np.ndarray) -> None:
        if retract.any():
            raise RowKindError(_retract_message(self.table, [agg], int(retract.sum())))


def _retract_message(table: str, aggregates: Sequence[FieldAggregate], count: int) -> str:
    named = ", ".join(f"{a.column!r} ({a.function})" for a in aggregates)
    first = aggregates[0].column
    return (
        f"table {table}: {count} -U/-D rows cannot be merged: the aggregate functions of {named} do not "
        f"support retraction; set 'fields.{first}.ignore-retract'='true' (per column) to ignore "
        "retractions, or 'ignore-delete'='true' to drop -U/-D rows"
    )


# ---------------------------------------------------------------------------------------------
# Sorted frame


# A merged column: per key either the sorted position of the row whose value it takes (-1: null),
# or the computed values.
Result: TypeAlias = "np.ndarray | pa.Array"


class _Frame:
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
    def of(rows: pa.Table, key_columns: Sequence[str], sequence_fields: Sequence[str], ascending: bool) -> _Frame:
        keys = [rows.column(k) for k in key_columns]
        ranks = [pa.array(_sort_rank(rows.column(s), ascending)) for s in sequence_fields]
        order = kv.sort_indices([*keys, *ranks], rows.column(kv.SEQUENCE))
        ends = kv.group_ends([k.take(order) for k in keys])
        kinds = np.asarray(rows.column(kv.VALUE_KIND).to_numpy())
        sequence = np.asarray(rows.column(kv.SEQUENCE).to_numpy())
        return _Frame(order, ends, kinds, sequence)

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
        array = array.cast(_numeric_type(array.type))
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


def _numeric_type(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(data_type) or pa.types.is_time64(data_type) or pa.types.is_duration(data_type):
        return pa.int64()
    if pa.types.is_date32(data_type) or pa.types.is_time32(data_type):
        return pa.int32()
    if pa.types.is_date64(data_type):
        return pa.int64()
    if pa.types.is_boolean(data_type):
        return pa.int8()
    return data_type


def _is_numeric(data_type: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_integer(data_type) or t.is_floating(data_type) or t.is_temporal(data_type) or t.is_boolean(data_type)
    )


def _from_numpy(values: np.ndarray, valid: np.ndarray, data_type: pa.DataType) -> pa.Array:
    array = (
        pa.array(values, mask=~valid, type=_numeric_type(data_type))
        if len(values)
        else pa.array([], _numeric_type(data_type))
    )
    return array.cast(data_type)


def _sort_rank(column: pa.ChunkedArray | pa.Array, ascending: bool) -> np.ndarray:
    """Integers ordering the values as Paimon orders sequence fields: nulls first, then the values
    ascending or descending; equal values get equal numbers."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    rank = np.asarray(
        pc.rank(array, sort_keys="ascending", null_placement="at_start", tiebreaker="dense").to_numpy(),
        dtype=np.int64,
    )
    if ascending or len(rank) == 0:
        return rank
    has_nulls = array.null_count > 0
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    top = int(rank.max())
    return np.where(valid, top + 1 + int(has_nulls) - rank, rank)


def _sequence_code(columns: Sequence[pa.ChunkedArray | pa.Array], frame: _Frame) -> np.ndarray:
    """Per sorted row, a number ordering its sequence-group fields lexicographically (nulls
    first, ascending), -1 when they are all null."""
    code: np.ndarray | None = None
    all_null = np.ones(frame.n, dtype=bool)
    for column in columns:
        array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        rank = np.asarray(
            pc.rank(array, sort_keys="ascending", null_placement="at_start", tiebreaker="dense").to_numpy(),
            dtype=np.int64,
        )[frame.order]
        valid = frame.valid(array)
        if array.null_count:
            rank = np.where(valid, rank - 1, 0)  # nulls 0, values 1..k
        all_null &= ~valid
        code = rank if code is None else np.unique(code * (int(rank.max()) + 1) + rank, return_inverse=True)[1]
    assert code is not None
    return np.where(all_null, -1, np.asarray(code, dtype=np.int64).reshape(-1))


# ---------------------------------------------------------------------------------------------
# Aggregate functions: (column, frame, add rows, retract rows, initial row per key) -> per key.
# ``add``/``retract`` mark the sorted rows merged into the accumulator; ``init`` is the sorted
# position whose value the accumulator starts from (-1: null).


def _init_values(values: np.ndarray, valid: np.ndarray, init: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    safe = np.maximum(init, 0)
    ok = (init >= 0) & valid[safe] if len(values) else init >= 0
    return values[safe], ok


def _last_value(f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray) -> np.ndarray:
    """The value of the last add (a retraction after it makes it null); ``init`` with neither."""
    last = f.last_where(add | retract)
    return np.where(last >= 0, np.where(add[np.maximum(last, 0)], last, -1), init)


def _first_value(f: _Frame, add: np.ndarray, before: np.ndarray, init: np.ndarray) -> np.ndarray:
    """Paimon's first_value / first_non_null_value: the first counted add; after a reset the
    reset's value when the aggregator was already initialised by a counted add before it."""
    initialised = f.any(before)
    first = f.first_where(add)
    return np.where(initialised, init, np.where(first >= 0, first, init))


def _group_last_non_null(
    f: _Frame, valid: np.ndarray, winner: np.ndarray, part: np.ndarray, retract: np.ndarray, init: np.ndarray
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


def _sum(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
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
        return _from_numpy(total, has, data_type)
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
    return _from_numpy(total, has, data_type)


def _count(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    """Paimon's count (TINYINT..BIGINT): each merged add holding a value counts +1, each retraction
    holding one -1; the values themselves are never added. The accumulator starts from ``init``'s
    value, or null, which any merged row (a null one too) turns into 0 first; so the result is
    null only when no row was merged and ``init`` holds no value."""
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
    return _from_numpy(total, has, data_type)


def _check_range(values: np.ndarray, data_type: pa.DataType, agg: FieldAggregate, what: str) -> None:
    if not len(values):
        return
    info = np.iinfo(data_type.to_pandas_dtype())
    low, high = min(values), max(values)
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        raise DataError(f"column {agg.column!r}: {what} {bad} overflows {data_type}")


def _decimal_sum(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
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
        raise DataError(f"column {agg.column!r}: sum overflows {data_type}") from None


def _group_aggregate(values: pa.Array, groups: np.ndarray, function: str, count: int) -> pa.Array:
    """``function`` of ``values`` per group number; null for groups without values."""
    table = pa.table({"g": pa.array(groups, pa.int64()), "v": values})
    result = table.group_by("g", use_threads=False).aggregate([("v", function)])
    slots = np.full(count, -1, dtype=np.int64)
    slots[np.asarray(result.column("g").to_numpy())] = np.arange(result.num_rows)
    out = result.column(f"v_{function}").take(pa.array(slots, mask=slots < 0))
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _extreme(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    is_max = agg.function == MAX
    data_type = column.type
    if pa.types.is_boolean(data_type):
        return _bool(column, f, add, retract, init, FieldAggregate(agg.column, BOOL_OR if is_max else BOOL_AND))
    if _is_numeric(data_type):
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
        return _from_numpy(best, f.any(chosen) | init_ok, data_type)
    valid = f.valid(column)
    init_ok = (init >= 0) & valid[np.maximum(init, 0)]
    chosen = np.concatenate([np.flatnonzero(add & valid), init[init_ok]])
    groups = np.concatenate([f.gid[add & valid], np.flatnonzero(init_ok)])
    return _group_aggregate(f.take(column, chosen), groups, "max" if is_max else "min", f.groups)


def _bool(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
) -> pa.Array:
    values, valid = f.numeric(column)
    chosen = add & valid
    init_values, init_ok = _init_values(values, valid, init)
    if agg.function == BOOL_AND:
        best = np.minimum.reduceat(np.where(chosen, values, 1), f.starts)
        best = np.where(init_ok, np.minimum(best, init_values), best)
    else:
        best = np.maximum.reduceat(np.where(chosen, values, 0), f.starts)
        best = np.where(init_ok, np.maximum(best, init_values), best)
    return pa.array(best.astype(bool), mask=~(f.any(chosen) | init_ok), type=pa.bool_())


def _product(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
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
            return _from_numpy((product / divisor).astype(values.dtype), has, data_type)
    wide = values.astype(np.int64)
    start = np.where(init_ok, init_values, 1).astype(np.int64)
    if not divide.any():
        product = np.multiply.reduceat(np.where(plus, wide, 1), f.starts) * start
        magnitude = np.multiply.reduceat(np.abs(np.where(plus, wide, 1).astype(np.float64)), f.starts)
        _check_product(magnitude * np.abs(start.astype(np.float64)), has, data_type, agg)
        _check_range(product[has], data_type, agg, "product")
        return _from_numpy(product, has, data_type)
    return _integer_product_with_division(wide, plus, divide, start, has, f, data_type, agg)


def _check_product(magnitude: np.ndarray, has: np.ndarray, data_type: pa.DataType, agg: FieldAggregate) -> None:
    if (magnitude[has] >= 2.0**63).any():
        raise DataError(f"column {agg.column!r}: product overflows {data_type}")


def _integer_product_with_division(
    values: np.ndarray,
    plus: np.ndarray,
    divide: np.ndarray,
    start: np.ndarray,
    has: np.ndarray,
    f: _Frame,
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
        raise DataError(f"column {agg.column!r}: product retraction divides by zero")
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
    return _from_numpy(acc, has, data_type)


def _listagg(
    column: pa.ChunkedArray, f: _Frame, add: np.ndarray, retract: np.ndarray, init: np.ndarray, agg: FieldAggregate
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
    ordered: pa.Array, f: _Frame, head: np.ndarray, tail: np.ndarray, delimiter: str
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


_AggregateFn = Callable[[pa.ChunkedArray, _Frame, np.ndarray, np.ndarray, np.ndarray, FieldAggregate], pa.Array]
_AGGREGATORS: dict[str, _AggregateFn] = {
    SUM: _sum,
    PRODUCT: _product,
    COUNT: _count,
    MAX: _extreme,
    MIN: _extreme,
    BOOL_AND: _bool,
    BOOL_OR: _bool,
    LISTAGG: _listagg,
}


# ---------------------------------------------------------------------------------------------
# Options


class _Parser:
    def __init__(self, schema: TableSchema, options: Mapping[str, str], table: str) -> None:
        self.schema = schema
        self.options = options
        self.table = table
        self.arrow = schema.arrow_schema()
        self.names = list(self.arrow.names)
        self.primary_keys = tuple(schema.primary_keys)

    def fail(self, key: str, message: str) -> OptionError:
        return OptionError(f"table {self.table}: option {key!r}: {message}")

    def flag(self, key: str) -> bool:
        try:
            return parse_bool(self.options.get(key, "false"))
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def field_options(self, suffix: str) -> dict[tuple[str, ...], tuple[str, str]]:
        """``fields.<names>.<suffix>`` options: names -> (option key, value)."""
        out: dict[tuple[str, ...], tuple[str, str]] = {}
        for key, value in self.options.items():
            if key.startswith(_FIELDS) and key.endswith("." + suffix) and key != _DEFAULT_FUNCTION:
                names = key[len(_FIELDS) : -len(suffix) - 1]
                out[tuple(n.strip() for n in names.split(","))] = (key, value)
        return out

    def check_field_names(self) -> None:
        for key in self.options:
            if not key.startswith(_FIELDS) or key == _DEFAULT_FUNCTION:
                continue
            names, _, suffix = key[len(_FIELDS) :].rpartition(".")
            if suffix not in _FIELD_SUFFIXES:
                continue
            for name in names.split(","):
                if name.strip() not in self.names:
                    hint = difflib.get_close_matches(name.strip(), self.names, n=1)
                    raise self.fail(
                        key,
                        f"column {name.strip()!r} is not in the table"
                        + (f"; did you mean {hint[0]!r}?" if hint else ""),
                    )

    def parse(self) -> MergeEngine:
        engine = self.options.get("merge-engine", DEDUPLICATE).strip().lower()
        if engine not in ENGINES:
            raise self.fail("merge-engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
        self.check_field_names()
        sequence_fields = self.sequence_fields(engine)
        order = self.options.get("sequence.field.sort-order", "ascending").strip().lower()
        if order not in ("ascending", "descending"):
            raise self.fail("sequence.field.sort-order", f"{order!r} is not 'ascending' or 'descending'")
        ignore_delete = self.flag("ignore-delete")
        base = MergeEngine(
            engine=engine,
            table=self.table,
            primary_keys=self.primary_keys,
            sequence_fields=sequence_fields,
            sequence_ascending=order == "ascending",
            ignore_delete=ignore_delete,
        )
        for names, (key, _) in self.field_options("aggregate-function").items():
            for column in names:
                if column in self.primary_keys:
                    raise self.fail(key, f"{column!r} is a primary-key column and cannot be aggregated")
        if engine == PARTIAL_UPDATE:
            return self.partial_update(base)
        if engine == AGGREGATION:
            return self.aggregation(base)
        return base

    def sequence_fields(self, engine: str) -> tuple[str, ...]:
        text = self.options.get("sequence.field", "")
        fields = tuple(f.strip() for f in text.split(",") if f.strip())
        if not fields:
            return ()
        if engine == FIRST_ROW:
            raise self.fail("sequence.field", "the first-row merge engine does not support a sequence field")
        for name in fields:
            if name not in self.names:
                raise self.fail("sequence.field", f"column {name!r} is not in the table")
            if fields.count(name) > 1:
                raise self.fail("sequence.field", f"column {name!r} is named twice")
            if f"{_FIELDS}{name}.aggregate-function" in self.options:
                raise self.fail(
                    f"{_FIELDS}{name}.aggregate-function", f"{name!r} is a sequence field and cannot be aggregated"
                )
            if pa.types.is_nested(self.arrow.field(name).type):
                raise self.fail(
                    "sequence.field", f"column {name!r} of type {self.arrow.field(name).type} cannot order rows"
                )
        return fields

    def function(self, column: str) -> tuple[str, str] | None:
        """(option key, function name) of a column, from its own option or the default."""
        key = f"{_FIELDS}{column}.aggregate-function"
        if key in self.options:
            return key, self.options[key]
        if _DEFAULT_FUNCTION in self.options:
            return _DEFAULT_FUNCTION, self.options[_DEFAULT_FUNCTION]
        return None

    def aggregate(self, column: str, key: str, text: str) -> FieldAggregate:
        name = text.strip().lower()
        name = _ALIASES.get(name, name)
        if name in _NOT_IMPLEMENTED:
            raise self.fail(key, f"aggregate function {name!r} is not supported by changelake")
        if name not in FUNCTIONS:
            hint = difflib.get_close_matches(name, FUNCTIONS, n=1)
            raise self.fail(
                key, f"unknown aggregate function {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
            )
        data_type = self.arrow.field(column).type
        if not _type_fits(name, data_type):
            needs = " (count applies to TINYINT, SMALLINT, INT and BIGINT columns)" if name == COUNT else ""
            raise self.fail(
                key, f"aggregate function {name!r} does not apply to column {column!r} of type {data_type}{needs}"
            )
        ignore_retract = self.flag(f"{_FIELDS}{column}.ignore-retract")
        delimiter = self.options.get(f"{_FIELDS}{column}.list-agg-delimiter", ",")
        distinct = self.flag(f"{_FIELDS}{column}.distinct")
        if name == LISTAGG and distinct and not delimiter:
            raise self.fail(f"{_FIELDS}{column}.list-agg-delimiter", "listagg with distinct needs a delimiter")
        return FieldAggregate(column, name, ignore_retract, delimiter, distinct)

    def aggregation(self, base: MergeEngine) -> MergeEngine:
        remove = self.flag("aggregation.remove-record-on-delete")
        aggregates = []
        for column in self.names:
            if column in self.primary_keys:
                continue
            if column in base.sequence_fields:  # Paimon aggregates sequence fields with last_value
                ignore_retract = self.flag(f"{_FIELDS}{column}.ignore-retract")
                aggregates.append(FieldAggregate(column, LAST_VALUE, ignore_retract))
                continue
            found = self.function(column)
            key, text = found if found is not None else ("", LAST_NON_NULL_VALUE)
            aggregate = self.aggregate(column, key, text)
            if remove and aggregate.ignore_retract:
                raise self.fail(
                    f"{_FIELDS}{column}.ignore-retract",
                    "conflicts with 'aggregation.remove-record-on-delete'; do not set both",
                )
            aggregates.append(aggregate)
        return dataclasses.replace(base, remove_record_on_delete=remove, aggregates=tuple(aggregates))

    def partial_update(self, base: MergeEngine) -> MergeEngine:
        remove = self.flag("partial-update.remove-record-on-delete")
        groups: list[SequenceGroup] = []
        protected: dict[str, str] = {}
        sequence_owner: dict[str, str] = {}
        for sequence_fields, (key, value) in self.field_options("sequence-group").items():
            fields = tuple(f.strip() for f in value.split(",") if f.strip())
            for name in sequence_fields + fields:
                if name not in self.names:
                    raise self.fail(key, f"column {name!r} is not in the table")
                if name in self.primary_keys:
                    raise self.fail(key, f"primary-key column {name!r} cannot be in a sequence group")
            for name in sequence_fields:
                if pa.types.is_nested(self.arrow.field(name).type):
                    raise self.fail(key, f"column {name!r} of type {self.arrow.field(name).type} cannot order a group")
                if name in sequence_owner or name in protected:
                    raise self.fail(key, f"column {name!r} is already in another sequence group")
                sequence_owner[name] = key
            for name in fields:
                if name in protected or name in sequence_owner:
                    raise self.fail(key, f"column {name!r} is defined repeatedly by multiple sequence groups")
                protected[name] = key
            groups.append(SequenceGroup(sequence_fields, fields))
        if remove and base.ignore_delete:
            raise self.fail("partial-update.remove-record-on-delete", "conflicts with 'ignore-delete'; do not set both")
        if remove and groups:
            raise self.fail("partial-update.remove-record-on-delete", "conflicts with sequence groups; do not set both")
        delete_group = self.delete_group(groups, base.ignore_delete)
        aggregates = []
        for column in self.names:
            if column in self.primary_keys or column in sequence_owner:
                continue
            found = self.function(column)
            if found is None:
                continue
            key, text = found
            aggregate = self.aggregate(column, key, text)
            if column not in protected:
                if aggregate.function != LAST_NON_NULL_VALUE:
                    raise self.fail(
                        key,
                        f"column {column!r} is not in a sequence group; partial-update aggregates only "
                        "sequence-group columns (except last_non_null_value)",
                    )
                continue
            if aggregate.function not in PARTIAL_UPDATE_FUNCTIONS:
                raise self.fail(
                    key,
                    f"changelake supports only {', '.join(sorted(PARTIAL_UPDATE_FUNCTIONS))} in partial-update "
                    f"sequence groups, not {aggregate.function!r}",
                )
            aggregates.append(aggregate)
        return dataclasses.replace(
            base,
            remove_record_on_delete=remove,
            sequence_groups=tuple(groups),
            delete_group=delete_group,
            aggregates=tuple(aggregates),
        )

    def delete_group(self, groups: Sequence[SequenceGroup], ignore_delete: bool) -> int | None:
        key = "partial-update.remove-record-on-sequence-group"
        text = self.options.get(key)
        if text is None:
            return None
        if ignore_delete:
            raise self.fail(key, "conflicts with 'ignore-delete'; do not set both")
        names = [n.strip() for n in text.split(",") if n.strip()]
        found = set()
        for name in names:
            owners = [i for i, g in enumerate(groups) if name in g.sequence_fields]
            if not owners:
                raise self.fail(key, f"{name!r} must be a sequence field of a sequence group")
            found.add(owners[0])
        if len(found) != 1:
            raise self.fail(key, "changelake supports removing records on exactly one sequence group")
        return found.pop()


def _type_fits(function: str, data_type: pa.DataType) -> bool:
    t = pa.types
    if function in (SUM, PRODUCT):
        if function == PRODUCT and t.is_decimal(data_type):
            return False
        return bool(t.is_integer(data_type) or t.is_floating(data_type) or t.is_decimal(data_type))
    if function == COUNT:
        return bool(t.is_int8(data_type) or t.is_int16(data_type) or t.is_int32(data_type) or t.is_int64(data_type))
    if function in (MAX, MIN):
        return not t.is_nested(data_type) and not t.is_null(data_type)
    if function == LISTAGG:
        return bool(t.is_string(data_type) or t.is_large_string(data_type))
    if function in (BOOL_AND, BOOL_OR):
        return bool(t.is_boolean(data_type))
    return True
