"""Append tables (no primary key) between changelake, pypaimon 2.1 and Java Paimon 0.9, both
ways: unaware (``bucket = -1``, partitioned) and fixed-bucket (``bucket-key``) tables written
by several commits, so buckets hold many files; every engine reads the same rows at every
snapshot, also after changelake's compaction and when the engines write in turn. pypaimon-rust
0.4 (unaware tables, made by its SQL, which takes no ``bucket``) writes and reads alongside."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl
from changelake.errors import CommitConflictError
from changelake.table.commit import overwrite

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("dt", pa.string())])
KINDS = [
    pytest.param({}, id="unaware"),
    pytest.param({"bucket": "3", "bucket-key": "id"}, id="fixed-buckets"),
]


def _batch(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "dt": ["a" if i % 3 else "b" for i in ids]},
                    schema=SCHEMA)


def _sorted(rows: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["name"], r["dt"]) for r in rows)


def _ours(table: cl.Table, snapshot_id: int | None = None) -> list[tuple[Any, ...]]:
    return _sorted(table.scan(snapshot_id).to_arrow().to_pylist())


def _in_write_order(table: cl.Table, dt: str) -> list[int]:
    ids: list[int] = table.scan(filter=pa.compute.field("dt") == dt).to_arrow().column("id").to_pylist()
    return ids


@pytest.mark.parametrize("options", KINDS)
def test_changelake_reads_and_extends_pypaimon_append_tables(tmp_path: Any, pypaimon: Any,
                                                            options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    pypaimon.create_table(warehouse, "db.t", SCHEMA, primary_keys=[], partition_keys=["dt"], options=options)
    for start in range(0, 40, 8):
        pypaimon.write(warehouse, "db.t", _batch(start, 8))
    table = cl.Catalog(warehouse).get_table("db.t")
    assert table.primary_keys == []
    for snapshot in table.snapshots():
        expected = _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot.id)}).to_pylist())
        assert _ours(table, snapshot.id) == expected
    if not options:  # unaware: one bucket per partition, files in commit order
        assert _in_write_order(table, "a") == [i for i in range(40) if i % 3]
    table.write(_batch(40, 8))
    table.compact(full=True)
    assert _sorted(pypaimon.read(warehouse, "db.t").to_pylist()) == _ours(table) == _sorted(
        _batch(0, 48).to_pylist())
    pypaimon.write(warehouse, "db.t", _batch(48, 4))
    assert _ours(table) == _sorted(_batch(0, 52).to_pylist())


@pytest.mark.parametrize("options", KINDS)
def test_pypaimon_reads_changelake_append_tables_at_every_snapshot(tmp_path: Any, pypaimon: Any,
                                                                  options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, partition_keys=["dt"],
                                               options={**options, "compaction.min.file-num": "2",
                                                        "compaction.max.file-num": "3"})
    with table.writer("w") as writer:
        for identifier, start in enumerate(range(0, 60, 6)):
            writer.write(_batch(start, 6))
            writer.commit(identifier)
    table.compact(full=True)
    kinds = {s.commit_kind for s in table.snapshots()}
    assert cl.CommitKind.COMPACT in kinds
    for snapshot in table.snapshots():
        theirs = _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot.id)}).to_pylist())
        assert theirs == _ours(table, snapshot.id)
    assert _ours(table) == _sorted(_batch(0, 60).to_pylist())


def _java_rows(java: JavaPaimon, warehouse: str, snapshot_id: int | None = None) -> list[tuple[Any, ...]]:
    return _sorted(java.read(warehouse, "db.t", snapshot_id))


@pytest.mark.parametrize("options", KINDS)
def test_java_paimon_and_changelake_share_append_tables(tmp_path: Any, java: JavaPaimon,
                                                       options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("id", "BIGINT"), ("name", "STRING"), ("dt", "STRING")],
                      primary_keys=[], partition_keys=["dt"], options=options)
    for start in range(0, 30, 6):
        java.write(warehouse, "db.t", [("+I", row) for row in _batch(start, 6).to_pylist()])
    table = cl.Catalog(warehouse).get_table("db.t")
    for snapshot in table.snapshots():
        assert _ours(table, snapshot.id) == _java_rows(java, warehouse, snapshot.id)
    if not options:
        assert _in_write_order(table, "a") == [i for i in range(30) if i % 3]
    for start in range(30, 50, 5):
        table.write(_batch(start, 5))
    table.compact(full=True)
    for snapshot in table.snapshots():
        assert _java_rows(java, warehouse, snapshot.id) == _ours(table, snapshot.id)
    java.write(warehouse, "db.t", [("+I", row) for row in _batch(50, 3).to_pylist()])
    assert _ours(table) == _java_rows(java, warehouse) == _sorted(_batch(0, 53).to_pylist())


@pytest.mark.parametrize("options", KINDS)
def test_changelake_reads_deletes_from_and_compacts_java_paimon_append_tables_with_deletion_vectors(
        tmp_path: Any, java: JavaPaimon, options: dict[str, str]) -> None:
    """Java Paimon makes append tables with deletion vectors: changelake reads their files (level
    0 too), appends to them, deletes and updates rows by their vectors, and compacts them; Java
    reads every snapshot as changelake does."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("id", "BIGINT"), ("name", "STRING"), ("dt", "STRING")],
                      primary_keys=[], partition_keys=["dt"], options={**options, "deletion-vectors.enabled": "true"})
    for start in range(0, 18, 6):
        java.write(warehouse, "db.t", [("+I", row) for row in _batch(start, 6).to_pylist()])
    table = cl.Catalog(warehouse).get_table("db.t")
    for snapshot in table.snapshots():
        assert _ours(table, snapshot.id) == _java_rows(java, warehouse, snapshot.id)
    table.write(_batch(18, 6))
    assert _java_rows(java, warehouse) == _ours(table) == _sorted(_batch(0, 24).to_pylist())
    table.delete("id < 3 OR id = 20")
    table.update("id >= 21", set={"name": "updated"})
    table.compact(full=True)
    table.delete("id = 12")
    expected = [(i, "updated" if i >= 21 else f"n{i}", "a" if i % 3 else "b") for i in range(24)
                if i >= 3 and i not in (12, 20)]
    assert _ours(table) == sorted(expected)
    for snapshot in table.snapshots():
        assert _java_rows(java, warehouse, snapshot.id) == _ours(table, snapshot.id)


