"""The crash test's table operations (docs/table-operations.md): which commits of a mode are
operations instead of writes, how a child runs each through ``changelake.Table``, and what each
does to the model, so that a fresh process's check of the table stays exact.

In a mode with operations, odd commits write rows and even ones run the operations in turn.
Every operation is a pure function of (seed, mode, commit index): its predicate over the key,
its new values, its rows, the partition it replaces or drops. Operations get no commit
identifier (a batch commit of a user of their own), so they are re-run as ``table.write()``
is: only when the check found they did not land (an unlogged snapshot of an unknown user after
the last logged one is theirs).
"""

from __future__ import annotations

import datetime as dt
import enum
import random
from collections.abc import Iterable

import pyarrow.compute as pc
import workload
from workload import Mode, Model, Row

import changelake as cl
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint


class Operation(enum.StrEnum):
    """A table operation a commit of the workload runs instead of a write."""

    DELETE = "delete"  # the rows whose key k has the commit's residue mod 8
    UPDATE = "update"  # those rows' column a set to a value of the commit's
    OVERWRITE = "overwrite"  # the second partition replaced by rows of the commit's
    MERGE = "merge"  # a merge of rows of the commit's, with all four kinds of clause
    DROP = "drop"  # the second partition dropped
    EXPIRE = "expire"  # partition expiration at a fixed time, which expires the first partition if it is old
    TRUNCATE = "truncate"


# Partitions of modes with operations: dates far ahead, so that the expiry writers run after
# their commits (at the real time) drops nothing, and the one run at EXPIRY_NOW drops the first.
DATED = ("2999-01-01", "2999-01-02")
EXPIRATION = {"partition.expiration-time": "1 d"}
EXPIRY_NOW = dt.datetime(2999, 1, 2, 12)
# A mode whose writer expires partitions itself after every commit (checking every time): its
# rows go to a partition that is always expired and to one that never is.
EXPIRED = ("2000-01-01", "2999-01-01")
WRITER_EXPIRY = {"partition.expiration-time": "1 d", "partition.expiration-check-interval": "0 s"}
# Merge needs a primary key.
APPEND_OPERATIONS = tuple(op for op in Operation if op is not Operation.MERGE)

MODES = {m.name: m for m in (
    Mode("operations", one_shot=True, engine="deduplicate", options=workload.COMPACTION | EXPIRATION,
         partitions=DATED, operations=tuple(Operation)),
    Mode("append-operations", one_shot=True, engine=workload.APPEND,
         options=workload.APPEND_COMPACTION | EXPIRATION, partitions=DATED, operations=APPEND_OPERATIONS),
    # Deletion vectors: an overwrite or a drop takes the partitions' index files with their data
    # files. Its first partition is not expired at EXPIRY_NOW: the expiry lands nothing.
    Mode("dv-operations", one_shot=True, engine="deduplicate",
         options=workload.COMPACTION | workload.DELETION_VECTORS | EXPIRATION, partitions=("2999-01-03", DATED[1]),
         operations=tuple(Operation)),
    # The long-lived writer drops the first partition after each commit, as one OVERWRITE
    # snapshot of its own (a kill inside it leaves the commit landed: the next commit's expiry
    # drops the partition).
    Mode("partition-expiry", one_shot=False, engine="deduplicate", options=workload.COMPACTION | WRITER_EXPIRY,
         partitions=EXPIRED),
)}
# The kill points worth arming inside each kind of operation (the plans "point@operation").
_WRITES = (KillPoint.DATA_FILE, KillPoint.MANIFEST, KillPoint.MANIFEST_LIST, KillPoint.SNAPSHOT_BEFORE_LATEST,
           KillPoint.BEFORE_COMPACT_SNAPSHOT)
_DROPS = (KillPoint.MANIFEST, KillPoint.OVERWRITE, KillPoint.MANIFEST_LIST, KillPoint.SNAPSHOT_BEFORE_LATEST)
_REWRITES = (KillPoint.DATA_FILE, KillPoint.ROW_LEVEL_REWRITTEN, *_DROPS)


