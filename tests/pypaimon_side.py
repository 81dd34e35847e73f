"""What the tests ask of pypaimon 2.1: plain pypaimon code, run in pypaimon's own process
(pypaimon_worker.py) and called through pypaimon_oracle.Pypaimon by function name.

Every function takes and returns plain Python values or pyarrow Tables, RecordBatches and
Schemas; no pypaimon object leaves this module (see pypaimon_oracle.py for adding one)."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pyarrow as pa
from pypaimon import CatalogFactory, Schema
from pypaimon.consumer.consumer import Consumer
from pypaimon.consumer.consumer_manager import ConsumerManager
from pypaimon.schema.data_types import AtomicType
from pypaimon.schema.schema_change import SchemaChange
from pypaimon.schema.table_schema import TableSchema
from pypaimon.write.row_key_extractor import FixedBucketRowKeyExtractor, RowKeyExtractor


def _catalog(warehouse: str, catalog_options: dict[str, str] | None = None) -> Any:
    return CatalogFactory.create({"warehouse": warehouse, **(catalog_options or {})})


def _table(warehouse: str, name: str, options: dict[str, str] | None = None,
           catalog_options: dict[str, str] | None = None) -> Any:
    table = _catalog(warehouse, catalog_options).get_table(name)
    return table.copy(options) if options else table


def create_table(warehouse: str, name: str, schema: pa.Schema, *, primary_keys: list[str],
                 partition_keys: list[str] | None = None, options: dict[str, str] | None = None) -> None:
    """Create ``name`` (and its database) with pypaimon's catalog."""
    catalog = _catalog(warehouse)
    catalog.create_database(name.split(".")[0], True)
    catalog.create_table(name, Schema.from_pyarrow_schema(schema, partition_keys=partition_keys,
                                                          primary_keys=primary_keys, options=options), False)


def alter_table(warehouse: str, name: str, changes: list[tuple[str, ...]]) -> None:
    """``catalog.alter_table`` with ``changes`` of ("add_column", name, type), ("drop_column",
    name), ("rename_column", old, new) and ("update_column_type", name, type); types are
    Paimon's names (STRING, BIGINT, ...)."""
    made = {
        "add_column": lambda column, type_: SchemaChange.add_column(column, AtomicType(type_)),
        "drop_column": SchemaChange.drop_column,
        "rename_column": SchemaChange.rename_column,
        "update_column_type": lambda column, type_: SchemaChange.update_column_type(column, AtomicType(type_)),
    }
    _catalog(warehouse).alter_table(name, [made[kind](*args) for kind, *args in changes])


def write(warehouse: str, name: str, data: pa.Table) -> None:
    """One batch commit of ``data``."""
    _commit(_table(warehouse, name).new_batch_write_builder(), data)


def write_fixed_buckets(warehouse: str, name: str, data: pa.Table) -> None:
    """One batch commit of ``data`` into a postpone-bucket table's fixed buckets (pypaimon's
    ``new_postpone_fixed_bucket_write_builder``; its ordinary batch writer writes bucket-postpone/)."""
    _commit(_table(warehouse, name).new_postpone_fixed_bucket_write_builder(), data)


def _commit(builder: Any, data: pa.Table) -> None:
    writer = builder.new_write()
    commit = builder.new_commit()
    try:
        writer.write_arrow(data)
        commit.commit(writer.prepare_commit())
    finally:
        writer.close()
        commit.close()


def read(warehouse: str, name: str, options: dict[str, str] | None = None,
         catalog_options: dict[str, str] | None = None) -> pa.Table:
    """A batch read of the table (``options`` may time travel: scan.snapshot-id, scan.tag-name)."""
    builder = _table(warehouse, name, options, catalog_options).new_read_builder()
    return builder.new_read().to_arrow(builder.new_scan().plan().splits())


