"""Merge engines across changelake and pypaimon 2.1.0, in both directions: changelake writes
(with compactions) and pypaimon reads every snapshot as changelake does; pypaimon writes and
changelake reads every snapshot as pypaimon does.

What pypaimon 2.1.0 reads and writes (``pypaimon/read/merge_engine_support.py``,
``read/reader/*merge_function.py``, ``read/reader/aggregate/aggregators.py``), and so what
these tests use:

* partial-update: only the plain engine (latest non-null value per column). pypaimon rejects
  sequence groups (``fields.<f>.sequence-group``), per-field aggregate functions,
  ``fields.default-aggregate-function``, ``ignore-delete`` and
  ``partial-update.remove-record-on-delete`` / ``-on-sequence-group``, and raises on any
  -U/-D row. So: adds only.
* aggregation: sum, product, max, min, last_value, last_non_null_value, first_value,
  first_non_null_value (not its ``first_not_null_value`` alias), listagg, bool_and, bool_or
  (and collect, merge_map, nested_update, sketches, rbm32, not used here); no retraction at
  all (-U/-D rows raise, ``fields.<f>.ignore-retract`` and
  ``aggregation.remove-record-on-delete`` are rejected). So: adds only.
* first-row: supported, with ``ignore-delete`` (changelake drops the -U/-D rows before writing).

Two more pypaimon differences shape the data: pypaimon calls the merge function for a key with
a single row (Java and changelake return that row as it is), which only differs for listagg
on a blank string, so no blank strings here; and pypaimon's writer records
``delete_row_count = 0`` for files with -D rows and reads single-file buckets without merging
(see test_pypaimon_interop.py), which does not matter here because no retraction is ever written.
"""

from __future__ import annotations

import dataclasses
import decimal
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.changelog import producers
from changelake.table.commit import committer
from changelake.table.read.live_files import live_entries
from changelake.table.write.writer import TableWrite
from pypaimon_oracle import Pypaimon

