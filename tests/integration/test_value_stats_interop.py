"""Value statistics between engines: pypaimon 2.1 and Java Paimon 0.9 read changelake's (every
column, ``_VALUE_STATS_COLS`` null) and skip files by them; changelake skips files by the
statistics Java Paimon 0.9 writes (every column, no ``_VALUE_STATS_COLS`` field)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from java_paimon import JavaPaimon

import changelake as cl

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
PRIMARY_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()),
                            ("score", pa.float64())])
KINDS = [
    pytest.param(SCHEMA, [], {}, id="append"),
    pytest.param(PRIMARY_SCHEMA, ["id"], {"bucket": "1", "deletion-vectors.enabled": "true"}, id="deletion-vectors"),
]


def _batch(start: int, count: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "name": [f"n{i:05d}" for i in ids],
                     "score": [None if i % 7 == 0 else float(i) for i in ids]}, schema=schema)


def _changelake_table(warehouse: str, schema: pa.Schema, keys: list[str], options: dict[str, str]) -> cl.Table:
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=keys, options=options)
    for start in range(0, 400, 100):  # four files with disjoint ids, names and scores
        table.write(_batch(start, 100, schema))
    return table


@pytest.mark.parametrize(("schema", "keys", "options"), KINDS)
def test_pypaimon_skips_files_by_changelake_stats(tmp_path: Any, pypaimon: Any, schema: pa.Schema,
                                                  keys: list[str], options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    table = _changelake_table(warehouse, schema, keys, options)
    assert sum(len(s.files) for s in table.scan().plan()) >= 3  # a compaction may have joined two
    files, rows = pypaimon.filtered(warehouse, "db.t", "score", 210.0, 220.0)
    assert files == 1
    assert sorted(rows.column("id").to_pylist()) == [i for i in range(210, 221) if i % 7]
    files, rows = pypaimon.filtered(warehouse, "db.t", "name", "n00305", "n00306")
    assert files == 1 and sorted(rows.column("id").to_pylist()) == [305, 306]
    assert pypaimon.read(warehouse, "db.t").num_rows == 400


def _java_files(java: JavaPaimon, warehouse: str, predicate: Any) -> int:
    table = java.table(warehouse, "db.t")
    builder = java.jvm.org.apache.paimon.python.InvocationUtil.getReadBuilder(table).withFilter(predicate)
    return sum(len(split.dataFiles()) for split in builder.newScan().plan().splits())


@pytest.mark.parametrize(("schema", "keys", "options"), KINDS)
def test_java_paimon_skips_files_by_changelake_stats(tmp_path: Any, java: JavaPaimon, schema: pa.Schema,
                                                     keys: list[str], options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    total = sum(len(s.files) for s in _changelake_table(warehouse, schema, keys, options).scan().plan())
    table = java.table(warehouse, "db.t")
    predicates = java.jvm.org.apache.paimon.predicate.PredicateBuilder(table.rowType())
    assert _java_files(java, warehouse, predicates.between(2, 210.0, 220.0)) == 1
    assert _java_files(java, warehouse, predicates.equal(1, java.jvm.org.apache.paimon.data.BinaryString
                                                         .fromString("n00305"))) == 1
    assert total >= 3 and _java_files(java, warehouse, predicates.isNull(2)) == total  # every file holds nulls
    assert sorted(r["id"] for r in java.read(warehouse, "db.t")) == list(range(400))


@pytest.mark.parametrize("options", [pytest.param({}, id="append"),
                                     pytest.param({"metadata.stats-mode": "full"}, id="full")])
def test_changelake_skips_files_by_java_paimon_stats(tmp_path: Any, java: JavaPaimon,
                                                     options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("id", "BIGINT"), ("name", "STRING"), ("score", "DOUBLE")],
                      primary_keys=[], options={"bucket": "-1", **options})
    for start in range(0, 400, 100):
        java.write(warehouse, "db.t", [("+I", row) for row in _batch(start, 100).to_pylist()])
    table = cl.Catalog(warehouse).get_table("db.t")
    files = table.system("files").to_pylist()
    assert len(files) == 4 and all(f["min_value_stats"] != "{id=null, name=null, score=null}" for f in files)
    scan = table.scan(filter=(pc.field("score") >= 210.0) & (pc.field("score") <= 220.0))
    assert sum(len(s.files) for s in scan.plan()) == 1
    assert sorted(scan.to_arrow().column("id").to_pylist()) == [i for i in range(210, 221) if i % 7]
    by_name = table.scan(filter=pc.field("name") == "n00305")
    assert sum(len(s.files) for s in by_name.plan()) == 1 and by_name.to_arrow().column("id").to_pylist() == [305]


def test_changelake_skips_files_by_pypaimon_stats(tmp_path: Any, pypaimon: Any) -> None:
    """pypaimon 2.1 records value statistics with ``metadata.stats-mode = full`` (every column,
    ``_VALUE_STATS_COLS`` null), none otherwise."""
    warehouse = str(tmp_path)
    pypaimon.create_table(warehouse, "db.t", SCHEMA, primary_keys=[], partition_keys=[],
                          options={"bucket": "-1", "metadata.stats-mode": "full"})
    for start in range(0, 400, 100):
        pypaimon.write(warehouse, "db.t", _batch(start, 100))
    table = cl.Catalog(warehouse).get_table("db.t")
    scan = table.scan(filter=(pc.field("score") >= 210.0) & (pc.field("score") <= 220.0))
    assert sum(len(s.files) for s in table.scan().plan()) == 4
    assert sum(len(s.files) for s in scan.plan()) == 1
    assert sorted(scan.to_arrow().column("id").to_pylist()) == [i for i in range(210, 221) if i % 7]


@pytest.mark.parametrize("dense", [False, True], ids=["every-column", "dense"])
def test_a_column_without_stats_is_read_as_unknown_by_every_engine(tmp_path: Any, java: JavaPaimon,
                                                                    pypaimon: Any, dense: bool) -> None:
    """``fields.name.stats-mode = none``: the name slots are null, with a null count of null
    (unknown), or (``metadata.stats-dense-store``, Paimon's default) only the other columns are
    recorded; no engine skips a file by name, and every engine still skips by the others. Java
    Paimon 0.9.0 reads only the every-column layout (Paimon: dense needs 0.9.1 or 1.0)."""
    warehouse = str(tmp_path)
    table = _changelake_table(warehouse, SCHEMA, [], {"fields.name.stats-mode": "none",
                                                      "metadata.stats-dense-store": str(dense).lower()})
    assert {r["null_value_counts"] for r in table.system("files").to_pylist()} == {
        "{id=0, name=null, score=15}", "{id=0, name=null, score=14}"}
    if not dense:
        predicates = java.jvm.org.apache.paimon.predicate.PredicateBuilder(java.table(warehouse, "db.t").rowType())
        name = java.jvm.org.apache.paimon.data.BinaryString.fromString("n00305")
        assert _java_files(java, warehouse, predicates.equal(1, name)) == 4
        assert _java_files(java, warehouse, predicates.between(2, 210.0, 220.0)) == 1
    files, rows = pypaimon.filtered(warehouse, "db.t", "name", "n00305", "n00305")
    assert files == 4 and rows.column("id").to_pylist() == [305]
    assert pypaimon.filtered(warehouse, "db.t", "score", 210.0, 220.0)[0] == 1
    assert sum(len(s.files) for s in table.scan(filter=pc.field("name") == "n00305").plan()) == 4