def splits(warehouse: str, name: str, options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The splits a batch read plans: whether each is read without merging (raw convertible),
    and its files' paths, names and levels."""
    builder = _table(warehouse, name, options).new_read_builder()
    return [{"raw_convertible": split.raw_convertible,
             "files": [{"path": f.file_path, "name": f.file_name, "level": f.level} for f in split.files]}
            for split in builder.new_scan().plan().splits()]


def filtered(warehouse: str, name: str, column: str, low: Any, high: Any) -> tuple[int, pa.Table]:
    """The files a batch read with ``low <= column <= high`` plans (pypaimon skips files by
    their statistics) and the rows it reads (filtered by pypaimon)."""
    builder = _table(warehouse, name).new_read_builder()
    builder = builder.with_filter(builder.new_predicate_builder().between(column, low, high))
    planned = builder.new_scan().plan().splits()
    return sum(len(split.files) for split in planned), builder.new_read().to_arrow(planned)


def _key_schema(schema: pa.Schema, num_buckets: int) -> TableSchema:
    """A table schema whose primary key is every column of ``schema``."""
    keyed = Schema.from_pyarrow_schema(schema, primary_keys=list(schema.names), options={"bucket": str(num_buckets)})
    return TableSchema.from_schema(0, keyed)


def buckets(batch: pa.RecordBatch, num_buckets: int) -> list[int]:
    """The bucket of every row, keyed by all of ``batch``'s columns."""
    extractor = FixedBucketRowKeyExtractor(_key_schema(batch.schema, num_buckets))
    return list(extractor.extract_partition_bucket_batch(batch)[1])


def hashes(batch: pa.RecordBatch) -> list[int]:
    """The BinaryRow hash code of every row, keyed by all of ``batch``'s columns."""
    fields = _key_schema(batch.schema, 1).logical_bucket_key_fields
    rows = zip(*(column.to_pylist() for column in batch.columns), strict=True)
    return [RowKeyExtractor._binary_row_hash_code(tuple(row), fields) for row in rows]


def table_buckets(warehouse: str, name: str, batch: pa.RecordBatch) -> list[int]:
    """The bucket of every row of ``batch`` by the table's own schema (its bucket key and count)."""
    extractor = FixedBucketRowKeyExtractor(_table(warehouse, name).table_schema)
    return list(extractor.extract_partition_bucket_batch(batch)[1])


def create_branch(warehouse: str, name: str, branch: str, tag_name: str) -> None:
    """Branch ``branch`` of ``name`` from its tag ``tag_name`` (pypaimon's
    ``FileSystemBranchManager.create_branch``); ``name$branch_<branch>`` then names it."""
    _table(warehouse, name).branch_manager().create_branch(branch, tag_name)


def tag(warehouse: str, name: str, tag_name: str) -> dict[str, Any]:
    """The tag as pypaimon's tag manager reads it: its creation time and retention."""
    found = _table(warehouse, name).tag_manager().get(tag_name)
    return {"create_time": found.tag_create_time, "time_retained": found.tag_time_retained}


def stream_changelog(warehouse: str, name: str, last_snapshot: int, timeout: float = 60.0) -> dict[int, pa.Table]:
    """What pypaimon's streaming read (row kinds in ``_row_kind``) returns per snapshot, from
    snapshot 1 (through a consumer reset to it) to ``last_snapshot``; snapshots it returns no
    rows for are left out. Keep it under 10 snapshots: a consumer further behind gets
    pypaimon's diff catch-up, a merged read, instead of the changelog."""
    table = _table(warehouse, name)
    ConsumerManager(table.file_io, table.table_path).reset_consumer("check", Consumer(next_snapshot=1))
    builder = table.new_stream_read_builder().with_include_row_kind().with_consumer_id("check") \
        .with_poll_interval_ms(50)
    scan, reader = builder.new_streaming_scan(), builder.new_read()
    plans: queue.Queue[Any] = queue.Queue()

    def stream() -> None:  # in a thread: the stream polls forever once it has caught up
        try:
            for plan in scan.stream_sync():
                plans.put(plan)
                if plan.snapshot_id >= last_snapshot:
                    return
        except BaseException as exc:  # handed to the caller
            plans.put(exc)

    threading.Thread(target=stream, daemon=True).start()
    out: dict[int, pa.Table] = {}
    while True:
        plan = plans.get(timeout=timeout)
        if isinstance(plan, BaseException):
            raise plan
        data = reader.to_arrow(plan.splits())
        if data is not None and data.num_rows:
            out[plan.snapshot_id] = data
        if plan.snapshot_id >= last_snapshot:
            return out
