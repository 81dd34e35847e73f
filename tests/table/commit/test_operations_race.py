"""Table operations racing other writers and compaction, interleaved by hand: an operation
plans (reads the table, writes its files), another writer's APPEND or a COMPACT lands, then the
operation lands, under Paimon's conflict rules (``FileStoreCommitImpl``): an OVERWRITE replaces
what its partitions hold when it lands (so an APPEND into them that landed first is replaced:
the later commit wins) and keeps every other partition; deletes and updates of primary-key
tables are writes (the later commit wins per key); a commit that deletes files another commit
removed first fails with CommitConflictError and changes nothing. No row that landed after an
operation is lost."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import CommitConflictError
from changelake.table.commit import overwrite
from changelake.table.lsm import compactor
from changelake.table.read import live_files
from changelake.table.write import landing, row_level

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])
Row = tuple[str, int, int]


def rows(*items: Row) -> pa.Table:
    return pa.table({"dt": [i[0] for i in items], "id": [i[1] for i in items], "v": [i[2] for i in items]},
                    schema=SCHEMA)


def many(dt_value: str, ids: range, v: int) -> list[Row]:
    return [(dt_value, i, v) for i in ids]


def state(table: cl.Table) -> list[Row]:
    return sorted((r["dt"], r["id"], r["v"]) for r in table.scan().to_arrow().to_pylist())


def make(tmp_path: Path, *, primary_key: bool = True, **options: str) -> tuple[cl.Table, cl.Table]:
    """A table, and a second Table object on it: another writer."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"] if primary_key else None, partition_keys=["dt"],
        options={"bucket": "2", **({} if primary_key else {"bucket-key": "id"}), **options})
    return table, cl.open_table(table.location)


def between(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, meanwhile: Callable[[], object]) -> None:
    """Run ``meanwhile`` each time ``module.name`` is called, before it runs: between an
    operation's planning and its commit."""
    real = getattr(module, name)

    def racing(*args: Any, **kwargs: Any) -> Any:
        meanwhile()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, racing)