def test_a_delete_racing_a_java_paimon_compaction_is_void(tmp_path: Any, java: JavaPaimon,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """changelake marks rows of files that Java Paimon compacts away before the delete commits:
    the delete fails and changes nothing; run again, it lands and Java reads it."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("id", "BIGINT"), ("name", "STRING"), ("dt", "STRING")],
                      primary_keys=[], partition_keys=["dt"],
                      options={"bucket": "1", "bucket-key": "id", "deletion-vectors.enabled": "true"})
    for start in range(0, 12, 4):
        java.write(warehouse, "db.t", [("+I", row) for row in _batch(start, 4).to_pylist()])
    table = cl.Catalog(warehouse).get_table("db.t")
    real = overwrite.commit_rewrite

    def raced(*args: Any, **kwargs: Any) -> Any:
        java.compact(warehouse, "db.t", [({"dt": "a"}, 0), ({"dt": "b"}, 0)])
        return real(*args, **kwargs)

    monkeypatch.setattr(overwrite, "commit_rewrite", raced)
    with pytest.raises(CommitConflictError, match="compacted or rewritten by another commit"):
        table.delete("id = 4")
    monkeypatch.setattr(overwrite, "commit_rewrite", real)
    latest = table.latest_snapshot()
    assert latest is not None and latest.commit_kind is cl.CommitKind.COMPACT
    assert _ours(table) == _java_rows(java, warehouse) == _sorted(_batch(0, 12).to_pylist())
    table.delete("id = 4")
    assert _java_rows(java, warehouse) == _ours(table) == _sorted(r for r in _batch(0, 12).to_pylist()
                                                                  if r["id"] != 4)


ROW_LEVEL_KINDS = [*KINDS, pytest.param({"deletion-vectors.enabled": "true"}, id="unaware, deletion vectors"),
                   pytest.param({"bucket": "3", "bucket-key": "id", "deletion-vectors.enabled": "true"},
                                id="fixed-buckets, deletion vectors")]


def _deleted_updated_and_merged(warehouse: str, options: dict[str, str]) -> cl.Table:
    """A changelake append table after deletes, updates, merges and a compaction (write-only:
    the compaction is the explicit one)."""
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, partition_keys=["dt"],
                                               options={**options, "write-only": "true"})
    for start in range(0, 36, 6):
        table.write(_batch(start, 6))
    table.delete("id < 4 OR id = 20")
    table.update("id >= 30", set={"name": "updated"})
    source = pa.table({"id": [5, 6, 40], "name": ["m5", None, "m40"], "dt": ["a", "b", "a"]}, schema=SCHEMA)
    (table.merge(source, on=["id"])
     .when_matched_delete(condition=pa.compute.field("source.name").is_null())
     .when_matched_update()
     .when_not_matched_insert()
     .when_not_matched_by_source_delete(condition="target.id = 7")
     .execute())
    table.delete("id = 8")
    table.compact(full=True)
    table.delete("id = 9")
    expected = [(i, "m5" if i == 5 else "updated" if i >= 30 else f"n{i}", "a" if i % 3 else "b")
                for i in range(36) if i >= 4 and i not in (6, 7, 8, 9, 20)] + [(40, "m40", "a")]
    assert _ours(table) == sorted(expected)
    return table


@pytest.mark.parametrize("options", ROW_LEVEL_KINDS)
def test_pypaimon_reads_changelake_deletes_updates_and_merges_of_append_tables(tmp_path: Any, pypaimon: Any,
                                                                              options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    table = _deleted_updated_and_merged(warehouse, options)
    for snapshot in table.snapshots():
        theirs = _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot.id)}).to_pylist())
        assert theirs == _ours(table, snapshot.id), f"snapshot {snapshot.id}"


@pytest.mark.parametrize("options", ROW_LEVEL_KINDS)
def test_java_paimon_reads_changelake_deletes_updates_and_merges_of_append_tables(tmp_path: Any, java: JavaPaimon,
                                                                                 options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    table = _deleted_updated_and_merged(warehouse, options)
    for snapshot in table.snapshots():
        assert _java_rows(java, warehouse, snapshot.id) == _ours(table, snapshot.id), f"snapshot {snapshot.id}"
    java.write(warehouse, "db.t", [("+I", row) for row in _batch(50, 3).to_pylist()])
    assert _ours(table) == _java_rows(java, warehouse)


def _rust_rows(warehouse: str, snapshot_id: int | None = None) -> list[tuple[Any, ...]]:
    from pypaimon_rust.datafusion import PaimonCatalog

    options = {"scan.snapshot-id": str(snapshot_id)} if snapshot_id is not None else None
    builder = PaimonCatalog({"warehouse": warehouse}).get_table("db.t").new_read_builder(options)
    return _sorted(row for batch in builder.new_read().read(builder.new_scan().plan().splits())
                   for row in batch.to_pylist())


def _rust_write(warehouse: str, rows: pa.Table) -> None:
    from pypaimon_rust.datafusion import PaimonCatalog

    builder = PaimonCatalog({"warehouse": warehouse}).get_table("db.t").new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        for batch in rows.to_batches():
            write.write_arrow(batch)
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


def test_pypaimon_rust_and_changelake_share_an_unaware_append_table(tmp_path: Any) -> None:
    pytest.importorskip("pypaimon_rust")
    from pypaimon_rust.datafusion import SQLContext

    warehouse = str(tmp_path)
    context = SQLContext()
    context.register_catalog("p", {"warehouse": warehouse})
    context.sql("CREATE SCHEMA p.db")
    context.sql("CREATE TABLE p.db.t (id BIGINT, name STRING, dt STRING) PARTITIONED BY (dt)")
    for start in range(0, 20, 5):
        _rust_write(warehouse, _batch(start, 5))
    table = cl.Catalog(warehouse).get_table("db.t")
    for snapshot in table.snapshots():
        assert _ours(table, snapshot.id) == _rust_rows(warehouse, snapshot.id)
    assert _in_write_order(table, "a") == [i for i in range(20) if i % 3]
    table.write(_batch(20, 5))
    table.compact(full=True)
    for snapshot in table.snapshots():
        assert _rust_rows(warehouse, snapshot.id) == _ours(table, snapshot.id)
    _rust_write(warehouse, _batch(25, 5))
    assert _ours(table) == _rust_rows(warehouse) == _sorted(_batch(0, 30).to_pylist())
