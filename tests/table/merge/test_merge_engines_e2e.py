"""Merge engines end to end, through the public API only: tables created with a merge engine,
written with ``Table.write`` and ``TableWriter`` (rows with an optional ``rowkind`` column),
compacted with ``Table.compact``, read with ``Table.scan``.

The hypothesis tests run random sequences of write batches (repeated keys within a batch, bulk
runs of many keys, sometimes a big first commit fully compacted so that later picks stop at
level 1) and compactions (picked or full) against a plain-Python model that applies the engine
row by row in input order. They check the latest snapshot after every step, and at the end
every snapshot against the state saved for it, a projection and two filters.

The model keeps every row of a key and folds them; a key with a single row shows that row as it
is (Paimon never calls the merge function for it). Paimon's merges are only partly associative:
which rows a write or a compaction merges together can change the result (see
``MergeEngine.merge``). Each case therefore draws only input whose result does not depend on
that, and says so where it restricts anything:

* first-row: -U/-D only with ``ignore-delete`` (without it they are rejected, see below);
* ``sequence.field``: no deletes (a delete that wins is dropped at the top level, and an
  older event arriving after that compaction is no longer beaten by it);
* partial-update: adds only (a retraction needs ``remove-record-on-delete`` or sequence groups);
  with ``remove-record-on-delete`` a -D restarts the record empty (but for its NOT NULL
  columns, the key here), yet a -D merged with the adds after it (one write) becomes an add
  that no longer removes what came before, so the first add after a delete writes every
  column; and no -U (two -U rows merged alone become a -D that then removes the record);
* sequence groups: adds only (a retraction first in a merge initialises the record), and no
  ``last_non_null_value`` in a group: an older row fills a null of a newer one, so the rows
  (g=1, 7), (g=2, null), (g=0, 9) merge to 7 at once but to 9 when the last two were merged
  first (by a write or a compaction), in Paimon as in changelake;
* aggregation with retractions: sum, last_value and ``ignore-retract`` columns only (product's
  integer division and last_non_null_value's retraction are not associative), and a
  retraction only for a key that already has a row (a lone retraction is dropped by a full
  compaction, while the model would keep subtracting it).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changelake as cl
from changelake.errors import DatabaseNotFoundError, OptionError, RowKindError, TableNotFoundError
from changelake.table.read.live_files import live_entries

Row = dict[str, Any]  # "k", "kind" and one value per column
Values = tuple[Any, ...]

ADDS = ("+I", "+U")
RETRACTS = ("-U", "-D")
ALL_KINDS = ("+I", "+U", "-U", "-D")
BASE_OPTIONS = {"bucket": "2", "target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}
INT = pa.int64()
STR = pa.string()
BOOL = pa.bool_()

small = st.one_of(st.none(), st.integers(-3, 3))
words = st.sampled_from([None, "a", "b", "c"])


# ---------------------------------------------------------------------------------------------
# cases: a table's engine options, its columns and a plain-Python fold of a key's rows


@dataclass(frozen=True)
class Case:
    options: dict[str, str]
    columns: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]]
    kinds: tuple[str, ...]
    # The values of a key from its rows in input order (two or more); None: no row shows.
    fold: Callable[[list[Row], Sequence[str]], Values | None]
    # Adjusts a drawn row given the model (what the case's input must look like, see above).
    prepare: Callable[[Row, Model], Row] | None = None
    ignore_delete: bool = False

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field("k", INT, nullable=False), *(pa.field(n, t) for n, (t, _) in self.columns.items())])


@dataclass
class Model:
    """Every row of every key, in input order; what the table must show is their fold."""

    case: Case
    rows: dict[int, list[Row]] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        if self.case.ignore_delete and row["kind"] in RETRACTS:
            return  # dropped before it is written
        self.rows.setdefault(row["k"], []).append(row)

    def value(self, k: int) -> Values | None:
        rows = self.rows.get(k)
        if not rows:
            return None
        if len(rows) == 1:  # never merged: the row as it is
            row = rows[0]
            return tuple(row[n] for n in self.case.names) if row["kind"] in ADDS else None
        return self.case.fold(rows, self.case.names)

    def view(self) -> dict[int, Values]:
        out = {}
        for k in self.rows:
            value = self.value(k)
            if value is not None:
                out[k] = value
        return out


def values_of(row: Row, names: Sequence[str]) -> Values:
    return tuple(row[n] for n in names)


# -- deduplicate ------------------------------------------------------------------------------


def fold_last(rows: list[Row], names: Sequence[str]) -> Values | None:
    last = rows[-1]
    return values_of(last, names) if last["kind"] in ADDS else None


def sequence_rank(value: Any, descending: bool) -> tuple[Any, ...]:
    """Paimon orders sequence fields nulls first, then by value (ascending or descending)."""
    if value is None:
        return (0,)
    return (1, -value if descending else value)


def fold_by_sequence_field(descending: bool) -> Callable[[list[Row], Sequence[str]], Values | None]:
    def fold(rows: list[Row], names: Sequence[str]) -> Values | None:
        # The last row in (ts, input order) wins; rows are adds only.
        _, _, winner = max((sequence_rank(r["ts"], descending), i, r) for i, r in enumerate(rows))
        return values_of(winner, names)

    return fold


# -- first-row --------------------------------------------------------------------------------


def fold_first(rows: list[Row], names: Sequence[str]) -> Values | None:
    return values_of(rows[0], names)  # retractions never reach the model (ignore-delete) or the input


# -- partial-update ---------------------------------------------------------------------------


def fold_partial_update(rows: list[Row], names: Sequence[str]) -> Values | None:
    """Non-null values overwrite; -D (remove-record-on-delete) restarts the record empty (its
    columns are nullable) and removes it until the next add."""
    state: Row = dict.fromkeys(names)
    deleted, met_add = False, False
    for r in rows:
        if r["kind"] == "-D":
            state, deleted = dict.fromkeys(names), True
            continue
        assert r["kind"] in ADDS, r
        for n in names:
            if r[n] is not None:
                state[n] = r[n]
        deleted, met_add = False, True
    return None if deleted or not met_add else values_of(state, names)


FILL = {"a": 0, "b": "z", "c": False}


def full_after_delete(row: Row, model: Model) -> Row:
    """The first add after a delete writes every column (see the module docstring)."""
    if row["kind"] in ADDS and model.rows.get(row["k"]) and model.value(row["k"]) is None:
        return {n: FILL[n] if v is None and n in FILL else v for n, v in row.items()}
    return row


# -- sequence groups --------------------------------------------------------------------------

GROUPS = ((("g1",), ("a", "b")), (("g2", "g3"), ("c", "d")))


def group_rank(values: Row, sequence_fields: Sequence[str]) -> tuple[Any, ...]:
    return tuple(sequence_rank(values[s], False) for s in sequence_fields)


def agg(function: str | None, acc: Any, x: Any) -> Any:
    """Paimon's FieldAggregator.agg for an add (None: no function, the value replaces)."""
    if function is None or function == "last_value":
        return x
    if function == "last_non_null_value":
        return acc if x is None else x
    if function == "listagg":
        if x is None or not x.strip():
            return acc
        return x if acc is None or not acc.strip() else f"{acc},{x}"
    if acc is None or x is None:
        return x if acc is None else acc
    ops: dict[str, Callable[[], Any]] = {
        "sum": lambda: acc + x,
        "product": lambda: acc * x,
        "max": lambda: max(acc, x),
        "min": lambda: min(acc, x),
        "bool_and": lambda: acc and x,
        "bool_or": lambda: acc or x,
    }
    return ops[function]()


