"""Merge engines, differentially against Apache Paimon 0.9's Java engine (``java_paimon.py``).

One seeded random history (commits of +I/-U/+U/-D rows with nulls, several rows of a key in
one commit, full compactions in between) goes to a table Java Paimon writes and to one
changelake writes, same schema and options; after every step Java's read of its table, and
changelake's reads of both tables agree, and at the end Java reads changelake's table alike.

What Paimon 0.9 has and so what is covered (its ``CoreOptions``, ``PartialUpdateMergeFunction``,
``AggregateMergeFunction``, ``aggregate/Field*Agg``): deduplicate (``sequence.field`` with ties
and nulls, ``ignore-delete``), first-row (``ignore-delete``), partial-update (``sequence.field``,
sequence groups, aggregates in them, ``ignore-delete``, ``partial-update.remove-record-on-delete``),
aggregation (sum, product, max, min, last_value, last_non_null_value, first_value,
first_non_null_value, listagg, bool_and, bool_or; ``ignore-retract``; ``ignore-delete``;
``fields.default-aggregate-function``), ``ignore-delete`` also under its older per-engine keys,
and the ``lookup`` / ``full-compaction`` changelog producers, whose change streams Java and
changelake read alike. Paimon 0.9 has no ``count``, no ``aggregation.remove-record-on-delete``, no
``partial-update.remove-record-on-sequence-group`` and no ``sequence.field.sort-order``.

Where Paimon 0.9 differs from the Paimon changelake follows (1.1 and later), the histories avoid
it (and changelake's own tests pin the newer behaviour):

* ``partial-update.remove-record-on-delete``: 0.9 drops the key from the merge (``getResult``
  returns null, so a compaction above older levels lets the old row come back) and fails on an
  add after a delete in one merge (``row`` is null). Its histories delete keys in commits of
  their own, each followed by a full compaction, and add a deleted key only after that.
* partial-update with sequence groups, when a merge (a commit's rows of a key, or a read) starts
  with a retraction: 0.9 starts from an empty row, leaving the primary key null (its read then
  fails, and its writer writes a null into the NOT NULL column); 1.1 to 1.3 start from the
  retraction's NOT NULL values (``initRow``; 1.4 from all its values). So each key's first row
  in a commit is an add, and only full compactions run (every merge starts at a key's first row).
* ``product``'s retraction from a null accumulator: 0.9 returns the retracted value, 1.1+ null
  (apache/paimon#4842). So the product column is never null in adds, and merges start with adds.

Not followed by changelake yet (Java 0.9 and master alike): a compaction that rewrites level 0
through the lookup merge (``changelog-producer`` lookup, deletion vectors) runs the merge
function on a key with a single row too, where changelake keeps the row as it is. That differs
only for a lone row the merge function changes: partial-update values of a sequence group whose
sequence fields are null (Java clears them), aggregation's lone retraction (Java writes +I of
the retracted values). The lookup cases here send no such row.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl

Row = dict[str, Any]
Change = tuple[str, Row]
ADDS = ("+I", "+U")
ALL_KINDS = ("+I", "+U", "-U", "-D")
ARROW = {"INT": pa.int32(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(), "STRING": pa.string(),
         "BOOLEAN": pa.bool_()}
KEYS = 5


def _ints(rng: random.Random) -> int | None:
    return rng.choice([None, 1, 2, 3, 4])


def _doubles(rng: random.Random) -> float | None:
    # halves: sums and products stay exact, whatever order an engine adds them in
    return rng.choice([None, 0.5, 1.0, 1.5, 2.0, -1.0])


def _strings(rng: random.Random) -> str | None:
    return rng.choice([None, "x", "y", "z", "w"])


def _bools(rng: random.Random) -> bool | None:
    return rng.choice([None, True, False])


VALUES: dict[str, Callable[[random.Random], Any]] = {"INT": _ints, "BIGINT": _ints, "DOUBLE": _doubles,
                                                     "STRING": _strings, "BOOLEAN": _bools}


@dataclasses.dataclass(frozen=True)
class Case:
    """A table's value columns (name, Java type) and options, and the row kinds its history draws."""

    columns: tuple[tuple[str, str], ...]
    options: dict[str, str]
    kinds: tuple[str, ...] = ALL_KINDS
    # a history of rows a writer of this engine may send (None: any)
    history: Callable[[Case, random.Random], list[list[Change] | None]] | None = None
    # each key's first row in a commit is an add (so is the first row of every merge, see whole_merges)
    adds_lead: bool = False
    # columns whose adds always hold a value
    not_null: tuple[str, ...] = ()

    @property
    def fields(self) -> list[tuple[str, str]]:
        return [("k", "INT"), *self.columns]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field("k", pa.int32(), nullable=False),
                          *(pa.field(n, ARROW[t]) for n, t in self.columns)])

    def row(self, rng: random.Random, key: int) -> Row:
        row = {"k": key, **{name: VALUES[sql](rng) for name, sql in self.columns}}
        for name in self.not_null:
            while row[name] is None:
                row[name] = VALUES[dict(self.columns)[name]](rng)
        return row

    @property
    def table_options(self) -> dict[str, str]:
        options = {"bucket": "1", **self.options}
        if self.adds_lead:  # no compaction but the full ones: every merge starts at a key's first row
            options |= {"num-sorted-run.compaction-trigger": "50", "num-sorted-run.stop-trigger": "60"}
        return options


