"""A plain-Python model of a primary-key table's rows and of change streams over them, for
tests/changelog/test_stream_differential.py: the table configurations it runs (producer,
merge engine, options), what a merge engine keeps of a key's rows, and change rows folded
over a state (+I/+U upsert, -U/-D remove), loosely or as a complete changelog that must carry
before-images."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import changelake as cl

Key = tuple[int, str]
Row = dict[str, Any]
State = dict[Key, Row]
VALUES = ("v", "s", "q", "w")  # canonical value columns (w: added by a schema change)

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False),
                    pa.field("v", pa.int64()), pa.field("s", pa.string()), pa.field("q", pa.int64())])

AGG = {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
       "fields.s.aggregate-function": "max", "fields.q.aggregate-function": "last_non_null_value"}
PARTIAL = {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"}

# name: options (over {"bucket": "2"}); the engine the model follows is read from them.
CONFIGS: dict[str, dict[str, str]] = {
    "none": {},
    "none-read-overwrite": {"streaming-read-overwrite": "true"},
    "input": {"changelog-producer": "input"},
    "input-read-overwrite": {"changelog-producer": "input", "streaming-read-overwrite": "true",
                             "deletion-vectors.enabled": "true"},
    "lookup": {"changelog-producer": "lookup"},
    "lookup-decoupled": {"changelog-producer": "lookup", "changelog.num-retained.max": "8",
                         "snapshot.num-retained.max": "2"},
    "lookup-dynamic-bucket": {"changelog-producer": "lookup", "bucket": "-1", "dynamic-bucket.target-row-num": "3"},
    "full-dynamic-bucket": {"changelog-producer": "full-compaction", "bucket": "-1",
                            "dynamic-bucket.target-row-num": "3", "full-compaction.delta-commits": "2"},
    "lookup-vectors": {"changelog-producer": "lookup", "deletion-vectors.enabled": "true"},
    "lookup-row-dedup": {"changelog-producer": "lookup", "changelog-producer.row-deduplicate": "true"},
    "lookup-partial": {"changelog-producer": "lookup", **PARTIAL},
    "lookup-aggregation": {"changelog-producer": "lookup", **AGG},
    "lookup-first-row": {"changelog-producer": "lookup", "merge-engine": "first-row"},
    "lookup-sequence": {"changelog-producer": "lookup", "sequence.field": "q"},
    "lookup-ignore-delete": {"changelog-producer": "lookup", "ignore-delete": "true"},
    "full": {"changelog-producer": "full-compaction"},
    "full-delta-3": {"changelog-producer": "full-compaction", "full-compaction.delta-commits": "3"},
    "full-partial": {"changelog-producer": "full-compaction", **PARTIAL},
    "full-aggregation": {"changelog-producer": "full-compaction", **AGG},
    "full-sequence": {"changelog-producer": "full-compaction", "sequence.field": "q",
                      "changelog-producer.row-deduplicate": "true"},
}


@dataclass
class Engine:
    """What a table keeps of a key's rows, as plain Python."""

    name: str
    ignore_delete: bool = False

    @staticmethod
    def of(options: dict[str, str]) -> Engine:
        name = options.get("merge-engine", "deduplicate")
        if "sequence.field" in options:
            name = "sequence"
        return Engine(name, options.get("ignore-delete") == "true")

    @property
    def deletes(self) -> bool:
        """Whether writes may carry -D rows (and delete/merge may delete)."""
        return self.name in ("deduplicate", "partial-update") and not self.ignore_delete

    @property
    def updates(self) -> bool:
        return self.name in ("deduplicate", "partial-update", "sequence") and not self.ignore_delete

    def apply(self, state: State, key: Key, row: Row, kind: str) -> None:
        old = state.get(key)
        if kind in ("-U", "-D"):
            # a -U retracts under deduplicate only (partial-update and the others skip it)
            if not self.ignore_delete and (kind == "-D" or self.name == "deduplicate"):
                state.pop(key, None)
            return
        if old is None:
            state[key] = dict(row)
        elif self.name == "partial-update":
            state[key] = {c: old[c] if row.get(c) is None else row[c] for c in old}
        elif self.name == "aggregation":
            state[key] = {**old, "v": _sum(old["v"], row["v"]), "s": _max(old["s"], row["s"]),
                          "q": old["q"] if row["q"] is None else row["q"],
                          "w": old.get("w") if row.get("w") is None else row["w"]}
        elif self.name == "first-row":
            pass
        elif self.name == "sequence":
            if (row["q"] is None and old["q"] is not None) or (
                    row["q"] is not None and old["q"] is not None and row["q"] < old["q"]):
                return
            state[key] = dict(row)
        else:
            state[key] = dict(row)