def fold_sequence_groups(functions: dict[str, str]) -> Callable[[list[Row], Sequence[str]], Values | None]:
    grouped = {c for seqs, fields in GROUPS for c in (*seqs, *fields)}

    def fold(rows: list[Row], names: Sequence[str]) -> Values | None:
        state: Row = dict.fromkeys(names)
        for r in rows:
            assert r["kind"] in ADDS
            for sequence_fields, fields in GROUPS:
                if all(r[s] is None for s in sequence_fields):
                    continue  # a row without the group's sequence does not touch the group
                if group_rank(r, sequence_fields) >= group_rank(state, sequence_fields):
                    for s in sequence_fields:
                        state[s] = r[s]
                    for f in fields:
                        state[f] = agg(functions.get(f), state[f], r[f])
                else:  # an older row: only aggregated fields take it in (reversed)
                    for f in fields:
                        if f in functions:
                            state[f] = agg(functions[f], r[f], state[f])
            for n in names:
                if n not in grouped and r[n] is not None:
                    state[n] = r[n]
        return values_of(state, names)

    return fold


# -- aggregation ------------------------------------------------------------------------------


def retract(function: str, acc: Any, x: Any) -> Any:
    if function == "sum":
        if x is None:
            return acc
        return -x if acc is None else acc - x
    if function == "last_value":
        return None
    raise AssertionError(f"{function} does not retract here")


def fold_aggregation(
    functions: dict[str, str], ignore_retract: frozenset[str] = frozenset()
) -> Callable[[list[Row], Sequence[str]], Values | None]:
    def fold(rows: list[Row], names: Sequence[str]) -> Values | None:
        state: Row = dict.fromkeys(names)
        initialised = dict.fromkeys(names, False)  # first_value / first_non_null_value
        for r in rows:
            for n in names:
                function, x = functions[n], r[n]
                if r["kind"] in RETRACTS:
                    if n not in ignore_retract:
                        state[n] = retract(function, state[n], x)
                elif function == "first_value":
                    if not initialised[n]:
                        state[n], initialised[n] = x, True
                elif function == "first_non_null_value":
                    if not initialised[n] and x is not None:
                        state[n], initialised[n] = x, True
                else:
                    state[n] = agg(function, state[n], x)
        return values_of(state, names)

    return fold


def retract_existing_only(row: Row, model: Model) -> Row:
    """A retraction of a key without rows becomes an insert (see the module docstring)."""
    if row["kind"] in RETRACTS and not model.rows.get(row["k"]):
        return {**row, "kind": "+I"}
    return row


AGG_FUNCTIONS = {
    "s": "sum", "p": "product", "mx": "max", "mn": "min", "lv": "last_value", "ln": "last_non_null_value",
    "fv": "first_value", "fn": "first_non_null_value", "la": "listagg", "ba": "bool_and", "bo": "bool_or",
}  # fmt: skip
AGG_COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "s": (INT, small),
    "p": (INT, st.sampled_from([None, -1, 1, 2])),
    "mx": (INT, small),
    "mn": (STR, st.sampled_from([None, "", "b", "ab", "é"])),
    "lv": (INT, small),
    "ln": (INT, small),
    "fv": (INT, small),
    "fn": (INT, small),
    "la": (STR, st.sampled_from([None, "", " ", "a", "b,c"])),
    "ba": (BOOL, st.one_of(st.none(), st.booleans())),
    "bo": (BOOL, st.one_of(st.none(), st.booleans())),
}
RETRACT_FUNCTIONS = {"s": "sum", "lv": "last_value", "mx": "max", "fn": "first_non_null_value", "bo": "bool_or"}
RETRACT_IGNORED = frozenset({"mx", "fn", "bo"})

