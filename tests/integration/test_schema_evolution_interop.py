"""Schema evolution across implementations: pypaimon reads a table changelake evolved (old and
new files merged on read, then compacted) as changelake does, and changelake reads a table
pypaimon evolved with ``catalog.alter_table``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake
from pypaimon_oracle import Pypaimon


def _paimon_rows(pypaimon: Pypaimon, warehouse: str, name: str) -> list[dict[str, Any]]:
    return sorted(pypaimon.read(warehouse, name).to_pylist(), key=lambda r: r["id"])


def _ours(table: changelake.Table) -> list[dict[str, Any]]:
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def test_pypaimon_reads_a_table_changelake_evolved(tmp_path: Path, pypaimon: Pypaimon) -> None:
    schema = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.string()), ("c", pa.float32())])
    table = changelake.Catalog(str(tmp_path)).create_table(
        "db.t", schema, primary_keys=["id"], options={"bucket": "2", "write-only": "true"})
    table.write(pa.table({"id": [1, 2, 3, 4], "a": pa.array([1, 2, 3, 4], pa.int32()), "b": ["1", "2", "3", "4"],
                          "c": pa.array([0.5, 1.5, 2.5, 3.5], pa.float32())}))
    with table.update_schema() as u:
        u.add_column("e", pa.string(), after="id")
        u.drop_column("b")
        u.rename_column("c", "cc")
        u.update_column("a", pa.int64())
    table.write(pa.table({"id": [2, 5], "e": ["e2", "e5"], "a": [2**40, 5], "cc": pa.array([9.5, 5.5], pa.float32())}))
    assert {f.schema_id for s in table.scan().plan() for f in s.files} == {0, 1}
    expected = _ours(table)
    assert expected[1] == {"id": 2, "e": "e2", "a": 2**40, "cc": 9.5}
    assert expected[0] == {"id": 1, "e": None, "a": 1, "cc": 0.5}
    assert _paimon_rows(pypaimon, str(tmp_path), "db.t") == expected
    table.compact(full=True)
    assert _paimon_rows(pypaimon, str(tmp_path), "db.t") == expected == _ours(table)
    # time travel reads snapshot 1 in its own schema, in both
    table.create_tag("first", 1)
    for travel, options in (({"snapshot_id": 1}, {"scan.snapshot-id": "1"}), ({"tag": "first"},
                                                                              {"scan.tag-name": "first"})):
        old = sorted(table.scan(**travel).to_arrow().to_pylist(), key=lambda r: r["id"])
        assert list(old[0]) == ["id", "a", "b", "c"]
        assert sorted(pypaimon.read(str(tmp_path), "db.t", options).to_pylist(), key=lambda r: r["id"]) == old


def test_changelake_reads_a_table_pypaimon_evolved(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    first = pa.schema([pa.field("id", pa.int64(), nullable=False), ("a", pa.int32()), ("b", pa.string()),
                       ("c", pa.float32())])
    pypaimon.create_table(warehouse, "db.t", first, primary_keys=["id"], options={"bucket": "1"})
    pypaimon.write(warehouse, "db.t",
                   pa.Table.from_pylist([{"id": i, "a": i, "b": str(i), "c": i + 0.5} for i in range(4)], schema=first))
    pypaimon.alter_table(warehouse, "db.t", [
        ("add_column", "e", "STRING"),
        ("drop_column", "b"),
        ("rename_column", "c", "cc"),
        ("update_column_type", "a", "BIGINT"),
    ])
    second = pa.schema([pa.field("id", pa.int64(), nullable=False), ("a", pa.int64()), ("cc", pa.float32()),
                        ("e", pa.string())])
    pypaimon.write(warehouse, "db.t",
                   pa.Table.from_pylist([{"id": 1, "a": 2**40, "cc": 7.5, "e": "e1"}], schema=second))
    table = changelake.Catalog(warehouse).get_table("db.t")
    assert table.schema.names == ["id", "a", "cc", "e"]
    expected = _paimon_rows(pypaimon, warehouse, "db.t")
    assert expected[1] == {"id": 1, "a": 2**40, "cc": 7.5, "e": "e1"}
    assert expected[0] == {"id": 0, "a": 0, "cc": 0.5, "e": None}
    assert _ours(table) == expected
    # changelake writes on top and compacts the files of both schemas together
    table.write(pa.table({"id": [2], "a": [20], "cc": pa.array([1.0], pa.float32()), "e": ["e2"]}))
    table.compact(full=True)
    assert _ours(table) == _paimon_rows(pypaimon, warehouse, "db.t")
    assert [r for r in _ours(table) if r["id"] == 2] == [{"id": 2, "a": 20, "cc": 1.0, "e": "e2"}]


def test_pypaimon_merges_by_the_options_a_changelake_rename_rewrote(tmp_path: Path, pypaimon: Pypaimon) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("total", pa.int64()), ("ts", pa.int64()),
                        ("name", pa.string())])
    table = changelake.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "aggregation", "sequence.field": "ts",
        "fields.total.aggregate-function": "sum", "fields.name.aggregate-function": "last_non_null_value"})
    table.write(pa.table({"id": [1, 2], "total": [10, 20], "ts": [5, 5], "name": ["a", "b"]}, schema=schema))
    with table.update_schema() as u:
        u.rename_column("total", "amount")
        u.rename_column("ts", "version")
    table.write(pa.table({"id": [1, 2], "amount": [1, 2], "version": [6, 4], "name": ["a2", "b2"]}))
    expected = [{"id": 1, "amount": 11, "version": 6, "name": "a2"}, {"id": 2, "amount": 22, "version": 5, "name": "b"}]
    assert _ours(table) == expected
    assert _paimon_rows(pypaimon, str(tmp_path), "db.t") == expected


def test_a_primary_key_renamed_by_either_is_merged_by_both(tmp_path: Path, pypaimon: Pypaimon) -> None:
    """Files written before a primary-key rename keep ``_KEY_id``; changelake compacts them with
    later ones after pypaimon renamed the key, and pypaimon reads what changelake renamed and
    compacted."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    pypaimon.create_table(warehouse, "db.theirs", schema, primary_keys=["id"], options={"bucket": "1"})
    pypaimon.write(warehouse, "db.theirs", pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    pypaimon.alter_table(warehouse, "db.theirs", [("rename_column", "id", "key")])
    ours = changelake.Catalog(warehouse).create_table("db.ours", schema, primary_keys=["id"],
                                                      options={"bucket": "1"})
    ours.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    with ours.update_schema() as u:
        u.rename_column("id", "key")
    for name in ("db.theirs", "db.ours"):
        table = changelake.Catalog(warehouse).get_table(name)
        assert table.primary_keys == ["key"]
        table.write(pa.table({"key": [2, 3], "v": ["b2", "c"]}))
        table.compact(full=True)
        expected = [{"key": 1, "v": "a"}, {"key": 2, "v": "b2"}, {"key": 3, "v": "c"}]
        assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["key"]) == expected
        assert sorted(pypaimon.read(warehouse, name).to_pylist(), key=lambda r: r["key"]) == expected
