"""Merge engines of primary-key tables: ``deduplicate``, ``first-row``, ``partial-update`` and
``aggregation``, with ``sequence.field`` and ``ignore-delete``, as Apache Paimon merges; one class
per engine (build one with ``changelake.table.merge.parse.merge_engine``).

Every merge is whole-column: the rows are sorted once by (key, sequence.field..., sequence number,
input position), so each key's rows form one contiguous segment of the sorted order; per column,
the result of each segment comes from ``reduceat`` kernels over masks ("the last row of the segment
that is an add and holds a value"), or from Arrow group-bys where numpy has no kernel (decimal
sums, string min/max). Nothing loops over rows or keys.

Paimon's merge functions are followed exactly, including their quirks (see ``MergeEngine.merge``):
a key with a single row is returned as it is (Paimon's ``ReducerMergeFunctionWrapper``); a retraction
that is the first row of a partial-update merge initialises the row; a delete that removes the
record (``*.remove-record-on-delete``, ``partial-update.remove-record-on-sequence-group``) restarts
it, and later rows build on that. A record initialised or restarted from a row takes the row's NOT
NULL values and nothing else, as ``initRow`` of Paimon 1.1 to 1.3 does (Paimon 1.0 restarted
empty; 1.4 takes every value of the delete, so a deleted row's values come back in the adds after
it, which changelake does not follow).

Paimon merges all the rows of a key that one merge sees in a single pass (a write buffer at flush,
spilled runs included; a compaction's section; a read's split), and some of its merges are not
associative, so which rows meet in one merge can change the result, in Paimon as here: a
partial-update merge that starts with a retraction takes the retraction's NOT NULL values;
``remove-record-on-sequence-group``'s delete holds only while the later rows of
that merge are retractions of other groups; ``count`` counts merged rows, not the rows behind them;
``last_non_null_value`` in a sequence group lets an older row fill a newer null; and a compaction
into the top level drops a key whose merge is a delete, so newer rows no longer meet it. changelake
merges exactly the rows Paimon would merge together (tests/table/merge/test_split_invariance.py).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa

from changelake.errors import DataError, RowKindError
from changelake.option_values import MergeEngineKind, SortOrder
from changelake.table.format import kv
from changelake.table.merge import sort
from changelake.table.merge.aggregates import (
    AggregateFunction,
    FieldAggregate,
    first_value,
    group_last_non_null,
    last_value,
)
from changelake.table.merge.frame import Result, SortedFrame, restart_codes, value_columns

_RETRACT_KINDS = (kv.UPDATE_BEFORE, kv.DELETE)


@dataclass(frozen=True)
class SequenceGroup:
    """``fields.<sequence_fields>.sequence-group = <fields>`` of a partial-update table."""

    sequence_fields: tuple[str, ...]
    fields: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.sequence_fields + self.fields


@dataclass(frozen=True, kw_only=True)
class MergeEngine(abc.ABC):
    """How rows of one key merge: a table's merge engine with its options, parsed and checked."""

    kind: ClassVar[MergeEngineKind]
    # Compaction drops keys already in older levels (first-row's lookup compaction).
    needs_lookup: ClassVar[bool] = False
    # No key lives in two files above level 0, so such files read raw without merging.
    keys_unique_across_levels: ClassVar[bool] = False

    table: str
    primary_keys: tuple[str, ...]
    sequence_fields: tuple[str, ...] = ()
    sequence_order: SortOrder = SortOrder.ASCENDING
    ignore_delete: bool = False
    # The NOT NULL columns: the only ones a merge that restarts a record from a row's values
    # takes from it (Paimon's initRow); the others restart as null.
    not_null: frozenset[str] = frozenset()

    @property
    def keeps_last_row(self) -> bool:
        """Merging keeps each key's last row as it is (deduplicate by commit order)."""
        return False

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
        if retracts.any():
            self._check_retractions(kinds, retracts, table_name)

    @abc.abstractmethod
    def _check_retractions(self, kinds: np.ndarray, retracts: np.ndarray, table_name: str) -> None:
        """RowKindError when the engine cannot merge the input's -U/-D rows (``retracts``, not none)."""

    def required_columns(self, columns: Sequence[str]) -> list[str]:
        """``columns`` plus the columns a merge of them needs (sequence fields, the sequence
        fields of their sequence groups), for reads that project columns."""
        wanted = list(columns)
        extra = self._ordering_columns(wanted)
        return wanted + [c for c in dict.fromkeys(extra) if c not in wanted]

    def _ordering_columns(self, wanted: Sequence[str]) -> list[str]:
        """The columns that order the merge of ``wanted``."""
        return list(self.sequence_fields)

    @property
    def ordering_columns(self) -> frozenset[str]:
        """Every column that orders some merge (sequence fields, those of sequence groups)."""
        return frozenset(self.sequence_fields)

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
        if drop_deletes and self.keeps_last_row:  # the last rows that are not retractions, in one take
            return sort.deduplicate(rows, key_columns, drop_retractions=True)
        try:
            merged = self._merge(rows, key_columns)
        except DataError as exc:  # the kernels do not know the table
            raise exc.in_table(self.table) from None
        return kv.drop_retractions(merged) if drop_deletes else merged

    @abc.abstractmethod
    def _merge(self, rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
        """The merge of ``rows`` (not empty), one row per key, sorted by key."""

    def _frame(self, rows: pa.Table, key_columns: Sequence[str]) -> SortedFrame:
        return SortedFrame.of(rows, key_columns, self.sequence_fields, self.sequence_order)


@dataclass(frozen=True, kw_only=True)
class Deduplicate(MergeEngine):
    """``deduplicate``: each key keeps its last row (a -U/-D row deletes the key)."""

    kind: ClassVar[MergeEngineKind] = MergeEngineKind.DEDUPLICATE

    @property
    def keeps_last_row(self) -> bool:
        return not self.sequence_fields

    def _check_retractions(self, kinds: np.ndarray, retracts: np.ndarray, table_name: str) -> None:
        """Nothing to refuse: a -U/-D row is the key's last row like any other (a delete)."""

    def _merge(self, rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
        if self.keeps_last_row:
            return sort.deduplicate(rows, key_columns)
        frame = self._frame(rows, key_columns)
        return frame.pick_rows(rows, frame.lasts)


@dataclass(frozen=True, kw_only=True)
class FirstRow(MergeEngine):
    """``first-row``: each key keeps its first row; -U/-D rows are refused (or dropped with
    ``ignore-delete``), so a key once written never changes and compaction looks it up."""

    kind: ClassVar[MergeEngineKind] = MergeEngineKind.FIRST_ROW
    needs_lookup: ClassVar[bool] = True
    keys_unique_across_levels: ClassVar[bool] = True

    def _check_retractions(self, kinds: np.ndarray, retracts: np.ndarray, table_name: str) -> None:
        raise RowKindError(
            f"the first-row merge engine cannot accept -U/-D rows ({int(retracts.sum())} in the input); "
            "set 'ignore-delete'='true' to ignore them",
            table=table_name,
        )

    def _merge(self, rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
        frame = self._frame(rows, key_columns)
        bad = frame.retract & frame.multi_row
        if bad.any():
            raise RowKindError(
                f"the first-row merge engine cannot accept -U/-D rows ({int(bad.sum())} found while merging); "
                "set 'ignore-delete'='true' to ignore them"
            )
        return frame.pick_rows(rows, frame.starts)


@dataclass(frozen=True, kw_only=True)
class PartialUpdate(MergeEngine):
    """``partial-update``: each column takes its last non-null value; sequence groups order their
    columns by their own sequence fields, and may aggregate them. With retractions the result
    depends on which rows meet in one merge (see the module docstring), as in Paimon."""

    kind: ClassVar[MergeEngineKind] = MergeEngineKind.PARTIAL_UPDATE

    # partial-update.remove-record-on-delete
    remove_record_on_delete: bool = False
    sequence_groups: tuple[SequenceGroup, ...] = ()
    # index into sequence_groups of partial-update.remove-record-on-sequence-group
    delete_group: int | None = None
    # the sequence-group fields with an aggregate function
    aggregates: tuple[FieldAggregate, ...] = ()

    def _check_retractions(self, kinds: np.ndarray, retracts: np.ndarray, table_name: str) -> None:
        if not self.sequence_groups and not self.remove_record_on_delete:
            raise RowKindError(
                f"the partial-update merge engine cannot accept -U/-D rows ({int(retracts.sum())} in the input) "
                "by default; either set 'ignore-delete'='true' to ignore them, or "
                "'partial-update.remove-record-on-delete'='true' to remove the whole row on -D, or configure "
                "'fields.<seq>.sequence-group' to retract the group's columns",
                table=table_name,
            )
        _reject_retractions(self.aggregates, retracts, table_name)

    def _ordering_columns(self, wanted: Sequence[str]) -> list[str]:
        extra = list(self.sequence_fields)
        for index, group in enumerate(self.sequence_groups):
            if index == self.delete_group or any(c in wanted for c in group.columns):
                extra.extend(group.sequence_fields)
        return extra

    @property
    def ordering_columns(self) -> frozenset[str]:
        return frozenset([*self.sequence_fields, *(s for g in self.sequence_groups for s in g.sequence_fields)])

    def _merge(self, rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
        frame = self._frame(rows, key_columns)
        return frame.assemble(rows, key_columns, *self._columns(rows, frame))

    def _columns(self, rows: pa.Table, frame: SortedFrame) -> tuple[dict[str, Result], np.ndarray]:
        f = frame
        if not self.sequence_groups and not self.remove_record_on_delete:
            bad = f.retract & f.multi_row
            if bad.any():
                raise RowKindError(
                    f"the partial-update merge engine cannot merge -U/-D rows ({int(bad.sum())} found); "
                    "set 'ignore-delete', 'partial-update.remove-record-on-delete' or sequence groups"
                )
        present = set(rows.column_names)
        groups = [g for g in self.sequence_groups if any(c in present for c in g.columns)]
        for group in groups:
            missing = [s for s in group.sequence_fields if s not in present]
            if missing:
                raise DataError(f"merging columns of a sequence group needs its sequence fields {missing}")
        # Per group, the sequence code of each row, and that of a record restarted from the row
        # (its NOT NULL sequence fields only).
        codes = [restart_codes([rows.column(s) for s in g.sequence_fields],
                               [s in self.not_null for s in g.sequence_fields], f) for g in groups]

        # Rows that restart the record from their values (and mark it deleted).
        if self.remove_record_on_delete:
            reset = f.kinds == kv.DELETE
        elif self.delete_group is not None:
            group = self.sequence_groups[self.delete_group]
            if group not in groups:
                raise DataError(f"merging needs the sequence fields {group.sequence_fields}")
            code, restart = codes[groups.index(group)]
            reset = _group_resets(f, (f.kinds == kv.DELETE) & (code >= 0), code, restart)
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
        init = _Init(np.where(start_is_state, start, -1), self.not_null)

        results: dict[str, Result] = {}
        grouped = {c for g in groups for c in g.columns}
        added = processed & f.add
        from_start = added | (at_start & start_is_state[f.gid])
        for name in value_columns(rows):
            if name not in grouped:
                contributes = from_start if name in self.not_null else added
                results[name] = f.last_where(contributes & f.valid(rows.column(name)))
        aggregates = {a.column: a for a in self.aggregates}
        reset_starts = at_start & reset
        for group, (code, restart) in zip(groups, codes, strict=True):
            # The record's history starts at its start row, as restarted after a reset.
            live = np.where(f.pos >= start_row, np.where(reset_starts, restart, code), -1)
            part = processed & (live >= 0)
            winner = part & (live >= f.exclusive_cummax(live))
            last_winner = f.last_where(winner)
            for name in group.sequence_fields:
                results[name] = np.where(last_winner >= 0, last_winner, init.of(name))
            winner_value = np.where(f.add[np.maximum(last_winner, 0)], last_winner, -1)
            for name in group.fields:
                if name not in present:
                    continue
                agg = aggregates.get(name)
                if agg is None:
                    results[name] = np.where(last_winner >= 0, winner_value, init.of(name))
                    continue
                column = rows.column(name)
                retract = part & f.retract
                if agg.ignore_retract:
                    retract = np.zeros(f.n, dtype=bool)
                elif not agg.accepts_retract:  # also retractions before a reset: Paimon merged them
                    _reject_retractions([agg], f.retract & ~reset & (code >= 0) & f.multi_row)
                start_value = init.of(name)
                if agg.function is AggregateFunction.LAST_VALUE:
                    results[name] = last_value(f, winner & f.add, retract, start_value)
                elif agg.function is AggregateFunction.LAST_NON_NULL_VALUE:
                    results[name] = group_last_non_null(f, f.valid(column), winner, part, retract, start_value)
                else:
                    results[name] = agg.aggregate(column, f, part & f.add, retract, start_value)
        has_add = f.any(f.add)
        kinds = np.where(reset[f.lasts] | ~has_add, kv.DELETE, kv.INSERT).astype(np.int8)
        return results, kinds


@dataclass(frozen=True, kw_only=True)
class Aggregation(MergeEngine):
    """``aggregation``: each non-key column merges with its aggregate function (default
    last_non_null_value; sequence fields last_value)."""

    kind: ClassVar[MergeEngineKind] = MergeEngineKind.AGGREGATION

    # aggregation.remove-record-on-delete
    remove_record_on_delete: bool = False
    # one per non-key column
    aggregates: tuple[FieldAggregate, ...] = ()

    def _check_retractions(self, kinds: np.ndarray, retracts: np.ndarray, table_name: str) -> None:
        # A -D that removes the record is not merged into the aggregates.
        needs_retract = kinds == kv.UPDATE_BEFORE if self.remove_record_on_delete else retracts
        _reject_retractions(self.aggregates, needs_retract, table_name)

    def _merge(self, rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
        frame = self._frame(rows, key_columns)
        return frame.assemble(rows, key_columns, *self._columns(rows, frame))

    def _columns(self, rows: pa.Table, frame: SortedFrame) -> tuple[dict[str, Result], np.ndarray]:
        f = frame
        reset = (f.kinds == kv.DELETE) if self.remove_record_on_delete else np.zeros(f.n, dtype=bool)
        last_reset = f.last_where(reset)
        init = _Init(last_reset, self.not_null)
        after = f.pos > last_reset[f.gid]
        add, retract = after & f.add, after & f.retract
        before = f.add & ~after
        aggregates = {a.column: a for a in self.aggregates}
        results: dict[str, Result] = {}
        for name in value_columns(rows):
            agg = aggregates.get(name)
            if agg is None:  # a primary-key column: every row holds the key's value
                results[name] = f.lasts
                continue
            column = rows.column(name)
            column_retract = retract
            if agg.ignore_retract:
                column_retract = np.zeros(f.n, dtype=bool)
            elif not agg.accepts_retract:  # Paimon fails on any retraction it merges, also before a reset
                _reject_retractions([agg], f.retract & ~reset & f.multi_row)
            function = agg.function
            start_value = init.of(name)
            if function is AggregateFunction.LAST_VALUE:
                results[name] = last_value(f, add, column_retract, start_value)
            elif function is AggregateFunction.LAST_NON_NULL_VALUE:
                valid = f.valid(column)
                results[name] = last_value(f, add & valid, column_retract & valid, start_value)
            elif function in (AggregateFunction.FIRST_VALUE, AggregateFunction.FIRST_NON_NULL_VALUE):
                counted = (
                    f.valid(column) if function is AggregateFunction.FIRST_NON_NULL_VALUE else np.ones(f.n, dtype=bool)
                )
                results[name] = first_value(f, add & counted, before & counted, start_value)
            else:
                results[name] = agg.aggregate(column, f, add, column_retract, start_value)
        kinds = np.where(reset[f.lasts], kv.DELETE, kv.INSERT).astype(np.int8)
        return results, kinds


@dataclass(frozen=True)
class _Init:
    """Where a restarted record's values come from, per key: the sorted position of the row it
    restarts from (-1: none) for the NOT NULL columns; the others restart as null. Paimon's
    PartialUpdateMergeFunction and AggregateMergeFunction (1.1 to 1.3) do so in ``initRow``, so a
    deleted row's values do not come back in the adds after its delete."""

    positions: np.ndarray
    not_null: frozenset[str]

    def of(self, column: str) -> np.ndarray:
        """Per key, the position ``column`` restarts from (-1: null)."""
        return self.positions if column in self.not_null else np.full_like(self.positions, -1)


def _group_resets(f: SortedFrame, candidates: np.ndarray, code: np.ndarray, restart: np.ndarray) -> np.ndarray:
    """Which ``candidates`` (-D rows of the group of ``partial-update.remove-record-on-sequence-group``)
    restart the record: those whose group sequence is at least the record's when they come.
    The record's sequence is the maximum of the rows since the last restart, starting from that
    row's ``restart`` code (its NOT NULL sequence fields), so a restart lets older rows win
    again, and whether a row restarts depends on the restarts before it. Found as the least
    fixed point: each round a whole-column pass from the restarts found so far, which only adds
    restarts (a restart lowers the record's sequence), until none is added; the rounds are as
    many as the longest chain of restarts that each need the one before."""
    resets = np.zeros(f.n, dtype=bool)
    key_starts = np.zeros(f.n, dtype=bool)
    key_starts[f.starts] = True
    while True:
        segments = np.cumsum(key_starts | resets) - 1
        contribution = np.where(resets, restart, code)
        span = int(max(contribution.max(), 0)) + 2
        running = np.maximum.accumulate(contribution + segments * span) - segments * span
        before = np.empty_like(running)
        before[1:] = running[:-1]
        before[f.starts] = -1
        found = candidates & (code >= before)
        if (found == resets).all():
            return resets
        resets = found


def _reject_retractions(aggregates: Sequence[FieldAggregate], retract: np.ndarray, table: str | None = None) -> None:
    """RowKindError when ``retract`` marks rows and some of ``aggregates`` cannot retract."""
    if not retract.any():
        return
    rejecting = [a for a in aggregates if not a.accepts_retract]
    if not rejecting:
        return
    named = ", ".join(f"{a.column!r} ({a.function})" for a in rejecting)
    raise RowKindError(
        f"{int(retract.sum())} -U/-D rows cannot be merged: the aggregate functions of {named} do not "
        f"support retraction; set 'fields.{rejecting[0].column}.ignore-retract'='true' (per column) to ignore "
        "retractions, or 'ignore-delete'='true' to drop -U/-D rows",
        table=table,
    )
