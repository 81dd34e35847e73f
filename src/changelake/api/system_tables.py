"""Paimon's system tables (``table$snapshots`` and friends) as Arrow tables, with the column
names of Paimon's ``org.apache.paimon.table.system`` classes (columns changelake has no value
for, such as value statistics and row ids, are left out)."""

from __future__ import annotations

import enum
import json
from collections import defaultdict
from typing import Any

import pyarrow as pa

from changelake.api.scan import Scan
from changelake.changelog import consumers
from changelake.errors import ScanError
from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.format import kv
from changelake.table.format.manifest import ManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.io.paths import partition_path
from changelake.table.read import live_files

_TS = pa.timestamp("ms")


class SystemTable(enum.StrEnum):
    """The system tables, by the suffix Paimon gives them (``orders$snapshots``)."""

    SNAPSHOTS = "snapshots"
    SCHEMAS = "schemas"
    OPTIONS = "options"
    TAGS = "tags"
    CONSUMERS = "consumers"
    MANIFESTS = "manifests"
    FILES = "files"
    PARTITIONS = "partitions"
    BUCKETS = "buckets"
    AUDIT_LOG = "audit_log"


def parse_name(ctx: TableContext, name: str) -> SystemTable:
    """The system table ``name`` names; ScanError listing the valid names otherwise."""
    try:
        return SystemTable(name)
    except ValueError:
        raise ScanError(f"has no system table {name!r}; valid: {', '.join(SystemTable)}", table=ctx.name) from None


def _snapshots(ctx: TableContext) -> pa.Table:
    snaps = metadata.snapshots(ctx)
    return pa.table({
        "snapshot_id": pa.array([s.id for s in snaps], pa.int64()),
        "schema_id": pa.array([s.schema_id for s in snaps], pa.int64()),
        "commit_user": pa.array([s.commit_user for s in snaps], pa.string()),
        "commit_identifier": pa.array([s.commit_identifier for s in snaps], pa.int64()),
        "commit_kind": pa.array([s.commit_kind.value for s in snaps], pa.string()),
        "commit_time": pa.array([s.time_millis for s in snaps], pa.int64()).cast(_TS),
        "base_manifest_list": pa.array([s.base_manifest_list for s in snaps], pa.string()),
        "delta_manifest_list": pa.array([s.delta_manifest_list for s in snaps], pa.string()),
        "changelog_manifest_list": pa.array([s.changelog_manifest_list for s in snaps], pa.string()),
        "total_record_count": pa.array([s.total_record_count for s in snaps], pa.int64()),
        "delta_record_count": pa.array([s.delta_record_count for s in snaps], pa.int64()),
        "changelog_record_count": pa.array([s.changelog_record_count for s in snaps], pa.int64()),
        "watermark": pa.array([s.watermark for s in snaps], pa.int64()),
    })


def _schemas(ctx: TableContext) -> pa.Table:
    ids = sorted(int(n.removeprefix("schema-")) for n in ctx.file_io.list_names(ctx.paths.schema_dir)
                 if n.startswith("schema-") and n.removeprefix("schema-").isdigit())
    docs = [json.loads(ctx.file_io.read_text(ctx.paths.schema(i))) for i in ids]
    return pa.table({
        "schema_id": pa.array(ids, pa.int64()),
        "fields": pa.array([json.dumps(d.get("fields", [])) for d in docs], pa.string()),
        "partition_keys": pa.array([json.dumps(d.get("partitionKeys", [])) for d in docs], pa.string()),
        "primary_keys": pa.array([json.dumps(d.get("primaryKeys", [])) for d in docs], pa.string()),
        "options": pa.array([json.dumps(d.get("options", {})) for d in docs], pa.string()),
        "comment": pa.array([d.get("comment") for d in docs], pa.string()),
        "update_time": pa.array([d.get("timeMillis", 0) for d in docs], pa.int64()).cast(_TS),
    })


def _options(ctx: TableContext) -> pa.Table:
    options = dict(ctx.schema.options)
    return pa.table({"key": pa.array(list(options), pa.string()),
                     "value": pa.array(list(options.values()), pa.string())})


def _tags(ctx: TableContext) -> pa.Table:
    tags = metadata.tags(ctx)
    return pa.table({
        "tag_name": pa.array(list(tags), pa.string()),
        "snapshot_id": pa.array([s.id for s in tags.values()], pa.int64()),
        "schema_id": pa.array([s.schema_id for s in tags.values()], pa.int64()),
        "commit_time": pa.array([s.time_millis for s in tags.values()], pa.int64()).cast(_TS),
        "record_count": pa.array([s.total_record_count for s in tags.values()], pa.int64()),
    })


def _consumers(ctx: TableContext) -> pa.Table:
    ids = sorted(n.removeprefix("consumer-") for n in ctx.file_io.list_names(ctx.paths.consumer_dir)
                 if n.startswith("consumer-") and not n.endswith(".tmp"))
    nexts = [consumers.next_snapshot(ctx, i) for i in ids]
    return pa.table({"consumer_id": pa.array(ids, pa.string()), "next_snapshot_id": pa.array(nexts, pa.int64())})