def _sum(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else a + b


def _max(a: str | None, b: str | None) -> str | None:
    return b if a is None else a if b is None else max(a, b)


def fold(state: State, changes: list[Row]) -> State:
    """``state`` with the change rows applied: +I/+U upsert, -U/-D remove."""
    out = {key: dict(row) for key, row in state.items()}
    for change in changes:
        key = (change["k"], change["p"])
        if change["rowkind"] in ("+I", "+U"):
            out[key] = {c: change.get(c) for c in VALUES}
        else:
            out.pop(key, None)
    return out


def exact_fold(state: State, changes: list[Row], columns: set[str], *, row_dedup: bool) -> list[str]:
    """What is wrong with ``changes`` as a complete changelog over ``state`` (lookup and
    full-compaction producers): a -U/-D must carry the key's row there, a +I or +U must come
    for a key not there (its -U first), and with row-deduplicate no -U/+U pair leaves a row as
    it was. ``state`` is folded in place."""
    problems = []
    kept = [c for c in VALUES if c in columns]
    last_retracted: dict[Key, Row] = {}
    for change in changes:
        key, kind = (change["k"], change["p"]), change["rowkind"]
        values = {c: change.get(c) for c in kept}
        if kind in ("-U", "-D"):
            old = state.pop(key, None)
            if old is None or {c: old.get(c) for c in kept} != values:
                problems.append(f"{kind} {key} {values} over {old}")
            last_retracted[key] = values
        else:
            if key in state:
                problems.append(f"{kind} {key} {values} over {state[key]}")
            if row_dedup and kind == "+U" and last_retracted.get(key) == values:
                problems.append(f"-U/+U of {key} {values} that changed nothing")
            state[key] = values
    return problems


def shown(state: State, columns: set[str] | None = None) -> list[tuple[Any, ...]]:
    """The rows of ``state`` (only ``columns``, if given), in order."""
    kept = [c for c in VALUES if columns is None or c in columns]
    return sorted(((k, p, *(row.get(c) for c in kept)) for (k, p), row in state.items()),
                  key=lambda t: tuple((v is None, v) for v in t))


def canonical(rows: list[Row], aliases: dict[str, str]) -> list[Row]:
    """Change rows with their columns under canonical names (a renamed column under its first)."""
    return [{aliases.get(c, c): value for c, value in row.items()} for row in rows]


def same(got: State, want: State, columns: set[str] | None = None) -> bool:
    return shown(got, columns) == shown(want, columns)


def differences(got: State, want: State, columns: set[str] | None = None) -> str:
    a, b = set(shown(got, columns)), set(shown(want, columns))
    return f"extra {sorted(a - b, key=str)} missing {sorted(b - a, key=str)}"


def partial_batch(rows: list[Row], kinds: list[str]) -> tuple[list[Row], list[str]]:
    """A partial-update batch without the rows of a key after its -D (a -D then a +I of one
    key in one batch merge into a +I that keeps none of the older values), +U as +I."""
    deleted: set[Key] = set()
    kept = []
    for row, kind in zip(rows, kinds, strict=True):
        if (row["k"], row["p"]) not in deleted:
            kept.append((row, kind.replace("+U", "+I")))
            if kind == "-D":
                deleted.add((row["k"], row["p"]))
    return [r for r, _ in kept], [k for _, k in kept]


@dataclass
class Saved:
    """Where a stream was, and the rows it read after that point."""

    offset: cl.StreamOffset
    position: int  # index into the long stream's rows


@dataclass
class LongStream:
    """A stream kept open across the history, drained after every step."""

    stream: cl.ChangeStream
    state: State
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    columns: set[str] = field(default_factory=set)  # canonical names of the stream's columns
    saved: list[Saved] = field(default_factory=list)
    consumer: str | None = None
