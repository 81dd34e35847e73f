"""Paimon's system tables (``table$snapshots`` and friends) as Arrow tables, with the column
names, types and order of Paimon 1.4's ``org.apache.paimon.table.system`` classes
(``docs/system-tables.md`` lists them and what differs). The tables read from manifests are
in ``system_files``."""

from __future__ import annotations

import enum
import json
from typing import Any

import pyarrow as pa

from changelake.api import paimon_text, system_files
from changelake.api.scan import Scan
from changelake.changelog import consumers
from changelake.errors import ChangelakeError, ScanError
from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.format import consumer, kv

_TS = system_files.TS


class SystemTable(enum.StrEnum):
    """The system tables, by the suffix Paimon gives them (``orders$snapshots``)."""

    SNAPSHOTS = "snapshots"
    SCHEMAS = "schemas"
    OPTIONS = "options"
    TAGS = "tags"
    BRANCHES = "branches"
    CONSUMERS = "consumers"
    MANIFESTS = "manifests"
    FILES = "files"
    PARTITIONS = "partitions"
    BUCKETS = "buckets"
    AUDIT_LOG = "audit_log"
    RO = "ro"  # read-optimized: the rows of the top level's files only


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
        "next_row_id": pa.array([s.next_row_id for s in snaps], pa.int64()),
    })


def _flat_json(value: Any) -> str:
    """Paimon's ``JsonSerdeUtil.toFlatJson``: compact JSON."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _schemas(ctx: TableContext) -> pa.Table:
    ids = sorted(int(n.removeprefix("schema-")) for n in ctx.file_io.list_names(ctx.paths.schema_dir)
                 if n.startswith("schema-") and n.removeprefix("schema-").isdigit())
    docs = [json.loads(ctx.file_io.read_text(ctx.paths.schema(i))) for i in ids]
    return pa.table({
        "schema_id": pa.array(ids, pa.int64()),
        # Paimon writes a field's description only when it has one
        "fields": pa.array([_flat_json([{k: v for k, v in f.items() if k != "description" or v is not None}
                                        for f in d.get("fields", [])]) for d in docs], pa.string()),
        "partition_keys": pa.array([_flat_json(d.get("partitionKeys", [])) for d in docs], pa.string()),
        "primary_keys": pa.array([_flat_json(d.get("primaryKeys", [])) for d in docs], pa.string()),
        "options": pa.array([_flat_json(d.get("options", {})) for d in docs], pa.string()),
        "comment": pa.array([d.get("comment") for d in docs], pa.string()),
        "update_time": pa.array([d.get("timeMillis", 0) for d in docs], pa.int64()).cast(_TS),
    })


def _options(ctx: TableContext) -> pa.Table:
    options = dict(ctx.schema.options)
    return pa.table({"key": pa.array(list(options), pa.string()),
                     "value": pa.array(list(options.values()), pa.string())})


def _tags(ctx: TableContext) -> pa.Table:
    tags = list(metadata.tags(ctx).items())
    return pa.table({
        "tag_name": pa.array([n for n, _ in tags], pa.string()),
        "snapshot_id": pa.array([t.id for _, t in tags], pa.int64()),
        "schema_id": pa.array([t.schema_id for _, t in tags], pa.int64()),
        "commit_time": pa.array([t.time_millis for _, t in tags], pa.int64()).cast(_TS),
        "record_count": pa.array([t.total_record_count for _, t in tags], pa.int64()),
        "create_time": pa.array([t.tag_create_time for _, t in tags], _TS),
        "time_retained": pa.array([None if t.tag_time_retained is None else paimon_text.duration(t.tag_time_retained)
                                   for _, t in tags], pa.string()),
    })


def _branches(ctx: TableContext) -> pa.Table:
    """Paimon's ``BranchesTable``: each branch and when its directory was made (its
    modification time, as Paimon takes it; null where the store keeps none for directories)."""
    names = metadata.branch_names(ctx)
    created: list[int | None] = []
    for name in names:
        try:
            created.append(int(ctx.file_io.modified_ms(metadata.branch_context(ctx, name).paths.metadata_root)))
        except (OSError, ChangelakeError):
            created.append(None)
    return pa.table({"branch_name": pa.array(names, pa.string()),
                     "create_time": pa.array(created, pa.int64()).cast(_TS)})


def _consumers(ctx: TableContext) -> pa.Table:
    ids = consumer.ids(ctx.file_io, ctx.paths)
    nexts = [consumers.next_snapshot(ctx, i) for i in ids]
    return pa.table({"consumer_id": pa.array(ids, pa.string()), "next_snapshot_id": pa.array(nexts, pa.int64())})


def _audit_log(ctx: TableContext) -> pa.Table:
    rows = ctx.arrow_schema.empty_table() if ctx.latest_snapshot() is None else Scan.of(ctx).to_arrow()
    insert = pa.repeat(pa.scalar(kv.ROW_KIND_SYMBOLS[kv.INSERT]), rows.num_rows)
    return rows.add_column(0, pa.field("rowkind", pa.string(), nullable=False), insert)


def _read_optimized(ctx: TableContext) -> pa.Table:
    return Scan.of(ctx, read_optimized=True).to_arrow()


_BUILDERS = {
    SystemTable.SNAPSHOTS: _snapshots, SystemTable.SCHEMAS: _schemas, SystemTable.OPTIONS: _options,
    SystemTable.TAGS: _tags, SystemTable.BRANCHES: _branches, SystemTable.CONSUMERS: _consumers,
    SystemTable.MANIFESTS: system_files.manifests,
    SystemTable.FILES: system_files.files, SystemTable.PARTITIONS: system_files.partitions,
    SystemTable.BUCKETS: system_files.buckets,
    SystemTable.AUDIT_LOG: _audit_log, SystemTable.RO: _read_optimized,
}


def system_table(ctx: TableContext, name: str) -> pa.Table:
    """System table ``name`` of the table (see :class:`SystemTable`), read now."""
    return _BUILDERS[parse_name(ctx, name)](ctx)