def _latest(ctx: TableContext) -> Snapshot | None:
    return ctx.latest_snapshot()


def _manifests(ctx: TableContext) -> pa.Table:
    latest = _latest(ctx)
    metas = [] if latest is None else live_files.data_manifests(ctx, latest)
    return pa.table({
        "file_name": pa.array([m.file_name for m in metas], pa.string()),
        "file_size": pa.array([m.file_size for m in metas], pa.int64()),
        "num_added_files": pa.array([m.num_added_files for m in metas], pa.int64()),
        "num_deleted_files": pa.array([m.num_deleted_files for m in metas], pa.int64()),
        "schema_id": pa.array([m.schema_id for m in metas], pa.int64()),
    })


def _live(ctx: TableContext) -> list[ManifestEntry]:
    latest = _latest(ctx)
    return [] if latest is None else live_files.live_entries(ctx, latest)


def _partition_text(ctx: TableContext, partition: bytes) -> str:
    """Java's ``Arrays.toString`` of the partition values, as Paimon's files table shows them."""
    return "[" + ", ".join("null" if v is None else str(v) for v in ctx.partition_values(partition)) + "]"


def _files(ctx: TableContext) -> pa.Table:
    entries = _live(ctx)
    files = [e.file for e in entries]
    return pa.table({
        "partition": pa.array([_partition_text(ctx, e.partition) for e in entries], pa.string()),
        "bucket": pa.array([e.bucket for e in entries], pa.int32()),
        "file_path": pa.array([f"{ctx.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}" for e in entries],
                              pa.string()),
        "file_format": pa.array([ctx.options.file_format for _ in entries], pa.string()),
        "schema_id": pa.array([f.schema_id for f in files], pa.int64()),
        "level": pa.array([f.level for f in files], pa.int32()),
        "record_count": pa.array([f.row_count for f in files], pa.int64()),
        "file_size_in_bytes": pa.array([f.file_size for f in files], pa.int64()),
        "min_sequence_number": pa.array([f.min_sequence_number for f in files], pa.int64()),
        "max_sequence_number": pa.array([f.max_sequence_number for f in files], pa.int64()),
        "creation_time": pa.array([f.creation_time_ms for f in files], pa.int64()).cast(_TS),
    })


def _grouped(ctx: TableContext, *, by_bucket: bool) -> dict[Any, list[ManifestEntry]]:
    groups: dict[Any, list[ManifestEntry]] = defaultdict(list)
    for entry in _live(ctx):
        groups[(entry.partition, entry.bucket) if by_bucket else entry.partition].append(entry)
    return dict(sorted(groups.items()))


def _sums(groups: dict[Any, list[ManifestEntry]]) -> dict[str, pa.Array]:
    values = list(groups.values())
    return {
        "record_count": pa.array([sum(e.file.row_count for e in g) for g in values], pa.int64()),
        "file_size_in_bytes": pa.array([sum(e.file.file_size for e in g) for g in values], pa.int64()),
        "file_count": pa.array([len(g) for g in values], pa.int64()),
        "last_update_time": pa.array([max((e.file.creation_time_ms or 0) for e in g) for g in values],
                                     pa.int64()).cast(_TS),
    }


def _partitions(ctx: TableContext) -> pa.Table:
    groups = _grouped(ctx, by_bucket=False)
    options = ctx.options
    names = [partition_path(ctx.partition_keys, ctx.partition_values(p), ctx.partition_types,
                            options.partition_default_name, legacy=options.partition_legacy_name) for p in groups]
    return pa.table({"partition": pa.array(names, pa.string()), **_sums(groups),
                     "total_buckets": pa.array([g[0].total_buckets for g in groups.values()], pa.int32())})


def _buckets(ctx: TableContext) -> pa.Table:
    groups = _grouped(ctx, by_bucket=True)
    return pa.table({"partition": pa.array([_partition_text(ctx, p) for p, _ in groups], pa.string()),
                     "bucket": pa.array([b for _, b in groups], pa.int32()), **_sums(groups)})


def _audit_log(ctx: TableContext) -> pa.Table:
    rows = ctx.arrow_schema.empty_table() if _latest(ctx) is None else Scan.of(ctx).to_arrow()
    insert = pa.repeat(pa.scalar(kv.ROW_KIND_SYMBOLS[kv.INSERT]), rows.num_rows)
    return rows.add_column(0, pa.field("rowkind", pa.string(), nullable=False), insert)


_BUILDERS = {
    SystemTable.SNAPSHOTS: _snapshots, SystemTable.SCHEMAS: _schemas, SystemTable.OPTIONS: _options,
    SystemTable.TAGS: _tags, SystemTable.CONSUMERS: _consumers, SystemTable.MANIFESTS: _manifests,
    SystemTable.FILES: _files, SystemTable.PARTITIONS: _partitions, SystemTable.BUCKETS: _buckets,
    SystemTable.AUDIT_LOG: _audit_log,
}


def system_table(ctx: TableContext, name: str) -> pa.Table:
    """System table ``name`` of the table (see :class:`SystemTable`), read now."""
    return _BUILDERS[parse_name(ctx, name)](ctx)
