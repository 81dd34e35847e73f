"""Dynamic-bucket tables (``bucket = -1``) written in turn by changelake and by pypaimon 2.1,
pypaimon-rust 0.4 and Java Paimon 0.9 (its ``HashBucketAssigner``), on tables either side
created: every engine reads the same rows at every snapshot, no key is in two buckets of its
partition, and every key's hash is in its bucket's HASH index file (so each engine's next write
finds it there)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl
from changelake.table.format import binary_row, bucket, hash_index
from changelake.table.read import deletion_vectors as read_index
from changelake.table.read.live_files import live_entries
from changelake.table.write.assigners.dynamic import hash_entries
from pypaimon_oracle import Pypaimon

Row = dict[str, Any]
SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
OPTIONS = {"dynamic-bucket.target-row-num": "30"}


def _batch(writer: str, step: int) -> list[Row]:
    """60 rows of partitions a and b: half update keys written before, half are new."""
    start = step * 30
    return [{"dt": "ab"[i % 2], "id": i, "v": f"{writer}{step}"} for i in range(start, start + 60)]


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r["dt"], r["id"]))


def assert_keys_in_one_bucket(table: cl.Table) -> None:
    """No key of a partition is in two buckets, and each bucket's HASH index file holds the
    hashes of every key in the bucket."""
    ctx = table.context
    latest = ctx.latest_snapshot()
    assert latest is not None
    where: dict[tuple[bytes, int], int] = {}
    keys: dict[tuple[bytes, int], set[int]] = {}
    for e in live_entries(ctx, latest):
        ids = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file, ctx.key_columns).column(0).to_pylist()
        for key in ids:
            assert where.setdefault((e.partition, key), e.bucket) == e.bucket, f"key {key} in two buckets"
        keys.setdefault((e.partition, e.bucket), set()).update(ids)
    indexes = hash_entries(ctx)
    for (partition, b), ids in keys.items():
        entry = indexes[partition][b]
        indexed = set(hash_index.read(ctx.file_io, read_index.index_path(ctx, entry.file), entry.file,
                                      table=ctx.name).tolist())
        hashes = bucket.hash_rows(binary_row.encode([pa.array(sorted(ids), pa.int64())]))
        assert set(hashes.tolist()) <= indexed, f"bucket {b} holds keys its HASH index lacks"


def _ours(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    rows = (table.scan(snapshot_id=snapshot_id) if snapshot_id else table.scan()).to_arrow().to_pylist()
    return _sorted(rows)


def _exercise(warehouse: str, *, created_by_us: bool, create: Callable[[], None], write: Callable[[list[Row]], None],
              read: Callable[[int], list[Row]]) -> None:
    """Both engines write in turn (four batches each, every batch updating the other's keys and
    adding new ones, which open buckets past 30 keys); after each, both read every snapshot."""
    if created_by_us:
        cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                           options=OPTIONS)
    else:
        create()
    table = cl.Catalog(warehouse).get_table("db.t")
    assert table.context.options.bucket == -1
    model: dict[tuple[str, int], Row] = {}
    for step in range(8):
        rows = _batch("cl" if step % 2 == created_by_us else "them", step)
        if step % 2 == created_by_us:
            table.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        else:
            write(rows)
        model.update({(r["dt"], r["id"]): r for r in rows})
        table.refresh()
        assert _ours(table) == _sorted(list(model.values()))
        assert_keys_in_one_bucket(table)
        for s in table.snapshots():
            assert _ours(table, s.id) == read(s.id), f"snapshot {s.id}"
    buckets = {e.bucket for e in live_entries(table.context, table.latest_snapshot())}  # type: ignore[arg-type]
    assert len(buckets) >= 5  # 150 keys per partition, 30 a bucket


@pytest.mark.parametrize("created_by_us", [True, False], ids=["changelake-table", "pypaimon-table"])
def test_pypaimon_and_changelake_write_one_dynamic_bucket_table(tmp_path: Any, pypaimon: Pypaimon,
                                                                 created_by_us: bool) -> None:
    warehouse = str(tmp_path)
    _exercise(
        warehouse, created_by_us=created_by_us,
        create=lambda: pypaimon.create_table(warehouse, "db.t", SCHEMA, primary_keys=["dt", "id"],
                                             partition_keys=["dt"], options=OPTIONS),
        write=lambda rows: pypaimon.write(warehouse, "db.t", pa.Table.from_pylist(rows, schema=SCHEMA)),
        read=lambda s: _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(s)}).to_pylist()),
    )


@pytest.mark.parametrize("created_by_us", [True, False], ids=["changelake-table", "java-table"])
def test_java_paimon_and_changelake_write_one_dynamic_bucket_table(tmp_path: Any, java: JavaPaimon,
                                                                    created_by_us: bool) -> None:
    warehouse = str(tmp_path)
    _exercise(
        warehouse, created_by_us=created_by_us,
        create=lambda: java.create_table(warehouse, "db.t", [("dt", "STRING"), ("id", "BIGINT"), ("v", "STRING")],
                                         primary_keys=["dt", "id"], partition_keys=["dt"],
                                         options={"bucket": "-1", **OPTIONS}),
        write=lambda rows: java.write_dynamic(warehouse, "db.t", [("+I", r) for r in rows]),
        read=lambda s: _sorted(java.read(warehouse, "db.t", s)),
    )


def _rust_table(warehouse: str) -> Any:
    from pypaimon_rust.datafusion import PaimonCatalog

    return PaimonCatalog({"warehouse": warehouse}).get_table("db.t")


def _rust_create(warehouse: str) -> None:
    from pypaimon_rust.datafusion import SQLContext

    context = SQLContext()
    catalog = f"c{uuid.uuid4().hex[:8]}"
    context.register_catalog(catalog, {"warehouse": warehouse})
    context.sql(f"CREATE SCHEMA {catalog}.db")
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in OPTIONS.items())
    context.sql(f"CREATE TABLE {catalog}.db.t (dt STRING NOT NULL, id BIGINT NOT NULL, v STRING, "
                f"PRIMARY KEY (dt, id)) PARTITIONED BY (dt) WITH ({settings})")


def _rust_write(warehouse: str, rows: list[Row]) -> None:
    builder = _rust_table(warehouse).new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


def _rust_read(warehouse: str, snapshot_id: int) -> list[Row]:
    builder = _rust_table(warehouse).new_read_builder({"scan.snapshot-id": str(snapshot_id)})
    return _sorted([row for batch in builder.new_read().read(builder.new_scan().plan().splits())
                    for row in batch.to_pylist()])


@pytest.mark.parametrize("created_by_us", [True, False], ids=["changelake-table", "rust-table"])
def test_pypaimon_rust_and_changelake_write_one_dynamic_bucket_table(tmp_path: Any, created_by_us: bool) -> None:
    pytest.importorskip("pypaimon_rust")
    warehouse = str(tmp_path)
    _exercise(warehouse, created_by_us=created_by_us, create=lambda: _rust_create(warehouse),
              write=lambda rows: _rust_write(warehouse, rows), read=lambda s: _rust_read(warehouse, s))


def test_changelake_writes_what_pypaimon_assigns_alike(tmp_path: Any, pypaimon: Pypaimon) -> None:
    """The same rows written into two fresh tables, one by each engine, fill buckets alike:
    both follow Paimon's PartitionIndex (first non-full bucket, then the lowest new id)."""
    warehouse = str(tmp_path)
    rows = pa.Table.from_pylist([{"dt": "a", "id": i, "v": "x"} for i in range(100)], schema=SCHEMA)
    catalog = cl.Catalog(warehouse)
    catalog.create_table("db.ours", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options=OPTIONS)
    catalog.get_table("db.ours").write(rows)
    pypaimon.create_table(warehouse, "db.theirs", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                          options=OPTIONS)
    pypaimon.write(warehouse, "db.theirs", rows)

    def counts(name: str) -> list[int]:
        ctx = catalog.get_table(name).context
        return sorted(e.file.row_count for p in hash_entries(ctx).values() for e in p.values())

    assert counts("db.ours") == counts("db.theirs") == [10, 30, 30, 30]


