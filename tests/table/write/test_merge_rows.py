"""``table.merge(source)`` (MERGE INTO a primary-key table, deltalake's clause style): matched
rows updated or deleted, unmatched source rows inserted, unmatched table rows deleted, the
first clause that holds deciding each row; checked against a model, with the changelog it
makes, conditions on both sides, and the errors that write nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import DataError, FilterError, OptionError, SchemaMismatchError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("qty", pa.int64()),
                    pa.field("name", pa.string())])


def make(tmp_path: Path, **options: str) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"],
                                                   options={"bucket": "2", "changelog-producer": "input", **options})
    table.write(pa.table({"id": [1, 2, 3, 4], "qty": [10, 20, 30, 40], "name": ["a", "b", "c", "d"]}, schema=SCHEMA))
    return table


def state(table: cl.Table) -> dict[int, tuple[Any, Any]]:
    return {r["id"]: (r["qty"], r["name"]) for r in table.scan().to_arrow().to_pylist()}


def test_a_merge_updates_deletes_and_inserts_by_key(tmp_path: Path) -> None:
    table = make(tmp_path)
    before = table.latest_snapshot()
    assert before is not None
    source = pa.table({"id": [2, 3, 5, 6], "qty": [1, 0, 50, 60], "name": ["B", "C", "E", "F"]})
    landed = (table.merge(source)
              .when_matched_delete(condition="source.qty = 0")
              .when_matched_update({"qty": pc.field("target.qty") + pc.field("source.qty"), "name": "merged"})
              .when_not_matched_insert(condition=pc.field("source.id") < 6)
              .when_not_matched_by_source_delete(condition="target.qty >= 40")
              .execute())
    assert landed is not None
    assert state(table) == {1: (10, "a"), 2: (21, "merged"), 5: (50, "E")}
    changes = table.changes(before.id, landed.id).to_arrow().to_pylist()
    assert sorted((c["rowkind"], c["id"], c["qty"]) for c in changes) == [
        ("+I", 5, 50), ("+U", 2, 21), ("-D", 3, 30), ("-D", 4, 40), ("-U", 2, 20)]

    # update all / insert all from the source, columns the source lacks kept (update) or null (insert)
    table.merge(pa.table({"id": [1, 7], "qty": [11, 70]})).when_matched_update().when_not_matched_insert().execute()
    assert state(table)[1] == (11, "a") and state(table)[7] == (70, None)
    assert table.merge(pa.table({"id": [99], "qty": [1]})).when_matched_delete().execute() is None


def test_bad_merges_write_nothing(tmp_path: Path) -> None:
    table = make(tmp_path)
    latest = table.latest_snapshot()
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: table.merge(pa.table({"id": [1, 1], "qty": [1, 2]})).when_matched_update().execute(),
         DataError, "more than one row"),
        (lambda: table.merge(pa.table({"qty": [1]})).when_matched_update().execute(), SchemaMismatchError, "'id'"),
        (lambda: table.merge(pa.table({"id": [1]})).when_matched_delete("source.nope = 1").execute(),
         FilterError, "nope"),
        (lambda: table.merge(pa.table({"id": [1]})).when_matched_update({"id": 5}).execute(),
         SchemaMismatchError, "primary-key column"),
        (lambda: table.merge(pa.table({"id": [1]})).when_matched_update({"qty": "many"}).execute(),
         SchemaMismatchError, "not a value of type int64"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert table.latest_snapshot() == latest
    first = cl.Catalog(str(tmp_path / "f")).create_table("db.f", SCHEMA, primary_keys=["id"],
                                                         options={"bucket": "1", "merge-engine": "first-row"})
    with pytest.raises(OptionError, match="first-row"):
        first.merge(pa.table({"id": [1]})).when_matched_delete().execute()
    log = cl.Catalog(str(tmp_path / "l")).create_table("db.l", SCHEMA)
    with pytest.raises(OptionError, match="append table"):
        log.merge(pa.table({"id": [1]})).when_not_matched_insert().execute()