def after(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, meanwhile: Callable[[], object]) -> None:
    """Run ``meanwhile`` each time ``module.name`` returned: after an operation read the table."""
    real = getattr(module, name)

    def racing(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        meanwhile()
        return result

    monkeypatch.setattr(module, name, racing)


def unreferenced_data_files(table: cl.Table) -> set[str]:
    """Data files on disk that no snapshot names (what a failed operation must not leave)."""
    ctx = table.context
    named = {f"{ctx.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}"
             for snap in table.snapshots() for e in live_files.live_entries(ctx, snap)}
    on_disk = {os.path.join(d, n) for d, _, names in os.walk(table.location) for n in names if n.endswith(".parquet")}
    return on_disk - named


# -- primary-key delete and update: writes, the later commit wins per key -------------------


def test_a_delete_and_an_append_of_the_same_keys_the_later_commit_wins(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    table, other = make(tmp_path)
    table.write(rows(*many("a", range(10), 0)))
    # The APPEND lands after the delete read ids 0..4: the delete's -D rows land later and win;
    # id 10, new, matches too but was not read: it stays, as in Paimon.
    after(monkeypatch, row_level, "deletions", lambda: other.write(rows(*many("a", range(11), 1))))
    assert table.delete("id < 5 OR id >= 10") is not None
    assert state(table) == [*many("a", range(5, 11), 1)]
    monkeypatch.undo()
    # A writer that wrote before the delete and commits after it: its rows land later and win.
    with other.writer() as streaming:
        streaming.write(rows(*many("a", range(3), 2)))
        table.delete("id < 8")
        assert streaming.commit(1)
    assert state(table) == [*many("a", range(3), 2), ("a", 8, 1), ("a", 9, 1), ("a", 10, 1)]


def test_an_update_and_an_append_of_the_same_keys_the_later_commit_wins(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    table, other = make(tmp_path)
    table.write(rows(*many("a", range(10), 0)))
    after(monkeypatch, row_level, "updates", lambda: other.write(rows(*many("a", range(10), 1))))
    assert table.update("id < 5", set={"v": 100}) is not None
    assert state(table) == [*many("a", range(5), 100), *many("a", range(5, 10), 1)]
    monkeypatch.undo()
    with other.writer() as streaming:
        streaming.write(rows(*many("a", range(2), 2)))
        table.update("id < 5", set={"v": 200})
        assert streaming.commit(1)
    assert state(table) == [*many("a", range(2), 2), *many("a", range(2, 5), 200), *many("a", range(5, 10), 1)]


# -- append tables: a delete rewrites files, a rewrite of the same files first is a conflict ---


def test_an_append_delete_racing_a_compaction_of_its_files_fails_and_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, other = make(tmp_path, primary_key=False, **{"compaction.min.file-num": "2"})
    for v in range(3):
        table.write(rows(*many("a", range(v * 10, v * 10 + 10), v)))
    between(monkeypatch, overwrite, "commit_rewrite", lambda: other.compact(full=True))
    with pytest.raises(CommitConflictError, match="rewritten by another commit"):
        table.delete("id < 5")
    compacted = table.latest_snapshot()
    assert compacted is not None and compacted.commit_kind is cl.CommitKind.COMPACT
    assert state(table) == sorted(many("a", range(10), 0) + many("a", range(10, 20), 1) + many("a", range(20, 30), 2))
    assert not unreferenced_data_files(table)  # the delete's rewritten files are gone
    monkeypatch.undo()
    assert table.delete("id < 5") is not None  # run again, it lands
    assert [r[1] for r in state(table)] == list(range(5, 30))


def test_an_append_delete_racing_an_append_keeps_the_new_rows(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    table, other = make(tmp_path, primary_key=False)
    table.write(rows(*many("a", range(10), 0)))
    # the new rows match the predicate too: they were not read, so they stay (the later commit wins)
    between(monkeypatch, overwrite, "commit_rewrite", lambda: other.write(rows(*many("a", range(3), 1))))
    assert table.delete("id < 5") is not None
    assert state(table) == sorted([*many("a", range(3), 1), *many("a", range(5, 10), 0)])


# -- overwrite and truncate: what the partitions hold when they land goes ---------------------


@pytest.mark.parametrize("primary_key", [True, False], ids=["primary key", "append"])
def test_an_overwrite_racing_appends_replaces_its_partition_and_keeps_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, primary_key: bool) -> None:
    table, other = make(tmp_path, primary_key=primary_key)
    table.write(rows(*many("a", range(5), 0), *many("b", range(5), 0)))
    between(monkeypatch, overwrite, "commit_overwrite",
            lambda: other.write(rows(*many("a", range(20, 22), 1), *many("b", range(20, 22), 1))))
    landed = table.overwrite(rows(*many("a", range(100, 102), 2)), partitions={"dt": "a"})
    assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
    # the APPEND into "a" landed before the overwrite, which replaces it; "b" keeps it
    assert state(table) == sorted([*many("a", range(100, 102), 2), *many("b", range(5), 0),
                                   *many("b", range(20, 22), 1)])
    monkeypatch.undo()
    # A writer that wrote into "a" before the overwrite and commits after it: its rows stay,
    # and win over the overwrite's row of the same key (numbered from 0 as the writer's were).
    with other.writer() as streaming:
        streaming.write(rows(("a", 7, 3), ("a", 200, 3)))
        table.overwrite(rows(("a", 200, 4)))  # dynamic: "a"
        assert streaming.commit(1)
    overwritten = [] if primary_key else [("a", 200, 4)]
    assert [r for r in state(table) if r[0] == "a"] == sorted([("a", 7, 3), ("a", 200, 3), *overwritten])


def test_a_whole_table_overwrite_and_a_truncate_replace_partitions_made_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paimon overwrites the whole table (and truncates it) by a filter of every partition at
    landing: a partition an APPEND made after the operation planned goes too."""
    table, other = make(tmp_path, **{"dynamic-partition-overwrite": "false"})
    table.write(rows(*many("a", range(5), 0)))
    between(monkeypatch, overwrite, "commit_overwrite", lambda: other.write(rows(*many("c", range(3), 1))))
    assert table.overwrite(rows(("b", 1, 2))) is not None
    assert state(table) == [("b", 1, 2)]
    assert table.truncate() is not None
    assert state(table) == []


def test_a_partial_static_overwrite_replaces_a_matching_partition_made_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("hh", pa.string(), nullable=False),
                        pa.field("id", pa.int64(), nullable=False)])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["dt", "hh", "id"],
                                                   partition_keys=["dt", "hh"], options={"bucket": "1"})
    other = cl.open_table(table.location)

    def hours(*items: tuple[str, str, int]) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(schema.names, i, strict=True)) for i in items], schema=schema)

    table.write(hours(("a", "0", 1), ("b", "0", 1)))
    # "a"/"1" is made after the overwrite of every hour of "a" planned: it matches, so it goes
    between(monkeypatch, overwrite, "commit_overwrite", lambda: other.write(hours(("a", "1", 2), ("b", "1", 2))))
    assert table.overwrite(hours(("a", "2", 3)), partitions={"dt": "a"}) is not None
    got = sorted((r["dt"], r["hh"], r["id"]) for r in table.scan().to_arrow().to_pylist())
    assert got == [("a", "2", 3), ("b", "0", 1), ("b", "1", 2)]


def test_compactions_racing_an_overwrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction that lands first is replaced with the rest of the partition; one that lands
    after the overwrite removed its input files fails and changes nothing."""
    table, other = make(tmp_path, **{"num-sorted-run.compaction-trigger": "2"})
    for v in range(3):
        table.write(rows(*many("a", range(5), v), *many("b", range(5), v)))
    between(monkeypatch, overwrite, "commit_overwrite", lambda: other.compact(full=True))
    assert table.overwrite(rows(("a", 9, 9))) is not None
    assert state(table) == [("a", 9, 9), *many("b", range(5), 2)]
    monkeypatch.undo()
    table.write(rows(*many("a", range(3), 5)))
    after(monkeypatch, compactor, "compact_table", lambda: other.truncate())
    with pytest.raises(CommitConflictError, match="removed by a concurrent commit"):
        table.compact(full=True)
    latest = table.latest_snapshot()
    assert latest is not None and latest.commit_kind is cl.CommitKind.OVERWRITE
    assert state(table) == []
    assert not unreferenced_data_files(table)


# Writers whose commits move level 0 up by looking up the levels below it.
LOOKUPS = {"deletion vectors": {"deletion-vectors.enabled": "true"},
           "lookup changelog": {"changelog-producer": "lookup"}, "first-row": {"merge-engine": "first-row"}}


@pytest.mark.parametrize("operation", ["overwrite", "truncate"])
@pytest.mark.parametrize("kind", list(LOOKUPS))
def test_a_writers_lookup_compaction_racing_an_overwrite_is_redone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, operation: str) -> None:
    """A writer's compaction looked up its bucket, then an overwrite (or truncate) landed, then
    the writer commits: the compaction is void (it looked up files that are gone and missed the
    new ones) and level 0 goes up from the table as it is now. Without that, a key was on two
    rows (deletion vectors) or a first-row key was dropped as a duplicate of a row that is gone."""
    table, other = make(tmp_path, bucket="1", **LOOKUPS[kind])
    replaced = many("a", range(0, 10, 2), 9) if operation == "overwrite" else []
    with other.writer(commit_user="streaming") as streaming:
        for identifier, ids in ((1, range(5)), (2, range(5, 10))):
            streaming.write(rows(*many("a", ids, 0)))
            streaming.commit(identifier)
        streaming.write(rows(*many("a", range(3, 8), 1)))
        between(monkeypatch, landing, "land",
                lambda: table.overwrite(rows(*replaced)) if replaced else table.truncate())
        assert streaming.commit(3)
    written = many("a", range(3, 8), 1)
    first, then = (written, replaced) if kind == "first-row" else (replaced, written)
    expected = {r[1]: r for r in first} | {r[1]: r for r in then}  # the row that wins each key
    assert state(table) == sorted(expected.values())


# -- partition expiration: the expired partitions' files at landing go ------------------------


def test_partition_expiration_racing_a_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table, other = make(tmp_path, **{"partition.expiration-time": "1 d", "num-sorted-run.compaction-trigger": "2"})
    now = dt.datetime(2999, 1, 2, 12)  # "2999-01-01" is expired then, "2999-01-02" is not
    old, new = "2999-01-01", "2999-01-02"
    table.write(rows(*many(old, range(5), 0), *many(new, range(5), 0)))
    # An APPEND into both partitions between the expiry's look and its commit: the expired
    # partition goes whole, the other keeps the new rows.
    between(monkeypatch, overwrite, "commit_overwrite",
            lambda: other.write(rows(*many(old, range(10, 12), 1), *many(new, range(10, 12), 1))))
    assert table.expire_partitions(now=now) == [{"dt": old}]
    assert state(table) == sorted([*many(new, range(5), 0), *many(new, range(10, 12), 1)])
    monkeypatch.undo()
    # A long-lived writer of the expired partition: its rows written before the expiry and
    # committed after it land; its next commits, whose view of the bucket the expiry made
    # stale, land too, and no row is lost.
    with other.writer(commit_user="streaming") as streaming:
        streaming.write(rows(*many(old, range(3), 2)))
        assert streaming.commit(1)
        streaming.write(rows(*many(old, range(3, 6), 3)))
        assert table.expire_partitions(now=now) == [{"dt": old}]
        assert streaming.commit(2)
        assert [r for r in state(table) if r[0] == old] == many(old, range(3, 6), 3)
        for identifier in (3, 4):
            streaming.write(rows(*many(old, range(identifier * 10, identifier * 10 + 2), identifier)))
            assert streaming.commit(identifier)
    assert [r for r in state(table) if r[0] == old] == sorted(
        [*many(old, range(3, 6), 3), *many(old, range(30, 32), 3), *many(old, range(40, 42), 4)])
