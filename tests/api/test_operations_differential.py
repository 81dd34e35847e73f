"""Random histories of every table operation (writes, a long-lived writer, delete, update,
overwrite, merge, truncate, compactions, rescale, a changed file format, tags, branches,
fast-forward, rollback, snapshot expiry) on primary-key tables of every bucket mode (fixed,
dynamic, cross-partition, postpone; deduplicate and partial-update; deletion vectors; the lookup
and input changelog producers) and append tables (unaware and fixed-bucket), checked against a
dict model after every operation, at every earlier snapshot still present, at the tags, on the
branch, and by replaying each operation's changelog over the state before it."""

from __future__ import annotations

import itertools
import random
import tempfile
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake import errors

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False),
                    pa.field("v", pa.int64()), pa.field("s", pa.string())])
PARTS = ("a", "b", "c")
Row = dict[str, Any]
Model = dict[Any, Row]
ROW_IDS = itertools.count()  # an append table's rows are each their own key

CONFIGS: dict[str, tuple[list[str], list[str], dict[str, str]]] = {
    # name: (primary key, partition keys, options)
    "fixed": (["k", "p"], ["p"], {"bucket": "2"}),
    "fixed-unpartitioned": (["k"], [], {"bucket": "3", "file.format": "orc"}),
    "fixed-vectors": (["k", "p"], ["p"], {"bucket": "2", "deletion-vectors.enabled": "true"}),
    "fixed-lookup": (["k", "p"], ["p"], {"bucket": "1", "changelog-producer": "lookup"}),
    "dynamic": (["k", "p"], ["p"], {"bucket": "-1", "dynamic-bucket.target-row-num": "3",
                                    "dynamic-bucket.initial-buckets": "2"}),
    "dynamic-unpartitioned": (["k"], [], {"bucket": "-1", "dynamic-bucket.target-row-num": "4"}),
    "dynamic-lookup": (["k", "p"], ["p"], {"bucket": "-1", "dynamic-bucket.target-row-num": "3",
                                           "changelog-producer": "lookup", "deletion-vectors.enabled": "true"}),
    "partial-update": (["k", "p"], ["p"], {"bucket": "2", "merge-engine": "partial-update",
                                          "partial-update.remove-record-on-delete": "true"}),
    "partial-update-dynamic-lookup": (["k"], [], {"bucket": "-1", "dynamic-bucket.target-row-num": "3",
                                                  "merge-engine": "partial-update", "changelog-producer": "lookup",
                                                  "partial-update.remove-record-on-delete": "true"}),
    "fixed-input": (["k"], [], {"bucket": "2", "changelog-producer": "input"}),
    "dynamic-vectors": (["k", "p"], ["p"], {"bucket": "-1", "dynamic-bucket.target-row-num": "3",
                                            "deletion-vectors.enabled": "true"}),
    "cross-partition": (["k"], ["p"], {"bucket": "-1", "dynamic-bucket.target-row-num": "3"}),
    "cross-partition-lookup": (["k"], ["p"], {"bucket": "-1", "dynamic-bucket.target-row-num": "3",
                                              "changelog-producer": "lookup"}),
    "postpone": (["k", "p"], ["p"], {"bucket": "-2", "postpone.default-bucket-num": "2"}),
    "postpone-unpartitioned": (["k"], [], {"bucket": "-2"}),
    "append": ([], ["p"], {}),
    "append-vectors": ([], ["p"], {"deletion-vectors.enabled": "true", "compaction.min.file-num": "2"}),
    "append-fixed": ([], ["p"], {"bucket": "2", "bucket-key": "k"}),
    "append-fixed-unpartitioned": ([], [], {"bucket": "2", "bucket-key": "k", "file.format": "orc"}),
}


class History:
    """The model of main and of each branch, and the state each snapshot must show."""

    def __init__(self, pk: list[str], *, partial: bool = False) -> None:
        self.pk = pk
        self.partial = partial
        self.model: Model = {}
        self.states: dict[int, Model] = {}

    def key(self, row: Row) -> Any:
        """The primary key; an append table's rows are each their own (a new id)."""
        if not self.pk:
            return ("row", next(ROW_IDS))
        return tuple(row[c] for c in self.pk)


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((value is None, value) for value in row)


def read(table: cl.Table, **scan: Any) -> list[tuple[Any, ...]]:
    return sorted(((r["k"], r["p"], r["v"], r["s"]) for r in table.scan(**scan).to_arrow().to_pylist()), key=_order)