def test_java_and_pypaimon_write_on_after_a_dynamic_bucket_overwrite(tmp_path: Any, java: JavaPaimon,
                                                                      pypaimon: Pypaimon) -> None:
    """changelake's INSERT OVERWRITE of a dynamic-bucket partition writes its HASH index anew:
    Java Paimon's and pypaimon's assigners then find the new keys in their new buckets."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                               options=OPTIONS)
    model: dict[tuple[str, int], Row] = {}
    for step in range(2):
        rows = _batch("cl", step)
        table.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        model.update({(r["dt"], r["id"]): r for r in rows})
    replacement = [{"dt": "a", "id": i, "v": "over"} for i in range(500, 570)]  # 70 new keys: 3 buckets
    overwritten = table.overwrite(pa.Table.from_pylist(replacement, schema=SCHEMA))
    assert overwritten is not None
    model = {k: r for k, r in model.items() if k[0] != "a"} | {("a", r["id"]): r for r in replacement}
    assert_keys_in_one_bucket(table)
    # pypaimon updates keys of the new buckets and adds keys, then Java does; each must find
    # them (in this order: pypaimon 2.1 cannot read the manifests Java 0.9 writes).
    pypaimon_rows = [{"dt": "a", "id": i, "v": "py"} for i in range(560, 620, 3)]
    pypaimon.write(warehouse, "db.t", pa.Table.from_pylist(pypaimon_rows, schema=SCHEMA))
    java_rows = [{"dt": "a", "id": i, "v": "java"} for i in range(540, 600)]
    java.write_dynamic(warehouse, "db.t", [("+I", r) for r in java_rows])
    model.update({("a", r["id"]): r for r in [*pypaimon_rows, *java_rows]})
    table.refresh()
    assert _ours(table) == _sorted(list(model.values()))
    assert_keys_in_one_bucket(table)
    for s in table.snapshots():
        assert _ours(table, s.id) == _sorted(java.read(warehouse, "db.t", s.id)), f"snapshot {s.id}"