D = decimal.Decimal
PARTITIONS = ("2024-01-01", "2024-01-02")
KEY = ("dt", "k")
COMPACTION = {"bucket": "2", "target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}
Row = dict[str, Any]


# -- helpers ------------------------------------------------------------------------------


def _sorted(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: tuple(r[k] for k in KEY))


def _paimon_read(pypaimon: Pypaimon, warehouse: str, name: str, snapshot_id: int | None = None) -> list[Row]:
    options = {"scan.snapshot-id": str(snapshot_id)} if snapshot_id is not None else None
    return _sorted(pypaimon.read(warehouse, name, options).to_pylist())


def _paimon_write(pypaimon: Pypaimon, warehouse: str, name: str, rows: list[Row], schema: pa.Schema) -> None:
    pypaimon.write(warehouse, name, pa.Table.from_pylist(rows, schema=schema))


def _create_paimon_table(pypaimon: Pypaimon, warehouse: str, name: str, schema: pa.Schema,
                         options: dict[str, str]) -> None:
    pypaimon.create_table(warehouse, name, schema, partition_keys=["dt"], primary_keys=list(KEY), options=options)


def _ours(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    return _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def _full_read(table: cl.Table, snapshot_id: int) -> list[Row]:
    """The rows of a change stream's full read of a snapshot (which reads level 0 too)."""
    stream = table.stream(mode="from-snapshot-full", snapshot_id=snapshot_id)
    return _sorted(row for b in stream if b.kind is cl.ChangeKind.FULL for row in b.data.drop_columns(["rowkind"])
                   .to_pylist())


def _levels(table: cl.Table) -> set[int]:
    latest = table.latest_snapshot()
    assert latest is not None
    return {e.file.level for e in live_entries(table.context, latest)}


class Model:
    """The rows a table must show: per key, its rows folded in input order; a key with a
    single row shows it as it is."""

    def __init__(self, fold: Callable[[list[Row]], Row]) -> None:
        self.fold = fold
        self.rows: dict[tuple[Any, ...], list[Row]] = {}

    def add(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self.rows.setdefault(tuple(row[k] for k in KEY), []).append(row)

    def view(self) -> list[Row]:
        return _sorted(dict(rows[0]) if len(rows) == 1 else self.fold(rows) for rows in self.rows.values())


def _changelake_writes(
    warehouse: str, schema: pa.Schema, options: dict[str, str], commits: Sequence[list[Row] | str], fold: Any
) -> tuple[cl.Table, dict[int, list[Row]]]:
    """Create a table, run the commits (row lists, or "compact" / "full" compactions) and
    return what every snapshot must show."""
    table = cl.Catalog(warehouse).create_table(
        "db.t", schema=schema, primary_keys=list(KEY), partition_keys=["dt"], options=COMPACTION | options
    )
    model = Model(fold)
    expected: dict[int, list[Row]] = {}
    for commit in commits:
        before = table.latest_snapshot()
        if isinstance(commit, str):
            table.compact(full=commit == "full")
        else:
            data = pa.Table.from_pylist([{n: r.get(n) for n in schema.names} for r in commit], schema=schema)
            if any("rowkind" in r for r in commit):
                data = data.append_column("rowkind", pa.array([r.get("rowkind", "+I") for r in commit], pa.string()))
            assert table.write(data) is not None
            model.add(r for r in commit if r.get("rowkind", "+I") in ("+I", "+U"))
        latest = table.latest_snapshot()
        assert latest is not None
        for snapshot_id in range((before.id if before else 0) + 1, latest.id + 1):
            expected[snapshot_id] = [{n: r.get(n) for n in schema.names} for r in model.view()]
    assert [s.id for s in table.snapshots()] == sorted(expected)
    assert any(s.commit_kind == "COMPACT" for s in table.snapshots())
    return table, expected


def _assert_pypaimon_reads_every_snapshot(pypaimon: Pypaimon, warehouse: str, table: cl.Table,
                                          expected: dict[int, list[Row]]) -> None:
    for snapshot_id, want in expected.items():
        ours = _ours(table, snapshot_id)
        assert ours == want, f"changelake snapshot {snapshot_id} differs from the model"
        theirs = _paimon_read(pypaimon, warehouse, "db.t", snapshot_id)
        assert theirs == ours, f"pypaimon reads snapshot {snapshot_id} differently"
    assert _paimon_read(pypaimon, warehouse, "db.t") == expected[max(expected)]


def _assert_changelake_reads_every_snapshot(pypaimon: Pypaimon, warehouse: str, expected: list[list[Row]]) -> cl.Table:
    table = cl.Catalog(warehouse).get_table("db.t")
    assert [s.id for s in table.snapshots()] == list(range(1, len(expected) + 1))
    for snapshot_id, want in enumerate(expected, start=1):
        theirs = _paimon_read(pypaimon, warehouse, "db.t", snapshot_id)
        assert theirs == want, f"pypaimon snapshot {snapshot_id} differs from the model"
        assert _ours(table, snapshot_id) == theirs, f"changelake reads pypaimon snapshot {snapshot_id} differently"
    return table


# -- partial-update ------------------------------------------------------------------------

PU_SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("a", pa.int64()),
        pa.field("b", pa.string()),
        pa.field("c", pa.float64()),
        pa.field("d", pa.bool_()),
    ]
)
PU_VALUES = ("a", "b", "c", "d")


def _fold_partial_update(rows: list[Row]) -> Row:
    out = {n: None for n in PU_VALUES} | {k: rows[0][k] for k in KEY}
    for r in rows:
        out.update({n: r[n] for n in PU_VALUES if r.get(n) is not None})
    return out


def _partial_rows(rng: random.Random, count: int, keys: int, step: int) -> list[Row]:
    """Rows setting a random subset of the columns (the rest null), repeated keys included."""
    rows = []
    for _ in range(count):
        row: Row = {"dt": rng.choice(PARTITIONS), "k": rng.randrange(keys)}
        values = {
            "a": rng.randint(-9, 9) * step,
            "b": f"s{step}-{rng.randrange(5)}",
            "c": rng.randint(-8, 8) / 4,
            "d": rng.random() < 0.5,
        }
        for name in PU_VALUES:
            row[name] = values[name] if rng.random() < 0.4 else None
        rows.append(row)
    return rows


def _partial_update_commits(rng: random.Random) -> list[list[Row] | str]:
    first = [{"dt": p, "k": k, "a": k, "b": None, "c": None, "d": None} for p in PARTITIONS for k in range(40)]
    commits: list[list[Row] | str] = [first]
    for step in range(1, 9):
        commits.append([{**r, "rowkind": rng.choice(["+I", "+U"])} for r in _partial_rows(rng, 30, 50, step)])
        if step == 3:
            commits.append("compact")
        if step == 5:
            commits.append("full")
    return commits


def test_pypaimon_reads_changelake_partial_update_snapshots(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table, expected = _changelake_writes(
        warehouse,
        PU_SCHEMA,
        {"merge-engine": "partial-update"},
        _partial_update_commits(random.Random(1)),
        _fold_partial_update,
    )
    assert max(_levels(table)) > 0
    _assert_pypaimon_reads_every_snapshot(pypaimon, warehouse, table, expected)


def test_changelake_reads_pypaimon_partial_update_snapshots(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    _create_paimon_table(pypaimon, warehouse, "db.t", PU_SCHEMA, {"bucket": "2", "merge-engine": "partial-update"})
    rng = random.Random(2)
    model = Model(_fold_partial_update)
    expected = []
    for step in range(6):
        rows = _partial_rows(rng, 40, 30, step + 1)
        _paimon_write(pypaimon, warehouse, "db.t", rows, PU_SCHEMA)
        model.add(rows)
        expected.append(model.view())
    table = _assert_changelake_reads_every_snapshot(pypaimon, warehouse, expected)
    # changelake compacts the table pypaimon wrote; pypaimon reads the result.
    table.compact(full=True)
    assert len(_levels(table)) == 1 and 0 not in _levels(table)
    assert _ours(table) == expected[-1]
    assert _paimon_read(pypaimon, warehouse, "db.t") == expected[-1]


# -- aggregation ---------------------------------------------------------------------------

AGG_FUNCTIONS = {
    "s": "sum", "p": "product", "mx": "max", "mn": "min", "lv": "last_value", "ln": "last_non_null_value",
    "fv": "first_value", "fn": "first_non_null_value", "la": "listagg", "ba": "bool_and", "bo": "bool_or",
    "f": "sum", "dec": "sum",
}  # fmt: skip
AGG_SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("s", pa.int64()),
        pa.field("p", pa.int64()),
        pa.field("mx", pa.int32()),
        pa.field("mn", pa.string()),
        pa.field("lv", pa.int64()),
        pa.field("ln", pa.int64()),
        pa.field("fv", pa.int64()),
        pa.field("fn", pa.string()),
        pa.field("la", pa.string()),
        pa.field("ba", pa.bool_()),
        pa.field("bo", pa.bool_()),
        pa.field("f", pa.float64()),
        pa.field("dec", pa.decimal128(10, 2)),
    ]
)


def _agg(function: str, acc: Any, x: Any) -> Any:
    if function == "last_value":
        return x
    if function == "last_non_null_value":
        return acc if x is None else x
    if acc is None or x is None:
        return x if acc is None else acc
    return {
        "sum": lambda: acc + x, "product": lambda: acc * x, "max": lambda: max(acc, x), "min": lambda: min(acc, x),
        "bool_and": lambda: acc and x, "bool_or": lambda: acc or x, "listagg": lambda: f"{acc},{x}",
    }[function]()  # fmt: skip


def _aggregation_fold(functions: dict[str, str]) -> Callable[[list[Row]], Row]:
    def fold(rows: list[Row]) -> Row:
        out: Row = {k: rows[0][k] for k in KEY} | dict.fromkeys(functions)
        for name, function in functions.items():
            values = [r.get(name) for r in rows]
            if function == "first_value":
                out[name] = values[0]
            elif function == "first_non_null_value":
                out[name] = next((v for v in values if v is not None), None)
            else:
                for v in values:
                    out[name] = _agg(function, out[name], v)
        return out

    return fold


def _aggregation_rows(rng: random.Random, count: int, keys: int) -> list[Row]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.25 else value

    return [
        {
            "dt": rng.choice(PARTITIONS),
            "k": rng.randrange(keys),
            "s": maybe(rng.randint(-100, 100)),
            "p": maybe(rng.choice([-1, 1, 2])),
            "mx": maybe(rng.randint(-50, 50)),
            "mn": maybe(rng.choice("xyzab")),
            "lv": maybe(rng.randint(0, 9)),
            "ln": maybe(rng.randint(0, 9)),
            "fv": maybe(rng.randint(0, 9)),
            "fn": maybe(rng.choice(["p", "q"])),
            "la": maybe(rng.choice(["a", "b", "c d"])),
            "ba": maybe(rng.random() < 0.8),
            "bo": maybe(rng.random() < 0.2),
            "f": maybe(rng.randint(-8, 8) / 8),
            "dec": maybe(D(rng.randint(-999, 999)).scaleb(-2)),
        }
        for _ in range(count)
    ]


def _aggregation_commits(rng: random.Random) -> list[list[Row] | str]:
    # Products of at most a few dozen factors of +-1 and 2 per key stay far inside BIGINT.
    commits: list[list[Row] | str] = [_aggregation_rows(rng, 150, 40)]
    for step in range(1, 8):
        commits.append([{**r, "rowkind": rng.choice(["+I", "+U"])} for r in _aggregation_rows(rng, 25, 40)])
        if step == 2:
            commits.append("full")
        if step == 5:
            commits.append("compact")
    return commits


def test_pypaimon_reads_changelake_aggregation_snapshots(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    options = {"merge-engine": "aggregation"} | {f"fields.{c}.aggregate-function": f for c, f in AGG_FUNCTIONS.items()}
    table, expected = _changelake_writes(
        warehouse, AGG_SCHEMA, options, _aggregation_commits(random.Random(3)), _aggregation_fold(AGG_FUNCTIONS)
    )
    assert max(_levels(table)) > 0
    _assert_pypaimon_reads_every_snapshot(pypaimon, warehouse, table, expected)


PY_AGG_FUNCTIONS = {
    "s": "sum", "mx": "max", "ln": "last_non_null_value", "mn": "min", "fn": "first_non_null_value", "la": "listagg",
}  # fmt: skip
PY_AGG_SCHEMA = pa.schema([AGG_SCHEMA.field(n) for n in ("dt", "k", *PY_AGG_FUNCTIONS)])


def test_changelake_reads_pypaimon_aggregation_snapshots(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    options = {"bucket": "2", "merge-engine": "aggregation"}
    options |= {f"fields.{c}.aggregate-function": f for c, f in PY_AGG_FUNCTIONS.items()}
    _create_paimon_table(pypaimon, warehouse, "db.t", PY_AGG_SCHEMA, options)
    rng = random.Random(4)
    model = Model(_aggregation_fold(PY_AGG_FUNCTIONS))
    expected = []
    for _ in range(6):
        rows = [{n: r[n] for n in PY_AGG_SCHEMA.names} for r in _aggregation_rows(rng, 40, 25)]
        _paimon_write(pypaimon, warehouse, "db.t", rows, PY_AGG_SCHEMA)
        model.add(rows)
        expected.append(model.view())
    table = _assert_changelake_reads_every_snapshot(pypaimon, warehouse, expected)
    table.compact(full=True)
    assert _ours(table) == expected[-1]
    assert _paimon_read(pypaimon, warehouse, "db.t") == expected[-1]


# -- first-row -----------------------------------------------------------------------------

FR_SCHEMA = pa.schema(
    [
        pa.field("dt", pa.string(), nullable=False),
        pa.field("k", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
    ]
)


def _first_row_commits(steps: int) -> list[list[Row] | str]:
    """A big first commit, then small commits that rewrite a few of its keys (first-row keeps
    the first version), add new keys, and send -D rows (ignored by ``ignore-delete``)."""
    first = [{"dt": p, "k": k, "v": f"{p}/{k}/first"} for p in PARTITIONS for k in range(1500)]
    commits: list[list[Row] | str] = [first]
    for step in range(1, steps + 1):
        rows: list[Row] = [{"dt": p, "k": k, "v": f"{p}/{k}/{step}"} for p in PARTITIONS for k in range(3)]
        rows += [{"dt": p, "k": 2000 + step, "v": f"new {step}"} for p in PARTITIONS]
        rows += [{"dt": PARTITIONS[0], "k": 5, "v": None, "rowkind": "-D"}]
        commits.append(rows)
    return commits


FIRST_ROW = {"merge-engine": "first-row", "ignore-delete": "true"}


def test_pypaimon_reads_changelake_first_row_snapshots_after_full_compactions(tmp_path: Any,
                                                                              pypaimon: Pypaimon) -> None:
    """pypaimon and changelake, like Java Paimon (``batchScanSkipLevel0``), read only the files
    above level 0 of a first-row table (Java's writer compacts level 0 right away, with
    lookups): both read every snapshot alike, and those a full compaction left without level-0
    files as the model has them (the others' full rows: a change stream's full read)."""
    warehouse = str(tmp_path)
    commits: list[list[Row] | str] = []
    for commit in _first_row_commits(4):
        commits += [commit, "full"]
    table, expected = _changelake_writes(warehouse, FR_SCHEMA, FIRST_ROW, commits, lambda rows: rows[0])
    compared = 0
    for snapshot_id, want in expected.items():
        ours = _ours(table, snapshot_id)
        assert ours == _paimon_read(pypaimon, warehouse, "db.t", snapshot_id), f"pypaimon reads snapshot {snapshot_id}"
        assert _full_read(table, snapshot_id) == want, f"changelake snapshot {snapshot_id} differs from the model"
        if 0 in {e.file.level for e in live_entries(table.context, table.snapshot(snapshot_id))}:
            continue
        assert ours == want, f"changelake snapshot {snapshot_id} differs from the model"
        compared += 1
    assert compared >= 4


def test_pypaimon_reads_changelake_first_row_compacted_below_the_top_level(tmp_path: Any, pypaimon: Pypaimon) -> None:
    """pypaimon (like Java Paimon) reads the files of a first-row table above level 0 without
    merging them, so a key may sit in only one of them (Java's lookup compaction drops a later
    version of a key that a deeper level holds). Here two small runs over a big top level
    compact into level 1 while the top level holds the first version of their keys."""
    warehouse = str(tmp_path)
    table, expected = _changelake_writes(
        warehouse,
        FR_SCHEMA,
        FIRST_ROW,
        [*_first_row_commits(3)[:1], "full", *_first_row_commits(3)[1:]],
        lambda rows: rows[0],
    )
    latest = max(expected)
    assert _levels(table) == {1, 2}, "the scenario needs a compaction into level 1"
    want = expected[latest]
    reads = {"changelake": _ours(table, latest), "pypaimon": _paimon_read(pypaimon, warehouse, "db.t", latest)}
    wrong = {who: len(rows) - len(want) for who, rows in reads.items() if rows != want}
    assert not wrong, f"extra rows read (keys read twice) of {len(want)}: {wrong}"


def test_changelake_reads_pypaimon_first_row_snapshots(tmp_path: Any, pypaimon: Pypaimon) -> None:
    """pypaimon 2.1.0 cannot read its own first-row writes: its batch scans skip level 0 (as
    Java's and changelake's do) but its writer never compacts. changelake's batch scans read
    every snapshot as pypaimon does, and a change stream's full read merges level 0; after
    changelake compacts the table, both read it whole."""
    warehouse = str(tmp_path)
    _create_paimon_table(pypaimon, warehouse, "db.t", FR_SCHEMA, {"bucket": "2", "merge-engine": "first-row"})
    rng = random.Random(5)
    model = Model(lambda rows: rows[0])
    expected = []
    for step in range(5):
        rows = [{"dt": rng.choice(PARTITIONS), "k": rng.randrange(30), "v": f"{step}-{i}"} for i in range(30)]
        _paimon_write(pypaimon, warehouse, "db.t", rows, FR_SCHEMA)
        model.add(rows)
        expected.append(model.view())
    table = cl.Catalog(warehouse).get_table("db.t")
    assert [s.id for s in table.snapshots()] == list(range(1, len(expected) + 1))
    for snapshot_id, want in enumerate(expected, start=1):
        assert _ours(table, snapshot_id) == _paimon_read(pypaimon, warehouse, "db.t", snapshot_id) == []
        assert _full_read(table, snapshot_id) == want, f"changelake reads pypaimon snapshot {snapshot_id} differently"
    table.compact(full=True)
    assert 0 not in _levels(table)
    assert _ours(table) == expected[-1]
    assert _paimon_read(pypaimon, warehouse, "db.t") == expected[-1]


# -- first-row: level 0 never reaches a snapshot ------------------------------------------


@pytest.mark.parametrize("how", ["write", "writer", "writer-spill"])
def test_first_row_snapshots_hold_no_level0_and_pypaimon_reads_them(tmp_path: Any, pypaimon: Pypaimon,
                                                                    how: str) -> None:
    """Paimon's readers skip level 0 of first-row tables, so every writer compacts level 0 up
    before each commit, as Paimon's lookup compaction does: the commit's APPEND snapshot lists
    the new level-0 files and its COMPACT snapshot (same identifier) moves them up, so the
    snapshot each commit ends with holds no level 0 and pypaimon reads it as changelake does."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                        pa.field("v", pa.string())])
    options = {"bucket": "2", "merge-engine": "first-row", "num-sorted-run.compaction-trigger": "3"}
    if how == "writer-spill":
        options["write-buffer-size"] = "2 kb"
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=list(KEY), partition_keys=["dt"],
                                               options=options)
    model: dict[tuple[Any, ...], Row] = {}
    batches = [[{"dt": PARTITIONS[i % 2], "k": k, "v": f"c{i}"} for k in range(i * 5, i * 5 + 20)] for i in range(6)]
    with table.writer(commit_user="job") as writer:
        for i, rows in enumerate(batches):
            for row in rows:
                model.setdefault((row["dt"], row["k"]), row)
            if how == "write":
                table.write(pa.Table.from_pylist(rows, schema=schema))
            else:
                writer.write(pa.Table.from_pylist(rows, schema=schema))
                writer.commit(identifier=i + 1)
            for snap in table.snapshots():
                if snap.commit_kind is cl.CommitKind.COMPACT:
                    assert 0 not in {e.file.level for e in live_entries(table.context, snap)}, f"level 0 in {snap.id}"
            assert 0 not in _levels(table)
            expected = _sorted(model.values())
            assert _ours(table) == expected
            assert _paimon_read(pypaimon, warehouse, "db.t") == expected


def test_first_row_replay_after_a_crash_between_append_and_compact(tmp_path: Any, pypaimon: Pypaimon) -> None:
    """A crash after a first-row commit's APPEND snapshot (level 0) and before its COMPACT
    snapshot: the replay of the identifier is skipped, and moves level 0 up instead."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                        pa.field("v", pa.string())])
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=list(KEY), partition_keys=["dt"],
                                               options={"bucket": "2", "merge-engine": "first-row"})
    rows = [{"dt": PARTITIONS[k % 2], "k": k, "v": "first"} for k in range(20)]
    lost = TableWrite(table.context, "job", changelog=producers.for_table(table.context))
    lost.write(pa.Table.from_pylist(rows, schema=schema))
    messages = lost.prepare()
    append_only = [dataclasses.replace(m, compact_before=(), compact_after=()) for m in messages]
    committer.commit(table.context, append_only, "job", 1)  # the process died before the COMPACT
    assert 0 in _levels(table) and _paimon_read(pypaimon, warehouse, "db.t") == []
    with table.writer(commit_user="job") as replay:
        replay.write(pa.Table.from_pylist(rows, schema=schema))
        assert replay.commit(identifier=1) == []
    assert 0 not in _levels(table)
    assert _paimon_read(pypaimon, warehouse, "db.t") == _ours(table) == _sorted(rows)