def random_history(case: Case, rng: random.Random, commits: int = 6) -> list[list[Change] | None]:
    """Commits of 1 to 6 rows (a key may come several times), a full compaction (None) after
    about every third."""
    steps: list[list[Change] | None] = []
    for _ in range(commits):
        changes = [(rng.choice(case.kinds), case.row(rng, rng.randrange(KEYS))) for _ in range(rng.randint(1, 6))]
        if case.adds_lead:
            seen: set[int] = set()
            for i, (kind, row) in enumerate(changes):
                if row["k"] not in seen and kind not in ADDS:
                    changes[i] = ("+I", row)
                seen.add(row["k"])
        steps.append(changes)
        if rng.random() < 0.3:
            steps.append(None)
    return steps


def removal_history(case: Case, rng: random.Random, commits: int = 6) -> list[list[Change] | None]:
    """Adds, and deletes of keys in commits of their own, each followed by a full compaction,
    after which a deleted key may come back (what Paimon 0.9's remove-record-on-delete merges)."""
    steps: list[list[Change] | None] = []
    for _ in range(commits):
        if rng.random() < 0.3:
            steps += [[("-D", case.row(rng, key)) for key in rng.sample(range(KEYS), 2)], None]
        else:
            steps.append([(rng.choice(ADDS), case.row(rng, rng.randrange(KEYS))) for _ in range(rng.randint(1, 6))])
    return steps


NUMBERS = (("a", "BIGINT"), ("b", "DOUBLE"), ("s", "STRING"))
SEQUENCED = (("ts", "BIGINT"), *NUMBERS)
GROUPED = (("g1", "INT"), ("a", "BIGINT"), ("b", "DOUBLE"), ("g2", "INT"), ("s", "STRING"), ("c", "BIGINT"))
RETRACTING = (("sm", "BIGINT"), ("pr", "DOUBLE"), ("lv", "STRING"), ("lnn", "INT"), ("mx", "INT"),
              ("mn", "DOUBLE"), ("la", "STRING"), ("fv", "INT"), ("fnn", "STRING"))
ADDING = (("sm", "BIGINT"), ("pr", "BIGINT"), ("mx", "STRING"), ("mn", "INT"), ("lv", "DOUBLE"),
          ("lnn", "STRING"), ("fv", "INT"), ("fnn", "BIGINT"), ("la", "STRING"), ("ba", "BOOLEAN"),
          ("bo", "BOOLEAN"))
IGNORING = (("mx", "INT"), ("la", "STRING"), ("fv", "INT"))  # none of them retracts
FUNCTIONS = {"sm": "sum", "pr": "product", "mx": "max", "mn": "min", "lv": "last_value",
             "lnn": "last_non_null_value", "fv": "first_value", "fnn": "first_non_null_value", "la": "listagg",
             "ba": "bool_and", "bo": "bool_or"}


def _aggregates(columns: tuple[tuple[str, str], ...], ignore_retract: tuple[str, ...] = ()) -> dict[str, str]:
    options = {"merge-engine": "aggregation"}
    for name, _ in columns:
        options[f"fields.{name}.aggregate-function"] = FUNCTIONS[name]
    for name in ignore_retract:
        options[f"fields.{name}.ignore-retract"] = "true"
    return options


CASES = {
    "deduplicate": Case(NUMBERS, {}),
    "deduplicate-sequence-field": Case(SEQUENCED, {"sequence.field": "ts"}),
    # ignore-delete under its older per-engine keys, which Paimon still reads
    "deduplicate-ignore-delete": Case(NUMBERS, {"deduplicate.ignore-delete": "true"}),
    "first-row": Case(NUMBERS, {"merge-engine": "first-row", "ignore-delete": "true"}),
    "partial-update-sequence-field": Case(SEQUENCED, {"merge-engine": "partial-update", "sequence.field": "ts"},
                                          kinds=ADDS),
    "partial-update-ignore-delete": Case(NUMBERS, {"merge-engine": "partial-update",
                                                   "partial-update.ignore-delete": "true"}),
    "partial-update-sequence-groups": Case(GROUPED, {
        "merge-engine": "partial-update", "fields.g1.sequence-group": "a,b", "fields.g2.sequence-group": "s",
        "fields.a.aggregate-function": "sum"}, adds_lead=True),
    "partial-update-remove-record-on-delete": Case(NUMBERS, {
        "merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"}, history=removal_history),
    "aggregation-retracting": Case(RETRACTING, _aggregates(RETRACTING, ignore_retract=("mx", "mn", "la", "fv", "fnn")),
                                   adds_lead=True, not_null=("pr",)),
    "aggregation-adding": Case(ADDING, _aggregates(ADDING), kinds=ADDS),
    "aggregation-ignore-delete": Case(IGNORING, {**_aggregates(IGNORING), "ignore-delete": "true"}),
    "aggregation-default-function": Case(NUMBERS[:2], {"merge-engine": "aggregation",
                                                       "fields.default-aggregate-function": "sum"}),
}


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r["k"])


