"""``table.delete(predicate)``, ``table.update(predicate, set=...)`` and deletes that carry only
the key, checked against a model on every bucket mode, under each merge engine's rules, with
the changelog they make and the errors that write nothing; on append tables, the files holding
matching rows rewritten in one OVERWRITE snapshot, row order kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import CommitConflictError, FilterError, OptionError, SchemaMismatchError
from changelake.table.commit import overwrite
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.int64()), pa.field("name", pa.string(), nullable=False)])
BUCKETS = {
    "fixed": {"bucket": "2"},
    "fixed, deletion vectors": {"bucket": "2", "deletion-vectors.enabled": "true"},
    "dynamic": {"bucket": "-1", "dynamic-bucket.target-row-num": "4"},
    "postpone": {"bucket": "-2", "postpone.batch-write-fixed-bucket": "true"},
}
Model = dict[tuple[str, int], tuple[Any, str]]


def make(tmp_path: Path, name: str = "t", **options: str) -> tuple[cl.Table, Model]:
    table = cl.Catalog(str(tmp_path)).create_table(f"db.{name}", SCHEMA, primary_keys=["dt", "id"],
                                                   partition_keys=["dt"], options=options)
    model: Model = {}
    for start in (0, 6):
        ids = list(range(start, start + 10))
        table.write(pa.table({"dt": [f"d{i % 2}" for i in ids], "id": ids, "v": ids,
                              "name": [f"n{i}" for i in ids]}, schema=SCHEMA))
        model |= {(f"d{i % 2}", i): (i, f"n{i}") for i in ids}
    return table, model


def state(table: cl.Table) -> Model:
    return {(r["dt"], r["id"]): (r["v"], r["name"]) for r in table.scan().to_arrow().to_pylist()}


@pytest.mark.parametrize("buckets", list(BUCKETS))
def test_delete_and_update_by_predicate(tmp_path: Path, buckets: str) -> None:
    table, model = make(tmp_path, **BUCKETS[buckets], **{"changelog-producer": "input"})
    assert state(table) == model
    before = table.latest_snapshot()
    assert before is not None

    deleted = table.delete("v > 11 AND dt = 'd1'")
    assert deleted is not None
    model = {k: r for k, r in model.items() if not (r[0] > 11 and k[0] == "d1")}
    assert state(table) == model
    # the changelog holds each deleted row, whole, once
    changes = table.changes(before.id, table.latest_snapshot().id).to_arrow().to_pylist()  # type: ignore[union-attr]
    assert sorted((c["rowkind"], c["id"], c["v"]) for c in changes) == [("-D", i, i) for i in (13, 15)]

    middle = table.latest_snapshot()
    assert middle is not None
    assert table.update(pc.field("id") < 3, set={"name": "low", "v": pc.field("v") * 10}) is not None
    model |= {k: (r[0] * 10, "low") for k, r in model.items() if k[1] < 3}
    assert state(table) == model
    changes = table.changes(middle.id, table.latest_snapshot().id).to_arrow().to_pylist()  # type: ignore[union-attr]
    assert sorted((c["rowkind"], c["id"], c["v"], c["name"]) for c in changes) == sorted(
        [("-U", i, i, f"n{i}") for i in range(3)] + [("+U", i, i * 10, "low") for i in range(3)])
    assert table.update("v = 12345", set={"v": 1}) is None and table.delete("id > 1000") is None


def test_merge_engines_take_what_paimon_lets_them(tmp_path: Path) -> None:
    partial, model = make(tmp_path, "partial", bucket="1", **{"merge-engine": "partial-update"})
    with pytest.raises(OptionError, match="remove-record-on-delete") as info:
        partial.delete("id = 1")
    assert info.value.option == "partial-update.remove-record-on-delete"
    partial.update("id = 1", set={"name": "one"})  # only a +U: the other columns keep their values
    assert state(partial)[("d1", 1)] == (1, "one")

    removing, model = make(tmp_path, "removing", bucket="1",
                           **{"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"})
    removing.delete("id = 1")
    assert ("d1", 1) not in state(removing) and len(state(removing)) == len(model) - 1

    aggregated, _ = make(tmp_path, "agg", bucket="1", **{"merge-engine": "aggregation",
                                                         "fields.v.aggregate-function": "sum",
                                                         "aggregation.remove-record-on-delete": "true"})
    aggregated.delete("id = 2")
    assert ("d0", 2) not in state(aggregated)
    with pytest.raises(OptionError, match="takes no update"):
        aggregated.update("id = 3", set={"v": 1})
    first, _ = make(tmp_path, "first", bucket="1", **{"merge-engine": "first-row"})
    for operation in (lambda: first.delete("id = 1"), lambda: first.update("id = 1", set={"v": 0})):
        with pytest.raises(OptionError, match="first-row"):
            operation()


def test_bad_deletes_and_updates_write_nothing(tmp_path: Path) -> None:
    table, _ = make(tmp_path, bucket="2")
    latest = table.latest_snapshot()
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: table.delete("nope = 1"), FilterError, "nope"),
        (lambda: table.delete(None), OptionError, "truncate"),
        (lambda: table.update("id = 1", set={"id": 5}), SchemaMismatchError, "primary-key column"),
        (lambda: table.update("id = 1", set={"dt": "d9"}), SchemaMismatchError, "primary-key column"),
        (lambda: table.update("id = 1", set={"nope": 5}), SchemaMismatchError, "not a column"),
        (lambda: table.update("id = 1", set={"v": "many"}), SchemaMismatchError, "not a value of type int64"),
        (lambda: table.update("id = 1", set={"name": None}), Exception, "null"),
        (lambda: table.update("id = 1", set={}), SchemaMismatchError, "at least one column"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert table.latest_snapshot() == latest


def test_a_delete_may_carry_only_the_key(tmp_path: Path) -> None:
    table, model = make(tmp_path, bucket="2", **{"changelog-producer": "lookup"})
    table.write(pa.table({"rowkind": ["-D", "-D"], "dt": ["d0", "d1"], "id": [4, 7]}))
    del model[("d0", 4)], model[("d1", 7)]
    assert state(table) == model
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['v', 'name'\]"):
        table.write(pa.table({"rowkind": ["-D", "+I"], "dt": ["d0", "d0"], "id": [2, 3]}))
    with pytest.raises(SchemaMismatchError, match="all but the primary key"):
        table.write(pa.table({"rowkind": ["-D"], "id": [2]}))
    assert state(table) == model


@pytest.mark.parametrize("options", [{"bucket": "-1"}, {"bucket": "2", "bucket-key": "id"}])
def test_append_tables_rewrite_the_files_that_hold_matching_rows(tmp_path: Path, options: dict[str, str]) -> None:
    log = cl.Catalog(str(tmp_path)).create_table("db.log", SCHEMA, partition_keys=["dt"], options=options)
    for start in (0, 10, 20):
        ids = list(range(start, start + 10))
        log.write(pa.table({"dt": [f"d{i % 2}" for i in ids], "id": ids, "v": ids, "name": [f"n{i}" for i in ids]},
                           schema=SCHEMA))
    log.write(pa.table({"dt": ["d0"], "id": [0], "v": [5], "name": ["again"]}, schema=SCHEMA))  # a duplicate row

    def rows() -> list[tuple[str, int, Any, str]]:
        return [(r["dt"], r["id"], r["v"], r["name"]) for r in log.scan().to_arrow().to_pylist()]

    before = rows()
    untouched = {e.file.file_name for e in live_entries(log) if "d1" in log.context.describe_partition(e.partition)}
    deleted = log.delete("dt = 'd0' AND v >= 10")
    assert deleted is not None and deleted.commit_kind is cl.CommitKind.OVERWRITE
    assert rows() == [r for r in before if not (r[0] == "d0" and r[2] >= 10)]  # the order kept too
    assert untouched <= {e.file.file_name for e in live_entries(log)}  # files with no match stay as they are

    updated = log.update("id = 0", set={"name": "zero", "v": pc.field("v") + 1})
    assert updated is not None and updated.commit_kind is cl.CommitKind.OVERWRITE
    assert [r for r in rows() if r[1] == 0] == [("d0", 0, 1, "zero"), ("d0", 0, 6, "zero")]
    assert log.delete("id > 1000") is None and log.update("id > 1000", set={"v": 1}) is None
    assert log.delete("id >= 0") is not None and rows() == []
    # appends go on after the rewrites, numbered after them
    log.write(pa.table({"dt": ["d1"], "id": [7], "v": [7], "name": ["late"]}, schema=SCHEMA))
    assert rows() == [("d1", 7, 7, "late")]


def live_entries(table: cl.Table) -> list[Any]:
    snapshot = table.latest_snapshot()
    return [] if snapshot is None else list(live_files.live_entries(table.context, snapshot))


def test_an_append_rewrite_that_lost_its_files_to_a_compaction_is_void(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log = cl.Catalog(str(tmp_path)).create_table("db.log", SCHEMA, options={"bucket": "1", "bucket-key": "id"})
    for i in range(3):
        log.write(pa.table({"dt": ["d0", "d0"], "id": [i, i + 10], "v": [i, i], "name": ["a", "b"]}, schema=SCHEMA))
    real = overwrite.commit_rewrite

    def compacted_first(*args: Any, **kwargs: Any) -> Any:
        log.compact(full=True)  # another process joined the files the rewrite read
        return real(*args, **kwargs)

    monkeypatch.setattr(overwrite, "commit_rewrite", compacted_first)
    files_before = {p.name for p in Path(log.location).rglob("data-*")}
    with pytest.raises(CommitConflictError, match="rewritten by another commit"):
        log.delete("id = 1")
    latest = log.latest_snapshot()
    assert latest is not None and latest.commit_kind is cl.CommitKind.COMPACT
    assert sorted(r["id"] for r in log.scan().to_arrow().to_pylist()) == [0, 1, 2, 10, 11, 12]
    # the void rewrite's file (row 11 alone) is gone: only the compaction's new file was added
    assert len({p.name for p in Path(log.location).rglob("data-*")} - files_before) == 1