def shown(model: Model) -> list[tuple[Any, ...]]:
    return sorted(((r["k"], r["p"], r["v"], r["s"]) for r in model.values()), key=_order)


def random_row(rng: random.Random, parts: tuple[str, ...]) -> Row:
    return {"k": rng.randrange(10), "p": rng.choice(parts), "v": rng.choice([None, *range(6)]),
            "s": rng.choice([None, "x", "y" * 20])}


def to_arrow(rows: list[Row], kinds: list[str] | None = None) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return table if kinds is None else table.append_column("rowkind", pa.array(kinds, pa.string()))


def apply_writes(h: History, rows: list[Row], kinds: list[str]) -> None:
    for row, kind in zip(rows, kinds, strict=True):
        if kind in ("+I", "+U"):
            key = h.key(row)
            h.model[key] = updated(h, h.model.get(key), row)
        else:
            h.model.pop(h.key(row), None)


def updated(h: History, old: Row | None, new: Row) -> Row:
    """A key's row after ``new`` is written: under partial-update, its non-null values."""
    if old is None or not h.partial:
        return dict(new)
    return {c: old[c] if new[c] is None else new[c] for c in new}


def matches(row: Row, predicate: tuple[str, Any]) -> bool:
    column, value = predicate
    if column == "k<":
        return bool(row["k"] < value)
    if column == "v>=":
        return row["v"] is not None and bool(row["v"] >= value)
    return bool(row[column] == value)


def expression(predicate: tuple[str, Any]) -> pc.Expression:
    column, value = predicate
    if column == "k<":
        return pc.field("k") < value
    if column == "v>=":
        return pc.field("v") >= value
    return pc.field(column) == value


def random_predicate(rng: random.Random, parts: tuple[str, ...]) -> tuple[str, Any]:
    return rng.choice([("k<", rng.randrange(11)), ("v>=", rng.randrange(6)), ("p", rng.choice(parts)),
                       ("s", "x")])