PU_COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "a": (INT, small),
    "b": (STR, words),
    "c": (BOOL, st.one_of(st.none(), st.booleans())),
}
seq_values = st.one_of(st.none(), st.integers(0, 3))
GROUP_COLUMNS: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "a": (INT, small),
    "b": (INT, small),
    "g1": (INT, seq_values),
    "c": (INT, small),
    "d": (INT, small),
    "g2": (INT, seq_values),
    "g3": (INT, seq_values),
    "e": (STR, words),
}
GROUP_OPTIONS = {
    "merge-engine": "partial-update",
    "fields.g1.sequence-group": "a,b",
    "fields.g2,g3.sequence-group": "c,d",
}


def dedup_sequence_case(descending: bool) -> Case:
    order = {"sequence.field.sort-order": "descending"} if descending else {}
    return Case(
        {"sequence.field": "ts", **order},
        {"v": (INT, small), "ts": (INT, st.one_of(st.none(), st.integers(0, 3)))},
        ADDS,
        fold_by_sequence_field(descending),
    )


def group_case(functions: dict[str, str]) -> Case:
    options = GROUP_OPTIONS | {f"fields.{c}.aggregate-function": f for c, f in functions.items()}
    return Case(options, GROUP_COLUMNS, ADDS, fold_sequence_groups(functions))