def operation_of(mode: Mode, index: int) -> Operation | None:
    """The operation commit ``index`` of ``mode`` runs, or None: it writes rows."""
    if not mode.operations or index % 2:
        return None
    return Operation(mode.operations[(index // 2 - 1) % len(mode.operations)])


def writer_expires(mode: Mode) -> bool:
    """Whether the mode's writer drops expired partitions after its commits: every OVERWRITE
    snapshot of an unknown user is such a drop of the first partition."""
    return not mode.operations and "partition.expiration-time" in mode.options


def cycle(mode: Mode) -> int:
    """How many commits run every operation of ``mode`` once (0 without operations)."""
    return 2 * len(mode.operations) + 1 if mode.operations else 0


def kill_points(mode: Mode) -> list[str]:
    """The plans "point@operation" that kill inside each of the mode's operations."""
    plans = []
    for op in map(Operation, mode.operations):
        if op is Operation.OVERWRITE:
            points: Iterable[KillPoint] = (KillPoint.DATA_FILE, KillPoint.OVERWRITE_WRITTEN, *_DROPS)
        elif op in (Operation.DELETE, Operation.UPDATE) and mode.append:
            points = _REWRITES
        elif op in (Operation.DELETE, Operation.UPDATE, Operation.MERGE):
            points = _WRITES
        else:
            points = _DROPS
        plans += [f"{point.value}@{op.value}" for point in points]
    return plans


def run(table: cl.Table, mode: Mode, seed: int, index: int, op: Operation, *,
        kill_point: str | None) -> cl.Snapshot | None:
    """Run operation ``op`` of commit ``index``, with ``kill_point`` armed while it runs; the
    snapshot it landed (None: it had nothing to do)."""
    if kill_point is not None:
        killpoints.arm(kill_point)
    try:
        return _run(table, mode, seed, index, op)
    finally:
        if kill_point is not None:
            killpoints.arm(None)


def _run(table: cl.Table, mode: Mode, seed: int, index: int, op: Operation) -> cl.Snapshot | None:
    match op:
        case Operation.DELETE:
            return table.delete(_predicate(index))
        case Operation.UPDATE:
            return table.update(_predicate(index), set={"a": _new_value(index)})
        case Operation.OVERWRITE:
            # the rows all lie in the second partition: a dynamic overwrite replaces it as a static one does
            partitions = None if index % 4 == 0 else {"p": mode.partitions[1]}
            return table.overwrite(workload.to_arrow(overwrite_rows(mode, seed, index)), partitions=partitions)
        case Operation.MERGE:
            threshold, cut = _merge_bounds(mode, index)
            merge = (table.merge(workload.to_arrow(merge_rows(mode, seed, index)))
                     .when_matched_delete(condition=f"source.a < {threshold}")
                     .when_matched_update()
                     .when_not_matched_insert()
                     .when_not_matched_by_source_delete(condition=f"target.k >= {cut}"))
            return merge.execute()
        case Operation.DROP:
            try:
                return table.drop_partitions([{"p": mode.partitions[1]}])
            except cl.errors.ScanError:
                return None  # the partition holds no data (the model says so too, or the check fails)
        case Operation.EXPIRE:
            return table.latest_snapshot() if table.expire_partitions(now=EXPIRY_NOW) else None
        case Operation.TRUNCATE:
            return table.truncate()


def apply(model: Model, mode: Mode, seed: int, index: int, op: Operation) -> None:
    """What operation ``op`` of commit ``index`` does to the model of the table."""
    rows = model.rows
    match op:
        case Operation.DELETE:
            for key in [key for key in rows if _matches(key[1], index)]:
                del rows[key]
        case Operation.UPDATE:
            for key, values in rows.items():
                if _matches(key[1], index):
                    values["a"] = _new_value(index)
        case Operation.OVERWRITE:
            _drop(model, mode.partitions[1])
            model.apply(overwrite_rows(mode, seed, index))
        case Operation.MERGE:
            threshold, cut = _merge_bounds(mode, index)
            source = merge_rows(mode, seed, index)
            for row in source:
                key = (row["p"], row["k"])
                if key in rows and row["a"] < threshold:
                    del rows[key]
                else:
                    rows[key] = {"a": row["a"], "b": row["b"]}
            matched = {(row["p"], row["k"]) for row in source}
            for key in [key for key in rows if key not in matched and key[1] >= cut]:
                del rows[key]
        case Operation.DROP:
            _drop(model, mode.partitions[1])
        case Operation.EXPIRE:
            if dt.datetime.fromisoformat(mode.partitions[0]) < EXPIRY_NOW - dt.timedelta(days=1):
                _drop(model, mode.partitions[0])
        case Operation.TRUNCATE:
            rows.clear()


def _drop(model: Model, partition: str) -> None:
    for key in [key for key in model.rows if key[0] == partition]:
        del model.rows[key]


def _residue(index: int) -> int:
    return (index // 2) % 8


def _matches(k: int, index: int) -> bool:
    return k & 7 == _residue(index)


def _predicate(index: int) -> pc.Expression:
    return pc.equal(pc.bit_wise_and(pc.field("k"), 7), _residue(index))


def _new_value(index: int) -> int:
    """The value an update sets: unique to its commit (a write's values are below base + 10,000)."""
    return index * 10_000 + 9_999


def overwrite_rows(mode: Mode, seed: int, index: int) -> list[Row]:
    """The rows an overwrite puts in the second partition: a third of the keys (fresh keys on
    an append table), with values of the commit's."""
    rng = random.Random(f"{seed}/{mode.name}/overwrite/{index}")
    base = index * 10_000 + 5_000
    keys = [base + n for n in range(20)] if mode.append else sorted(rng.sample(range(mode.keys), mode.keys // 3))
    return [{"p": mode.partitions[1], "k": k, "a": base + n, "b": -(base + n)} for n, k in enumerate(keys)]


def merge_rows(mode: Mode, seed: int, index: int) -> list[Row]:
    """A merge's source: distinct keys of both partitions, values of the commit's."""
    rng = random.Random(f"{seed}/{mode.name}/merge/{index}")
    keys = rng.sample([(p, k) for p in mode.partitions for k in range(mode.keys)], mode.keys // 2)
    base = index * 10_000
    return [{"p": p, "k": k, "a": base + n, "b": -(base + n)} for n, (p, k) in enumerate(keys)]


def _merge_bounds(mode: Mode, index: int) -> tuple[int, int]:
    """Matched source rows with a below the first are deleted, the others update; table rows no
    source row matched with k at or above the second are deleted."""
    return index * 10_000 + 8, mode.keys - 6