class Run:
    """One random history on one table configuration."""

    def __init__(self, warehouse: str, config: str, seed: int) -> None:
        self.pk, self.partition_keys, self.options = CONFIGS[config]
        self.table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=self.pk,
                                                        partition_keys=self.partition_keys,
                                                        options=self.options)
        self.rng = random.Random(seed)
        self.parts = PARTS if self.partition_keys else ("a",)
        self.partial = self.options.get("merge-engine") == "partial-update"
        self.main = History(self.pk, partial=self.partial)
        self.log: list[str] = []
        self.branch: cl.Table | None = None
        self.branch_history: History | None = None
        self.tags: dict[str, Model] = {}
        self.tag_count = 0
        self.commits = 0
        self.writer = self.table.writer()  # long-lived: its commits come between the others

    # -- checking -----------------------------------------------------------------------------

    def landed(self, table: cl.Table, h: History, before: int) -> None:
        # Only the last snapshot an operation landed: a deletion-vector table's APPEND snapshot
        # before its writer's COMPACT one hides the level-0 files (as Paimon's reads do).
        latest = self.latest_id(table)
        if latest > before:
            h.states[latest] = dict(h.model)

    def check(self, table: cl.Table, h: History, where: str) -> None:
        assert read(table) == shown(h.model), (where, self.log)
        # Filters that prune by key, partition and value statistics, and a projection.
        for predicate in (("k<", 4), ("v>=", 3), ("p", "b")):
            chosen = {k: r for k, r in h.model.items() if matches(r, predicate)}
            assert read(table, filter=expression(predicate)) == shown(chosen), (where, predicate, self.log)
        projected = table.scan(columns=["s", "k"]).to_arrow()
        assert projected.column_names == ["s", "k"]
        assert sorted(zip(projected["k"].to_pylist(), projected["s"].to_pylist(), strict=True), key=_order) == \
            sorted(((r["k"], r["s"]) for r in h.model.values()), key=_order), (where, self.log)
        live = {s.id for s in table.snapshots()}
        for snapshot_id in sorted(live & set(h.states)):
            assert read(table, snapshot_id=snapshot_id) == shown(h.states[snapshot_id]), \
                (where, snapshot_id, self.log)

    def latest_id(self, table: cl.Table) -> int:
        latest = table.latest_snapshot()
        return latest.id if latest else 0

    def check_changelog(self, table: cl.Table, before: int, previous: Model, model: Model) -> None:
        """The changes of the snapshots an operation landed, replayed over the state before it,
        give the state after it: with the lookup producer exactly (a retraction retracts the row
        there, an insert adds a row not there), with the input producer as upserts. A snapshot's
        changes are replayed retractions first: buckets' changes come in no order, and a key
        moving within a commit is retracted in one bucket and inserted in another (lookup)."""
        exact = self.options["changelog-producer"] == "lookup"
        state = {(r["k"], r["p"]): r for r in previous.values()}
        for snapshot_id in range(before + 1, self.latest_id(table) + 1):
            changes = table.changes(snapshot_id - 1, snapshot_id).to_arrow().to_pylist()
            # The input producer's changes are the rows as written: in order within a key's bucket.
            for change in sorted(changes, key=lambda c: exact and c["rowkind"][0] == "+"):
                kind = change.pop("rowkind")
                place = (change["k"], change["p"])
                if kind in ("-U", "-D"):
                    gone = state.pop(place, None)
                    assert not exact or gone == change, (kind, change, gone, self.log)
                else:
                    assert not exact or place not in state, (kind, change, self.log)
                    state[place] = change
        assert shown(state) == shown(model), self.log

    # -- operations ---------------------------------------------------------------------------

    def op_write(self, table: cl.Table, h: History) -> None:
        rows = [random_row(self.rng, self.parts) for _ in range(self.rng.randrange(1, 9))]
        kinds = [self.rng.choice(["+I", "+I", "+U", "-D"]) if self.pk else "+I" for _ in rows]
        if self.partial:  # a retraction (-U) does nothing there
            rows, kinds = self.partial_batch(rows, [kind.replace("+U", "+I") for kind in kinds])
        self.log.append(f"write {list(zip(rows, kinds, strict=True))}")
        table.write(to_arrow(rows, kinds))
        apply_writes(h, rows, kinds)

    def partial_batch(self, rows: list[Row], kinds: list[str]) -> tuple[list[Row], list[str]]:
        """Under partial-update, the batch without rows of a key after its -D: a writer merges a
        key's rows before it writes them (Paimon's write buffer too), and a -D then a +I merge
        into a +I of the values the -D reset, which does not delete the key's older values."""
        deleted: set[Any] = set()
        kept: list[tuple[Row, str]] = []
        for row, kind in zip(rows, kinds, strict=True):
            key = tuple(row[c] for c in self.pk)
            if key not in deleted:
                kept.append((row, kind))
                if kind == "-D":
                    deleted.add(key)
        return [r for r, _ in kept], [k for _, k in kept]

    def op_delete(self, table: cl.Table, h: History) -> None:
        predicate = random_predicate(self.rng, self.parts)
        self.log.append(f"delete {predicate}")
        table.delete(expression(predicate))
        h.model = {k: r for k, r in h.model.items() if not matches(r, predicate)}

    def op_update(self, table: cl.Table, h: History) -> None:
        predicate = random_predicate(self.rng, self.parts)
        if self.rng.random() < 0.5:
            new: dict[str, Any] = {"v": pc.field("v") + 1}
        else:
            new = {"s": self.rng.choice(["z", None])}
        self.log.append(f"update {predicate} {new}")
        table.update(expression(predicate), set=new)
        for key, r in list(h.model.items()):
            if matches(r, predicate):
                if "v" in new:
                    h.model[key] = {**r, "v": None if r["v"] is None else r["v"] + 1}
                else:
                    h.model[key] = updated(h, r, {**r, "s": new["s"]})

    def op_overwrite(self, table: cl.Table, h: History) -> None:
        static = self.partition_keys and self.rng.random() < 0.5
        part = self.rng.choice(self.parts)
        rows = [random_row(self.rng, (part,) if static else self.parts) for _ in range(self.rng.randrange(0, 6))]
        self.log.append(f"overwrite {rows} static={part if static else None}")
        replaced = {part} if static else ({r["p"] for r in rows} if self.partition_keys else set(self.parts))
        kept = {k: r for k, r in h.model.items() if r["p"] not in replaced}
        if "p" not in self.pk and self.partition_keys and any((r["k"],) in kept for r in rows):
            with pytest.raises(errors.DataError):
                table.overwrite(to_arrow(rows), partitions={"p": part} if static else None)
            return
        table.overwrite(to_arrow(rows), partitions={"p": part} if static else None)
        h.model = kept
        apply_writes(h, rows, ["+I"] * len(rows))

    def op_merge(self, table: cl.Table, h: History) -> None:
        on = self.pk or ["k"]  # an append table's rows match by k
        source: dict[Any, Row] = {}
        for _ in range(self.rng.randrange(1, 6)):
            row = random_row(self.rng, self.parts)
            source[tuple(row[c] for c in on)] = row
        rows = list(source.values())
        limit = self.rng.randrange(6)
        by_source = self.rng.random() < 0.3
        self.log.append(f"merge {rows} delete v<{limit} by_source={by_source}")
        merge = table.merge(to_arrow(rows), on=None if self.pk else on) \
            .when_matched_delete(condition=pc.field("target.v") < limit) \
            .when_matched_update() \
            .when_not_matched_insert()
        if by_source:
            merge = merge.when_not_matched_by_source_delete(condition=pc.field("target.s") == "x")
        merge.execute()
        model: Model = {}
        matched: set[Any] = set()
        for key, old in h.model.items():
            match = tuple(old[c] for c in on)
            if match in source:
                matched.add(match)
                if old["v"] is None or old["v"] >= limit:
                    model[key] = updated(h, old, source[match])
            elif not by_source or old["s"] != "x":
                model[key] = old
        h.model = model
        news = [row for match, row in source.items() if match not in matched]
        apply_writes(h, news, ["+I"] * len(news))

    def op_truncate(self, table: cl.Table, h: History) -> None:
        self.log.append("truncate")
        table.truncate()
        h.model = {}

    def op_compact(self, table: cl.Table, h: History) -> None:
        full = self.rng.random() < 0.5
        self.log.append(f"compact full={full}")
        table.compact(full=full)

    def op_format(self, table: cl.Table, h: History) -> None:
        fmt = self.rng.choice(["parquet", "orc", "avro"])
        self.log.append(f"file.format={fmt}")
        table.set_options({"file.format": fmt})
        if table is self.table:
            # A writer of an older schema refuses to compact files of a newer one (SchemaError).
            self.writer.close()
            self.writer = self.table.writer()

    def op_rescale(self, table: cl.Table, h: History) -> None:
        if int(table.options.get("bucket", "-1")) <= 0 or table.latest_snapshot() is None:
            return
        bucket = self.rng.randrange(1, 4)
        self.log.append(f"rescale {bucket}")
        table.rescale(bucket=bucket)
        # A writer opened before keeps the old number of buckets (Paimon's too): open a new one.
        self.writer.close()
        self.writer = self.table.writer()

    def op_writer(self, table: cl.Table, h: History) -> None:
        rows = [random_row(self.rng, self.parts) for _ in range(self.rng.randrange(1, 6))]
        kinds = [self.rng.choice(["+I", "-D"]) if self.pk else "+I" for _ in rows]
        if self.partial:
            rows, kinds = self.partial_batch(rows, kinds)
        self.log.append(f"long-lived writer {list(zip(rows, kinds, strict=True))}")
        self.writer.write(to_arrow(rows, kinds))
        self.commits += 1
        self.writer.commit(self.commits)
        apply_writes(h, rows, kinds)

    # -- history operations (main only) ----------------------------------------------------

    def op_tag(self) -> None:
        latest = self.latest_id(self.table)
        if not latest:
            return
        self.tag_count += 1
        name = f"t{self.tag_count}"
        self.log.append(f"tag {name} at {latest}")
        self.table.create_tag(name, latest)
        self.tags[name] = dict(self.main.states[latest])

    def op_branch(self) -> None:
        if self.branch is not None:
            if self.rng.random() < 0.5:
                # The branch's snapshots (and schemas, tags) replace main's from the branch's
                # earliest on; main's below it must be the branch's history.
                first = min(self.branch.snapshots(), key=lambda s: s.id)
                below = [s for s in self.table.snapshots() if s.id < first.id]
                if below and below[-1].time_millis > first.time_millis:  # rolled back past it, rewritten
                    self.log.append("fast_forward refused")
                    with pytest.raises(errors.CommitConflictError):
                        self.table.fast_forward("br")
                else:
                    self.log.append("fast_forward")
                    self.table.fast_forward("br")
                    self.main.model = dict(self.branch_history.model)  # type: ignore[union-attr]
                    self.main.states = {i: m for i, m in self.main.states.items() if i < first.id}
                    self.main.states.update(self.branch_history.states)  # type: ignore[union-attr]
                    self.tags = {name: m for name, m in self.tags.items() if name in self.table.tags()}
                self.table.delete_branch("br")
            else:
                self.log.append("delete_branch")
                self.table.delete_branch("br")
            self.branch = self.branch_history = None
            self.writer.close()
            self.writer = self.table.writer()
            return
        latest = self.latest_id(self.table)
        if not latest:
            return
        if self.tags and self.rng.random() < 0.5:
            tag = self.rng.choice(list(self.tags))
            self.log.append(f"create_branch from tag {tag}")
            self.branch = self.table.create_branch("br", from_tag=tag)
            start, model = self.table.tag(tag).id, self.tags[tag]
        else:
            start = self.rng.choice(sorted({s.id for s in self.table.snapshots()} & set(self.main.states)))
            self.log.append(f"create_branch from snapshot {start}")
            self.branch = self.table.create_branch("br", from_snapshot=start)
            model = self.main.states[start]
        self.branch_history = History(self.pk, partial=self.partial)
        self.branch_history.model = {k: dict(r) for k, r in model.items()}
        self.branch_history.states = {start: dict(model)}

    def op_rollback(self) -> None:
        live = sorted({s.id for s in self.table.snapshots()} & set(self.main.states))
        if not live:
            return
        target = self.rng.choice(live)
        self.log.append(f"rollback_to {target}")
        self.table.rollback_to(snapshot_id=target)
        self.main.model = {k: dict(r) for k, r in self.main.states[target].items()}
        self.main.states = {i: m for i, m in self.main.states.items() if i <= target}
        self.tags = {name: m for name, m in self.tags.items() if name in self.table.tags()}
        self.writer.close()
        self.writer = self.table.writer()
        if int(self.table.options.get("bucket", "-1")) > 0:
            # The schema stays (Paimon's rollback keeps it): partitions written with another
            # number of buckets before a rescale are rescaled again before they take writes.
            self.log.append("rescale")
            self.table.rescale()
            self.landed(self.table, self.main, target)

    def op_expire(self) -> None:
        keep = self.rng.randrange(1, 4)
        self.log.append(f"expire retain_max={keep}")
        self.table.expire_snapshots(retain_max=keep, retain_min=1)

    # -- the run ------------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        data_ops: list[Callable[[cl.Table, History], None]] = [
            self.op_write, self.op_write, self.op_write, self.op_writer, self.op_delete, self.op_update,
            self.op_overwrite, self.op_merge, self.op_compact, self.op_compact, self.op_format,
            self.op_rescale, self.op_truncate]
        history_ops = [self.op_tag, self.op_branch, self.op_rollback, self.op_expire]
        # Overwrites (truncate, rescale, an append table's row-level operations) are skipped by
        # streams; a schema change lands no snapshot.
        self.unlogged = {self.op_overwrite, self.op_truncate, self.op_rescale, self.op_format}
        try:
            for step in range(steps):
                if self.rng.random() < 0.2:
                    self.rng.choice(history_ops)()
                    self.table = self.table.branch("main")  # a fresh handle after history changes
                    self.check(self.table, self.main, f"step {step}")
                    continue
                on_branch = self.branch is not None and self.rng.random() < 0.3
                table, h = (self.branch, self.branch_history) if on_branch else (self.table, self.main)
                assert table is not None and h is not None
                op = self.rng.choice(data_ops)
                # A postpone-bucket table's long-lived writer writes to bucket-postpone/, unread
                # until a compaction moves its rows (tests/table/write/test_postpone_bucket.py).
                if op == self.op_writer and (on_branch or self.options.get("bucket") == "-2"):
                    op = self.op_write
                before = self.latest_id(table)
                if on_branch:
                    self.log.append("on branch:")
                previous = dict(h.model)
                op(table, h)
                self.landed(table, h, before)
                self.check(table, h, f"step {step}")
                if "changelog-producer" in self.options and op not in self.unlogged:
                    self.check_changelog(table, before, previous, h.model)
                for name, model in self.tags.items():
                    assert read(self.table, tag=name) == shown(model), (name, self.log)
                if self.branch is not None and self.branch_history is not None:
                    self.check(self.branch, self.branch_history, f"branch, step {step}")
        except BaseException as e:
            e.add_note("\n".join(self.log))
            raise
        finally:
            self.writer.close()


@pytest.mark.parametrize("config", list(CONFIGS))
def test_operations_match_the_model(config: str) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        Run(warehouse, config, seed=5).run(20)