CASES: dict[str, Case] = {
    "deduplicate": Case({}, {"v": (INT, small), "s": (STR, words)}, ALL_KINDS, fold_last),
    "deduplicate-sequence-field": dedup_sequence_case(descending=False),
    "deduplicate-sequence-field-descending": dedup_sequence_case(descending=True),
    "first-row": Case({"merge-engine": "first-row"}, {"v": (INT, small), "s": (STR, words)}, ADDS, fold_first),
    "first-row-ignore-delete": Case(
        {"merge-engine": "first-row", "ignore-delete": "true"},
        {"v": (INT, small), "s": (STR, words)},
        ALL_KINDS,
        fold_first,
        ignore_delete=True,
    ),
    "partial-update": Case({"merge-engine": "partial-update"}, PU_COLUMNS, ADDS, fold_partial_update),
    "partial-update-remove-record-on-delete": Case(
        {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
        PU_COLUMNS,
        ("+I", "+U", "-D"),
        fold_partial_update,
        prepare=full_after_delete,
    ),
    "partial-update-sequence-groups": group_case({}),
    "partial-update-sequence-groups-sum": group_case({"d": "sum"}),
    "partial-update-sequence-groups-max-min": group_case({"b": "max", "c": "min", "d": "sum"}),
    "aggregation": Case(
        {"merge-engine": "aggregation"} | {f"fields.{c}.aggregate-function": f for c, f in AGG_FUNCTIONS.items()},
        AGG_COLUMNS,
        ADDS,
        fold_aggregation(AGG_FUNCTIONS),
    ),
    "aggregation-retractions": Case(
        {"merge-engine": "aggregation"}
        | {f"fields.{c}.aggregate-function": f for c, f in RETRACT_FUNCTIONS.items()}
        | {f"fields.{c}.ignore-retract": "true" for c in RETRACT_IGNORED},
        {c: AGG_COLUMNS[c] for c in RETRACT_FUNCTIONS},
        ALL_KINDS,
        fold_aggregation(RETRACT_FUNCTIONS, RETRACT_IGNORED),
        prepare=retract_existing_only,
    ),
}


# ---------------------------------------------------------------------------------------------
# plans: write and compact steps


@dataclass(frozen=True)
class Write:
    singles: list[Row]
    # Bulk runs (first key, count, values): many keys with the same values, written after the
    # singles, so that files get big (and levels differ in size).
    bulk: list[tuple[int, int, Row]]
    how: str  # "table": Table.write; "writer": two TableWriter.write calls and one commit
    split: int  # where the writer splits the rows between its two write calls
    with_kinds: bool  # send the rowkind column even when every row is +I

    def rows(self) -> list[Row]:
        return self.singles + [{**values, "k": first + i} for first, count, values in self.bulk for i in range(count)]


@dataclass(frozen=True)
class Compact:
    full: bool


Step = Write | Compact


@st.composite
def row_of(draw: Any, case: Case, keys: st.SearchStrategy[int]) -> Row:
    row = {"k": draw(keys), "kind": draw(st.sampled_from(case.kinds))}
    row.update({name: draw(strategy) for name, (_, strategy) in case.columns.items()})
    return row


@st.composite
def write_steps(draw: Any, case: Case) -> Write:
    singles = draw(st.lists(row_of(case, st.integers(0, 5)), max_size=7))
    bulk = draw(
        st.lists(st.tuples(st.integers(0, 40), st.sampled_from([3, 40, 200]), row_of(case, st.just(0))), max_size=2)
    )
    how = draw(st.sampled_from(["table", "writer"]))
    size = len(singles) + sum(count for _, count, _ in bulk)
    return Write(singles, bulk, how, draw(st.integers(0, size)), draw(st.booleans()))


@st.composite
def plans(draw: Any, case: Case) -> list[Step]:
    steps: list[Step] = []
    if draw(st.booleans()):
        # A big top level first: later compactions of a few small runs then stop below it (at
        # level 1), so that newer rows are merged without the older ones.
        steps += [Write([], [(0, 2000, draw(row_of(case, st.just(0))))], "table", 0, False), Compact(True)]
    compacts = st.builds(Compact, st.booleans())
    steps += draw(st.lists(st.one_of(write_steps(case), write_steps(case), compacts), min_size=1, max_size=7))
    return steps


# ---------------------------------------------------------------------------------------------
# running a plan


def to_arrow(case: Case, rows: list[Row], with_kinds: bool) -> pa.Table:
    schema = case.schema()
    data = pa.Table.from_pylist([{n: r[n] for n in schema.names} for r in rows], schema=schema)
    if with_kinds or any(r["kind"] != "+I" for r in rows):
        data = data.append_column("rowkind", pa.array([r["kind"] for r in rows], STR))
    return data


def as_view(case: Case, table: pa.Table) -> dict[int, Values]:
    assert table.schema == case.schema()
    out: dict[int, Values] = {}
    for r in table.to_pylist():
        assert r["k"] not in out, f"key {r['k']} read twice"
        out[r["k"]] = values_of(r, case.names)
    return out


def has_level0(table: cl.Table, snapshot_id: int) -> bool:
    return any(e.file.level == 0 for e in live_entries(table.context, table.snapshot(snapshot_id)))


def new_snapshot_ids(table: cl.Table, before: int) -> list[int]:
    latest = table.latest_snapshot()
    return list(range(before + 1, (latest.id if latest else 0) + 1))


def run(case: Case, plan: list[Step], projection: list[str]) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        table = cl.Catalog(warehouse).create_table(
            "db.t", schema=case.schema(), primary_keys=["k"], options=BASE_OPTIONS | case.options
        )
        model = Model(case)
        history: dict[int, dict[int, Values]] = {}  # snapshot id -> what it must show
        user = str(uuid.uuid4())
        for step_number, step in enumerate(plan, start=1):
            before = len(history)
            previous = model.view()
            if isinstance(step, Write):
                rows = []
                for drawn in step.rows():
                    row = case.prepare(drawn, model) if case.prepare else drawn
                    model.add(row)
                    rows.append(row)
                data = to_arrow(case, rows, step.with_kinds)
                if step.how == "table":
                    table.write(data)
                else:
                    with table.writer(user) as writer:
                        writer.write(data.slice(0, step.split))
                        writer.write(data.slice(step.split))
                        writer.commit(step_number)
            else:
                snap = table.compact(full=step.full)
                assert snap is None or snap.commit_kind == "COMPACT"
            landed = new_snapshot_ids(table, before)
            if isinstance(step, Write):
                written = [r for r in rows if not (case.ignore_delete and r["kind"] in RETRACTS)]
                assert bool(landed) == bool(written), "a write with rows lands a snapshot"
            else:
                assert len(landed) <= 1
            want = model.view()
            for snapshot_id in landed:
                # a batch scan skips level 0 of first-row tables (Paimon's batchScanSkipLevel0):
                # an APPEND snapshot whose rows are still there shows the one before
                hidden = case.options.get("merge-engine") == "first-row" and has_level0(table, snapshot_id)
                history[snapshot_id] = previous if hidden else want
            assert as_view(case, table.scan().to_arrow()) == want, f"step {step_number}: {step}"

        for snapshot_id, want in history.items():
            assert as_view(case, table.scan(snapshot_id=snapshot_id).to_arrow()) == want, f"snapshot {snapshot_id}"
        projected = table.scan(columns=projection).to_arrow()
        assert projected.to_pylist() == table.scan().to_arrow().select(projection).to_pylist(), projection
        # Filters apply to merged rows: one on the key (prunes files), one on a merged value.
        final = model.view()
        by_key = table.scan(filter=pc.field("k") <= 3).to_arrow()
        assert as_view(case, by_key) == {k: v for k, v in final.items() if k <= 3}
        by_value = table.scan(filter=pc.field(case.names[0]).is_valid()).to_arrow()
        assert as_view(case, by_value) == {k: v for k, v in final.items() if v[0] is not None}


ENGINE_SETTINGS = settings(
    max_examples=int(os.environ.get("CHANGELAKE_E2E_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", list(CASES))
@ENGINE_SETTINGS
@given(data=st.data())
def test_engine_matches_model(name: str, data: st.DataObject) -> None:
    case = CASES[name]
    plan = data.draw(plans(case), label="plan")
    projection = data.draw(st.lists(st.sampled_from(["k", *case.names]), min_size=1, unique=True), label="columns")
    run(case, plan, projection)


# ---------------------------------------------------------------------------------------------
# documented edge cases


def create(warehouse: Any, schema: pa.Schema, options: dict[str, str], name: str = "db.t") -> cl.Table:
    return cl.Catalog(str(warehouse)).create_table(
        name, schema=schema, primary_keys=["k"], options=BASE_OPTIONS | options
    )


def schema_of(**columns: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("k", INT, nullable=False), *(pa.field(n, t) for n, t in columns.items())])


def write(table: cl.Table, rows: list[Row]) -> cl.Snapshot | None:
    data = pa.Table.from_pylist([{n: r.get(n) for n in table.schema.names} for r in rows], schema=table.schema)
    if any("kind" in r for r in rows):
        data = data.append_column("rowkind", pa.array([r.get("kind", "+I") for r in rows], STR))
    return table.write(data)


def read(table: cl.Table, snapshot_id: int | None = None, columns: list[str] | None = None) -> list[Row]:
    return table.scan(snapshot_id=snapshot_id, columns=columns).to_arrow().to_pylist()


def data_files(root: Any) -> set[str]:
    return {p.name for p in root.rglob("data-*")}


def latest_id(table: cl.Table) -> int:
    latest = table.latest_snapshot()
    return latest.id if latest else 0


def test_partial_update_nulls_never_overwrite(tmp_path: Any) -> None:
    table = create(tmp_path, schema_of(a=INT, b=STR, c=INT), {"merge-engine": "partial-update"})
    write(table, [{"k": 1, "a": 1, "b": "x"}, {"k": 2, "c": 20}])
    write(table, [{"k": 1, "c": 3}, {"k": 1, "a": None, "b": None, "c": None}])  # all-null row: no change
    want = [{"k": 1, "a": 1, "b": "x", "c": 3}, {"k": 2, "a": None, "b": None, "c": 20}]
    assert read(table) == want
    table.compact(full=True)
    assert read(table) == want
    write(table, [{"k": 1, "b": "y"}, {"k": 2, "a": 5, "c": None}])
    assert read(table) == [{"k": 1, "a": 1, "b": "y", "c": 3}, {"k": 2, "a": 5, "b": None, "c": 20}]
    table.compact()
    assert read(table) == [{"k": 1, "a": 1, "b": "y", "c": 3}, {"k": 2, "a": 5, "b": None, "c": 20}]
    assert read(table, snapshot_id=1) == [
        {"k": 1, "a": 1, "b": "x", "c": None},
        {"k": 2, "a": None, "b": None, "c": 20},
    ]


@pytest.mark.parametrize(("engine", "key", "kept"), [
    ("deduplicate", "deduplicate.ignore-delete", 3), ("first-row", "first-row.ignore-delete", 2),
    ("partial-update", "partial-update.ignore-delete", 3)])
def test_ignore_delete_under_its_older_per_engine_keys(tmp_path: Any, engine: str, key: str, kept: int) -> None:
    """Paimon still reads ``ignore-delete`` under its older per-engine keys (``withFallbackKeys``),
    which tables Paimon created may carry: their -U/-D rows are dropped, not applied or refused."""
    table = create(tmp_path, schema_of(a=INT), {"merge-engine": engine, key: "true"})
    write(table, [{"k": 1, "a": 1}, {"k": 2, "a": 2}])
    write(table, [{"k": 1, "a": 1, "kind": "-D"}, {"k": 2, "a": 2, "kind": "-U"}, {"k": 2, "a": 3, "kind": "+U"}])
    assert read(table) == [{"k": 1, "a": 1}, {"k": 2, "a": kept}]
    assert cl.open_table(str(tmp_path / "db.db" / "t")).context.options.ignore_delete


GROUP_SCHEMA = schema_of(a=INT, b=INT, g1=INT, c=INT, d=INT, g2=INT, e=STR)
TWO_GROUPS = {"merge-engine": "partial-update", "fields.g1.sequence-group": "a,b", "fields.g2.sequence-group": "c,d"}


def test_sequence_group_ignores_an_older_update_for_its_group_only(tmp_path: Any) -> None:
    table = create(tmp_path, GROUP_SCHEMA, TWO_GROUPS)
    write(table, [{"k": 1, "a": 1, "b": 1, "g1": 5, "c": 1, "d": 1, "g2": 1, "e": "first"}])
    table.compact(full=True)  # the first version sits in the top level; the rest merges on read
    # g1 = 3 is older than 5: a and b stay; g2 = 2 is newer: c and d (null too) are replaced.
    write(table, [{"k": 1, "a": 9, "b": 9, "g1": 3, "c": 7, "d": None, "g2": 2, "e": None}])
    want = {"k": 1, "a": 1, "b": 1, "g1": 5, "c": 7, "d": None, "g2": 2, "e": "first"}
    assert read(table) == [want]
    table.compact(full=True)
    assert read(table) == [want]
    # Rows without a group's sequence leave the group alone; an equal sequence replaces it.
    write(table, [{"k": 1, "a": 4, "b": None, "g1": 5, "c": 8, "d": 8, "g2": None, "e": "last"}])
    assert read(table) == [{"k": 1, "a": 4, "b": None, "g1": 5, "c": 7, "d": None, "g2": 2, "e": "last"}]
    # Within one batch too: the newer row of each group wins, whatever the input order.
    write(table, [
        {"k": 2, "a": 2, "b": 2, "g1": 9, "c": 2, "d": 2, "g2": 1},
        {"k": 2, "a": 3, "b": 3, "g1": 1, "c": 3, "d": 3, "g2": 9},
    ])  # fmt: skip
    assert read(table)[1] == {"k": 2, "a": 2, "b": 2, "g1": 9, "c": 3, "d": 3, "g2": 9, "e": None}


def test_projection_of_a_sequence_group_table_matches_the_full_read(tmp_path: Any) -> None:
    table = create(tmp_path, GROUP_SCHEMA, TWO_GROUPS | {"fields.d.aggregate-function": "sum"})
    write(table, [{"k": k, "a": k, "b": k, "g1": 2, "c": k, "d": 1, "g2": 2, "e": "x"} for k in range(6)])
    write(table, [{"k": k, "a": -k, "b": None, "g1": 1 + k % 3, "c": -k, "d": 10, "g2": 3 - k % 3} for k in range(6)])
    write(table, [{"k": k, "a": 100, "g1": None, "c": 100, "d": 100, "g2": None, "e": "y"} for k in range(0, 6, 2)])
    full = read(table)
    assert [r["d"] for r in full] == [11] * 6  # sum takes rows of any sequence, not those without one
    for columns in (["a"], ["c", "k"], ["d"], ["b", "e"], ["e"], ["g2", "a"], ["k"], ["d", "c", "b", "a"]):
        assert read(table, columns=columns) == [{c: r[c] for c in columns} for r in full], columns
    table.compact(full=True)
    assert read(table) == full
    assert read(table, columns=["c", "a"]) == [{"c": r["c"], "a": r["a"]} for r in full]


def test_aggregation_sum_retracts_update_before_rows(tmp_path: Any) -> None:
    table = create(
        tmp_path,
        schema_of(total=INT, last=INT, biggest=INT),
        {
            "merge-engine": "aggregation",
            "fields.total.aggregate-function": "sum",
            "fields.last.aggregate-function": "last_value",
            "fields.biggest.aggregate-function": "max",
            "fields.biggest.ignore-retract": "true",
        },
    )
    write(table, [{"k": 1, "total": 10, "last": 10, "biggest": 10}, {"k": 2, "total": 5, "last": 5, "biggest": 5}])
    # A CDC update of k=1 from 10 to 15: -U retracts 10, +U adds 15.
    write(table, [
        {"k": 1, "total": 10, "last": 10, "biggest": 10, "kind": "-U"},
        {"k": 1, "total": 15, "last": 15, "biggest": 15, "kind": "+U"},
    ])  # fmt: skip
    assert read(table) == [
        {"k": 1, "total": 15, "last": 15, "biggest": 15},
        {"k": 2, "total": 5, "last": 5, "biggest": 5},
    ]
    table.compact(full=True)
    write(
        table,
        [
            {"k": 1, "total": 15, "last": 15, "biggest": 15, "kind": "-U"},
            {"k": 1, "total": 3, "last": 3, "biggest": 3, "kind": "+U"},
            {"k": 2, "total": 2, "last": 2, "biggest": 2},
        ],
    )
    assert read(table) == [
        {"k": 1, "total": 3, "last": 3, "biggest": 15},
        {"k": 2, "total": 7, "last": 2, "biggest": 5},
    ]
    # A lone -U retracts too (the record stays, with what is left); last_value becomes null.
    write(table, [{"k": 2, "total": 7, "last": 2, "biggest": 9, "kind": "-U"}])
    want = [{"k": 1, "total": 3, "last": 3, "biggest": 15}, {"k": 2, "total": 0, "last": None, "biggest": 5}]
    assert read(table) == want
    table.compact()
    assert read(table) == want
    table.compact(full=True)
    assert read(table) == want
    assert read(table, snapshot_id=1) == [
        {"k": 1, "total": 10, "last": 10, "biggest": 10},
        {"k": 2, "total": 5, "last": 5, "biggest": 5},
    ]


def test_first_row_keeps_the_first_version_through_compactions(tmp_path: Any) -> None:
    table = create(tmp_path, schema_of(v=INT), {"merge-engine": "first-row", "ignore-delete": "true"})
    write(table, [{"k": 1, "v": 1}, {"k": 1, "v": 2}])  # the first of the batch
    write(table, [{"k": 1, "v": 3}, {"k": 2, "v": 20}])
    assert read(table) == [{"k": 1, "v": 1}, {"k": 2, "v": 20}]
    table.compact(full=True)
    write(table, [{"k": 1, "v": 4}, {"k": 2, "v": 21, "kind": "-D"}, {"k": 2, "v": 22, "kind": "+U"}])
    assert read(table) == [{"k": 1, "v": 1}, {"k": 2, "v": 20}]
    table.compact()
    table.compact(full=True)
    assert read(table) == [{"k": 1, "v": 1}, {"k": 2, "v": 20}]
    assert write(table, [{"k": 2, "kind": "-D"}, {"k": 3, "v": 30, "kind": "-U"}]) is None  # ignored: no commit
    assert read(table) == [{"k": 1, "v": 1}, {"k": 2, "v": 20}]


def test_first_row_reads_each_key_once_when_compaction_stops_below_the_top_level(tmp_path: Any) -> None:
    """Two small runs over a big top level compact into level 1, while the top level still
    holds the first version of the same keys: both levels hold the key, and the read must
    merge them (or compaction must drop the later versions, as Paimon's lookup compaction
    of first-row tables does)."""
    table = create(tmp_path, schema_of(v=INT), {"merge-engine": "first-row", "bucket": "1"})
    write(table, [{"k": k, "v": 0} for k in range(2000)])
    table.compact(full=True)
    write(table, [{"k": 0, "v": 1}, {"k": 1, "v": 1}])
    write(table, [{"k": 0, "v": 2}, {"k": 1, "v": 2}])  # compacts the two small runs (level 1)
    table.compact()
    rows = read(table)
    assert len(rows) == 2000, f"{len(rows) - 2000} keys read twice"
    assert rows[:2] == [{"k": 0, "v": 0}, {"k": 1, "v": 0}]


REMOVING = {
    "partial-update": {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
    "aggregation": {"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                    "aggregation.remove-record-on-delete": "true"},
}
# A deleted record, then an add; for partial-update also a record whose merge starts with a -U.
REMOVED = [{"k": 1, "a": 5, "b": "old"}, {"k": 1, "a": 5, "b": "old", "kind": "-D"}, {"k": 1, "a": 3, "b": None}]
RETRACTED_FIRST = [{"k": 2, "a": 7, "b": "x", "kind": "-U"}, {"k": 2, "a": 3, "b": None}]


def _removing_table(tmp_path: Any, engine: str, options: dict[str, str], *, top_level: bool) -> cl.Table:
    """A table of ``engine``; with ``top_level``, other keys fill the top level first, so that
    the compactions of the rows written next end below it, where deletes and retractions stay."""
    # Five runs before a compaction: six levels, so that a commit's compaction stays below the top.
    table = create(tmp_path, schema_of(a=INT, b=STR), REMOVING[engine] | options | {
        "bucket": "1", "num-sorted-run.compaction-trigger": "5"})
    if top_level:
        write(table, [{"k": k, "a": 1, "b": "other"} for k in range(100, 300)])
        table.compact(full=True)
    return table


def _removed_rows(engine: str) -> list[Row]:
    return (RETRACTED_FIRST if engine == "partial-update" else []) + REMOVED


@pytest.mark.parametrize("engine", sorted(REMOVING))
@pytest.mark.parametrize(("layout", "vectors"), [
    ("one-batch", False), ("one-batch", True), ("level-0", False),  # readers with vectors skip level 0
    ("below-the-top", False), ("below-the-top", True),
], ids=lambda v: v if isinstance(v, str) else "deletion-vectors" if v else "merge-on-read")  # fmt: skip
def test_a_removed_record_does_not_bring_back_its_values(tmp_path: Any, engine: str, vectors: bool,
                                                          layout: str) -> None:
    """``*.remove-record-on-delete``: after +I(a=5, b='old'), -D, +I(a=3, b=null) the record is
    (3, null), as Paimon's initRow restarts a record's nullable columns as null (1.1 to 1.3),
    whichever merge meets the rows: the write buffer's (one batch), a read's (commits left at
    level 0), the compactions' and deletion-vector lookups' (commits compacted below a full top
    level, then a full compaction). The same for a partial-update merge that starts with a -U."""
    options = ({"deletion-vectors.enabled": "true"} if vectors else {}) | (
        {"write-only": "true"} if layout == "level-0" else {})
    table = _removing_table(tmp_path, engine, options, top_level=layout == "below-the-top")
    rows = _removed_rows(engine)
    if layout == "one-batch":
        write(table, rows)
    else:
        for row in rows:
            write(table, [row])
    expected = [{"k": 1, "a": 3, "b": None}] + ([{"k": 2, "a": 3, "b": None}] if engine == "partial-update" else [])
    assert sorted((r for r in read(table) if r["k"] < 100), key=lambda r: r["k"]) == expected
    table.compact(full=True)
    assert sorted((r for r in read(table) if r["k"] < 100), key=lambda r: r["k"]) == expected


@pytest.mark.parametrize("engine", sorted(REMOVING))
@pytest.mark.parametrize("vectors", [False, True], ids=["merge-on-read", "deletion-vectors"])
def test_the_lookup_changelog_of_a_removed_record(tmp_path: Any, engine: str, vectors: bool) -> None:
    """The ``lookup`` producer's changelog (each key's merged row before and after a commit)
    shows a record added again after its delete, or after a -U of nothing, without the values
    of the rows before."""
    options = {"changelog-producer": "lookup"} | ({"deletion-vectors.enabled": "true"} if vectors else {})
    table = _removing_table(tmp_path, engine, options, top_level=True)
    start = latest_id(table)
    for row in _removed_rows(engine):
        write(table, [row])
    changes = [(r["rowkind"], r["k"], r["a"], r["b"]) for r in table.changes(start, latest_id(table)).to_arrow()
               .to_pylist()]
    expected = [("+I", 1, 5, "old"), ("-D", 1, 5, "old"), ("+I", 1, 3, None)]
    assert changes == ([("+I", 2, 3, None)] if engine == "partial-update" else []) + expected


def test_sequence_field_lets_an_older_event_arriving_later_lose(tmp_path: Any) -> None:
    table = create(tmp_path, schema_of(v=STR, ts=INT), {"sequence.field": "ts"})
    write(table, [{"k": 1, "v": "ten", "ts": 10}, {"k": 2, "v": "two", "ts": 2}])
    write(table, [{"k": 1, "v": "five", "ts": 5}])  # older event, newer commit: loses
    assert read(table) == [{"k": 1, "v": "ten", "ts": 10}, {"k": 2, "v": "two", "ts": 2}]
    table.compact(full=True)
    write(table, [{"k": 1, "v": "seven", "ts": 7}, {"k": 2, "v": "three", "ts": 3}, {"k": 2, "v": "one", "ts": 1}])
    assert read(table) == [{"k": 1, "v": "ten", "ts": 10}, {"k": 2, "v": "three", "ts": 3}]
    write(table, [{"k": 1, "v": "null ts", "ts": None}, {"k": 1, "v": "eleven", "ts": 11}])
    table.compact()
    assert read(table) == [{"k": 1, "v": "eleven", "ts": 11}, {"k": 2, "v": "three", "ts": 3}]
    # An equal ts: the later row wins.
    write(table, [{"k": 2, "v": "three again", "ts": 3}])
    assert read(table)[1] == {"k": 2, "v": "three again", "ts": 3}


@pytest.mark.parametrize(("order", "winner"), [("ascending", "nan"), ("descending", "half")])
@pytest.mark.parametrize("commits", ["one", "each-row"])
def test_a_nan_sequence_field_orders_above_every_number(tmp_path: Any, order: str, winner: str, commits: str) -> None:
    """Paimon compares DOUBLE sequence fields with ``java.lang.Double.compare``
    (GenerateUtils.generateCompare): NaN above every number and nulls first; descending turns
    the numbers around, not the nulls. Merged in one write, or on read and by compaction."""
    table = create(tmp_path, schema_of(v=STR, s=pa.float64()),
                   {"sequence.field": "s", "sequence.field.sort-order": order})
    rows = [{"k": 1, "v": "one", "s": 1.0}, {"k": 1, "v": "nan", "s": float("nan")},
            {"k": 1, "v": "null", "s": None}, {"k": 1, "v": "half", "s": 0.5}]
    for batch in [rows] if commits == "one" else [[row] for row in rows]:
        write(table, batch)
    assert [r["v"] for r in read(table)] == [winner]
    table.compact(full=True)
    assert [r["v"] for r in read(table)] == [winner]


@pytest.mark.parametrize(
    ("options", "columns", "rows", "message"),
    [
        pytest.param(
            {"merge-engine": "partial-update"},
            {"v": INT},
            [{"k": 1, "v": 1, "kind": "+I"}, {"k": 1, "kind": "-D"}],
            r"partial-update.*remove-record-on-delete",
            id="partial-update-delete",
        ),
        pytest.param(
            {"merge-engine": "first-row"},
            {"v": INT},
            [{"k": 5, "v": 1, "kind": "-D"}],
            r"first-row.*ignore-delete",
            id="first-row-delete",
        ),
        pytest.param(
            {"merge-engine": "aggregation", "fields.v.aggregate-function": "max", "fields.n.aggregate-function": "sum"},
            {"v": INT, "n": INT},
            [{"k": 1, "v": 1, "n": 1, "kind": "-U"}, {"k": 1, "v": 2, "n": 2, "kind": "+U"}],
            r"'v' \(max\).*ignore-retract",
            id="aggregation-max-update-before",
        ),
    ],
)
def test_retractions_an_engine_cannot_merge_are_rejected(
    tmp_path: Any, options: dict[str, str], columns: dict[str, pa.DataType], rows: list[Row], message: str
) -> None:
    table = create(tmp_path, schema_of(**columns), options)
    write(table, [{"k": k, **dict.fromkeys(columns, 1)} for k in range(3)])
    before, before_id = read(table), latest_id(table)  # first-row also compacts level 0 up: two snapshots
    files = data_files(tmp_path)
    with pytest.raises(RowKindError, match=message):
        write(table, rows)
    assert latest_id(table) == before_id and read(table) == before
    assert data_files(tmp_path) == files, "the rejected rows were written to a file"
    # Through a writer: the bad batch fails at write(), later good rows still commit.
    with table.writer("user") as writer:
        data = pa.Table.from_pylist([{n: r.get(n) for n in table.schema.names} for r in rows], schema=table.schema)
        data = data.append_column("rowkind", pa.array([r["kind"] for r in rows], STR))
        with pytest.raises(RowKindError, match=message):
            writer.write(data)
        assert writer.commit(1) == []
        assert latest_id(table) == before_id and read(table) == before
        assert data_files(tmp_path) == files
        writer.write(pa.Table.from_pylist([{"k": 9, **dict.fromkeys(columns, 2)}], schema=table.schema))
        assert [s.commit_kind for s in writer.commit(2)][:1] == ["APPEND"]
    assert read(table) == [*before, {"k": 9, **dict.fromkeys(columns, 2)}]
    assert len(table.snapshots()) >= 2


@pytest.mark.parametrize(
    ("options", "option", "detail"),
    [
        (
            {"merge-engine": "aggregation", "fields.v.aggregate-function": "summ"},
            "fields.v.aggregate-function",
            "unknown aggregate function 'summ'",
        ),
        (
            {"merge-engine": "aggregation", "fields.default-aggregate-function": "avg"},
            "fields.default-aggregate-function",
            "unknown aggregate function 'avg'",
        ),
        (
            {"merge-engine": "partial-update", "fields.g.sequence-group": "v,nope"},
            "fields.g.sequence-group",
            "'nope' is not in the table",
        ),
        (
            {"merge-engine": "partial-update", "fields.missing.sequence-group": "v"},
            "fields.missing.sequence-group",
            "'missing' is not in the table",
        ),
        (
            {"merge-engine": "aggregation", "fields.v.aggregate-function": "listagg"},
            "fields.v.aggregate-function",
            "'listagg' does not apply to column 'v'",
        ),
        ({"merge-engine": "firstrow"}, "merge-engine", "'firstrow' is not one of"),
    ],
)
def test_invalid_engine_options_are_rejected_at_create_table(
    tmp_path: Any, options: dict[str, str], option: str, detail: str
) -> None:
    catalog = cl.Catalog(str(tmp_path))
    with pytest.raises(OptionError) as info:
        catalog.create_table("db.bad", schema=schema_of(v=INT, g=INT), primary_keys=["k"], options=options)
    message = str(info.value)
    assert "db.bad" in message and repr(option) in message and detail in message, message
    with pytest.raises((TableNotFoundError, DatabaseNotFoundError)):
        catalog.get_table("db.bad")