def _arrow(case: Case, changes: list[Change]) -> pa.Table:
    return pa.Table.from_pylist([row for _, row in changes], schema=case.schema).append_column(
        "rowkind", pa.array([kind for kind, _ in changes]))


def _ours(table: cl.Table, snapshot_id: int) -> list[Row]:
    return _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_engines_read_both_tables_alike(tmp_path: Any, java: JavaPaimon, name: str) -> None:
    case = CASES[name]
    warehouse = str(tmp_path)
    options = case.table_options
    java.create_table(warehouse, "db.java", case.fields, primary_keys=["k"], options=options)
    ours = cl.Catalog(warehouse).create_table("db.ours", case.schema, primary_keys=["k"], options=options)
    rng = random.Random(1)
    history = (case.history or random_history)(case, rng)
    for step, changes in enumerate(history):
        if changes is None:
            java.compact(warehouse, "db.java", [({}, 0)])
            ours.compact(full=True)
        else:
            java.write(warehouse, "db.java", changes)
            ours.write(_arrow(case, changes))
        theirs = cl.open_table(f"{warehouse}/db.db/java")
        # (an ignore-delete commit of nothing but retractions commits no snapshot)
        assert (theirs.latest_snapshot() is None) == (ours.latest_snapshot() is None)
        if ours.latest_snapshot() is None:
            continue
        java_snapshot, our_snapshot = theirs.latest_snapshot().id, ours.latest_snapshot().id
        expected = _sorted(java.read(warehouse, "db.java", java_snapshot))
        assert _ours(theirs, java_snapshot) == expected, f"changelake's read of Java's table, step {step}"
        assert _ours(ours, our_snapshot) == expected, f"changelake's own table, step {step}: {history[:step + 1]}"
    # (Java's reads are what takes the time: it reads changelake's table at the end)
    assert _sorted(java.read(warehouse, "db.ours")) == _ours(ours, ours.latest_snapshot().id)


STREAMED = {
    "deduplicate": Case(NUMBERS, {}),
    "deduplicate-row-deduplicate": Case(NUMBERS[:1], {"changelog-producer.row-deduplicate": "true"}),
    "first-row": Case(NUMBERS, {"merge-engine": "first-row", "ignore-delete": "true"}),
    "partial-update": Case(NUMBERS, {"merge-engine": "partial-update"}, kinds=ADDS),
    "aggregation": Case((("sm", "BIGINT"), ("lv", "STRING")), _aggregates((("sm", "BIGINT"), ("lv", "STRING"))),
                        adds_lead=True),
}


def _changes_of(table: cl.Table) -> list[Change]:
    """The table's changes snapshot by snapshot, each snapshot's by key (as Java streams them)."""
    changes: list[Change] = []
    for snapshot in table.snapshots():
        rows = table.changes(snapshot.id - 1, snapshot.id).to_arrow().to_pylist()
        changes += sorted(((row.pop("rowkind"), row) for row in rows), key=lambda change: change[1]["k"])
    return changes


@pytest.mark.parametrize(("name", "producer"), [
    *((name, producer) for name in ("aggregation", "deduplicate", "partial-update")
      for producer in ("full-compaction", "lookup")),
    ("deduplicate-row-deduplicate", "lookup"), ("first-row", "lookup")])  # (first-row: lookup or none)
def test_both_engines_stream_both_tables_alike(tmp_path: Any, java: JavaPaimon, name: str, producer: str) -> None:
    """The change streams of the ``lookup`` and ``full-compaction`` producers: Java's stream of
    its table is changelake's change read of it, and of changelake's table, and Java's stream of
    changelake's table; the tables' reads agree too."""
    case = STREAMED[name]
    warehouse = str(tmp_path)
    options = {**case.table_options, "changelog-producer": producer}
    java.create_table(warehouse, "db.java", case.fields, primary_keys=["k"], options=options)
    ours = cl.Catalog(warehouse).create_table("db.ours", case.schema, primary_keys=["k"], options=options)
    for changes in random_history(case, random.Random(7), commits=5):
        if changes is None:
            java.compact(warehouse, "db.java", [({}, 0)])
            ours.compact(full=True)
        else:
            java.write(warehouse, "db.java", changes, full_compaction=producer == "full-compaction")
            ours.write(_arrow(case, changes))
    theirs = cl.open_table(f"{warehouse}/db.db/java")
    expected = java.stream(warehouse, "db.java", 1)
    assert expected
    assert _changes_of(theirs) == expected
    assert _changes_of(ours) == expected
    assert java.stream(warehouse, "db.ours", 1) == expected
    assert _ours(ours, ours.latest_snapshot().id) == _sorted(java.read(warehouse, "db.java"))
