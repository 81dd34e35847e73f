"""File indexes between engines: Java Paimon 0.9 skips files by changelake's bloom-filter and
bitmap indexes (embedded ones when it plans, ``.index`` files when it reads), changelake skips
files by the indexes Java Paimon writes, and pypaimon 2.1 reads tables with indexes (it keeps
every file: it has no file-index reader)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from java_paimon import JavaPaimon

import changelake as cl

SCHEMA = pa.schema([("id", pa.int32()), ("name", pa.string()), ("score", pa.float64()), ("big", pa.int64())])
FILES = 4
ROWS = 100
SMALL_BLOOM = {"file-index.bloom-filter.id.items": "100", "file-index.bloom-filter.name.items": "100",
               "file-index.bloom-filter.id.fpp": "0.01", "file-index.bloom-filter.name.fpp": "0.01"}
INDEXES = [
    pytest.param({"file-index.bloom-filter.columns": "id,name", **SMALL_BLOOM}, True, id="bloom-embedded"),
    pytest.param({"file-index.bloom-filter.columns": "id,name", "file-index.in-manifest-threshold": "1 b"}, False,
                 id="bloom-file"),
    pytest.param({"file-index.bitmap.columns": "id,name"}, False, id="bitmap-file"),
]


def _batch(file: int) -> pa.Table:
    """File ``file``'s rows: every FILES-th id from ``file``, so every file's ids and names span
    nearly the whole range and value statistics skip none."""
    ids = list(range(file, FILES * ROWS, FILES))
    # some names null: the bitmap index's null rows come first (two or more: a bitmap of them)
    names = [None if i % 50 == 7 else f"n{i:05d}" for i in ids]
    return pa.table({"id": ids, "name": names, "score": [i / 8 for i in ids],
                     "big": [i * 3_000_000_019 for i in ids]}, schema=SCHEMA)


def _changelake_table(warehouse: str, options: dict[str, str]) -> cl.Table:
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, options={"bucket": "-1", **options})
    for file in range(FILES):
        table.write(_batch(file))
    return table


def _java_read(java: JavaPaimon, warehouse: str, predicate: Any) -> tuple[int, list[int]]:
    """The files Java Paimon plans for ``predicate`` and the ids of the rows it reads (its readers
    do not filter rows: every row of a file read comes back). Manifests are read one at a time:
    Java 0.9's planner threads share an unsynchronized map while testing file indexes, and
    fail at random with a ConcurrentModificationException when they read several at once."""
    table = java.table(warehouse, "db.t", {"scan.manifest.parallelism": "1"})
    builder = java.jvm.org.apache.paimon.python.InvocationUtil.getReadBuilder(table).withFilter(predicate)
    splits = builder.newScan().plan().splits()
    rows = java._rows(table, splits, builder.newRead())
    return sum(len(split.dataFiles()) for split in splits), sorted(row["id"] for _, row in rows)


@pytest.mark.parametrize(("options", "embedded"), INDEXES)
def test_java_paimon_skips_files_by_changelake_indexes(tmp_path: Any, java: JavaPaimon, options: dict[str, str],
                                                       embedded: bool) -> None:
    warehouse = str(tmp_path)
    table = _changelake_table(warehouse, options)
    files = table.system("files").to_pylist()
    assert len(files) == FILES
    predicates = java.jvm.org.apache.paimon.predicate.PredicateBuilder(java.table(warehouse, "db.t").rowType())
    by_id = predicates.equal(0, 202)  # in file 2
    by_name = predicates.equal(1, java.jvm.org.apache.paimon.data.BinaryString.fromString("n00203"))  # file 3
    # Java 0.9 skips by an embedded index when it plans, by an index file when it reads
    planned, ids = _java_read(java, warehouse, by_id)
    assert planned == (1 if embedded else FILES) and ids == _batch(2).column("id").to_pylist()
    planned, ids = _java_read(java, warehouse, by_name)
    assert planned == (1 if embedded else FILES) and ids == _batch(3).column("id").to_pylist()
    absent = predicates.equal(0, 100_000)
    assert _java_read(java, warehouse, absent)[1] == []
    assert sorted(r["id"] for r in java.read(warehouse, "db.t")) == list(range(FILES * ROWS))
    # and changelake skips by the same indexes
    scan = table.scan(filter=pc.field("id") == 202)
    assert sum(len(s.files) for s in scan.plan()) == 1 and scan.to_arrow().column("id").to_pylist() == [202]


@pytest.mark.parametrize("options", [pytest.param({"file-index.bloom-filter.columns": "id,name,score,big"},
                                                  id="bloom"),
                                     pytest.param({"file-index.bitmap.columns": "id,name,big"}, id="bitmap")])
def test_changelake_skips_files_by_java_paimon_indexes(tmp_path: Any, java: JavaPaimon,
                                                       options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("id", "INT"), ("name", "STRING"), ("score", "DOUBLE"), ("big", "BIGINT")],
                      primary_keys=[], options={"bucket": "-1", **options})
    for file in range(FILES):
        java.write(warehouse, "db.t", [("+I", row) for row in _batch(file).to_pylist()])
    table = cl.Catalog(warehouse).get_table("db.t")
    entries = table.system("files").to_pylist()
    assert len(entries) == FILES
    assert sum(len(s.files) for s in table.scan().plan()) == FILES
    # each filter's values lie in one file (a row found in the one file planned: the right one)
    for where, ids in ((pc.field("id") == 202, [202]), (pc.field("name") == "n00203", [203]),
                       (pc.field("id").isin([5, 9]), [5, 9]), ("name IN ('n00006', 'n00398')", [6, 398]),
                       (pc.field("big") == 7 * 3_000_000_019, [7]),
                       *([(pc.field("score") == 11 / 8, [11])] if "score" in str(options) else [])):
        scan = table.scan(filter=where)
        assert sum(len(s.files) for s in scan.plan()) == 1
        assert sorted(scan.to_arrow().column("id").to_pylist()) == ids
    scan = table.scan(filter=pc.field("name").isin(["n00004", "n00005"]))
    assert sum(len(s.files) for s in scan.plan()) == 2
    assert sorted(scan.to_arrow().column("id").to_pylist()) == [4, 5]
    assert sum(len(s.files) for s in table.scan(filter=pc.field("id") == 100_000).plan()) == 0


@pytest.mark.parametrize(("options", "embedded"), INDEXES)
def test_pypaimon_reads_tables_with_changelake_indexes(tmp_path: Any, pypaimon: Any, options: dict[str, str],
                                                       embedded: bool) -> None:
    warehouse = str(tmp_path)
    _changelake_table(warehouse, options)
    rows = pypaimon.read(warehouse, "db.t")
    assert sorted(rows.column("id").to_pylist()) == list(range(FILES * ROWS))
    files, rows = pypaimon.filtered(warehouse, "db.t", "id", 202, 202)
    assert files == FILES and rows.column("id").to_pylist() == [202]  # pypaimon does not read file indexes


@pytest.mark.parametrize("options", [pytest.param({"deletion-vectors.enabled": "true"}, id="deletion-vectors"),
                                     pytest.param({}, id="merge-on-read")])
def test_java_paimon_reads_primary_key_tables_with_changelake_indexes(tmp_path: Any, java: JavaPaimon,
                                                                      options: dict[str, str]) -> None:
    """Java Paimon 0.9 writes no index for primary-key files and reads past changelake's (their
    extra files and embedded bytes); after its own compaction and expiry the table still reads."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), *list(SCHEMA)[1:]])
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=["id"], options={
        "bucket": "2", "file-index.bloom-filter.columns": "name", "file-index.bitmap.columns": "big", **options})
    for file in range(FILES):
        table.write(_batch(file).cast(schema))
    table.update("id = 6", set={"name": "six"})
    scan = table.scan(filter=pc.field("name") == "n00202")
    assert scan.to_arrow().column("id").to_pylist() == [202]
    rows = java.read(warehouse, "db.t")
    assert sorted(r["id"] for r in rows) == list(range(FILES * ROWS))
    assert next(r["name"] for r in rows if r["id"] == 6) == "six"
    java.write(warehouse, "db.t", [("+I", {**_batch(0).to_pylist()[1], "name": "java"})], full_compaction=True)
    assert cl.Catalog(warehouse).get_table("db.t").scan(filter=pc.field("name") == "java").to_arrow() \
        .column("id").to_pylist() == [4]
