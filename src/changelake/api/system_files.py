"""The system tables read from the latest snapshot's manifests: ``manifests``, ``files``,
``partitions`` and ``buckets``, with the columns (names, types, order) and string renderings
of Paimon 1.4's ``ManifestsTable``, ``FilesTable``, ``PartitionsTable`` and ``BucketsTable``.

One row per manifest, file, partition or bucket: metadata-sized, built per file in Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from changelake.api import paimon_text
from changelake.table.context import TableContext
from changelake.table.format import binary_row
from changelake.table.format.manifest import DataFileMeta, FileSource, ManifestEntry, SimpleStats
from changelake.table.format.schema import TableSchema
from changelake.table.read import live_files

TS = pa.timestamp("ms")


def _row(data: bytes, types: Sequence[pa.DataType]) -> tuple[Any, ...] | None:
    """Values of a manifest-stored BinaryRow of ``types``; None if it holds other columns."""
    arity, row = binary_row.deserialize(data)
    return binary_row.from_bytes(row, types) if arity == len(types) else None


def manifests(ctx: TableContext) -> pa.Table:
    """``ManifestsTable``: the data manifests of the latest snapshot."""
    latest = ctx.latest_snapshot()
    metas = [] if latest is None else live_files.data_manifests(ctx, latest)
    types = ctx.partition_types

    def stats(pick: Callable[[SimpleStats], bytes]) -> pa.Array:
        rows = [_row(pick(m.partition_stats), types) for m in metas]
        return pa.array([None if r is None else paimon_text.row_text(r, types) for r in rows], pa.string())

    return pa.table({
        "file_name": pa.array([m.file_name for m in metas], pa.string()),
        "file_size": pa.array([m.file_size for m in metas], pa.int64()),
        "num_added_files": pa.array([m.num_added_files for m in metas], pa.int64()),
        "num_deleted_files": pa.array([m.num_deleted_files for m in metas], pa.int64()),
        "schema_id": pa.array([m.schema_id for m in metas], pa.int64()),
        "min_partition_stats": stats(lambda s: s.min_values),
        "max_partition_stats": stats(lambda s: s.max_values),
        "min_row_id": pa.array([m.min_row_id for m in metas], pa.int64()),
        "max_row_id": pa.array([m.max_row_id for m in metas], pa.int64()),
    })


def _live(ctx: TableContext) -> list[ManifestEntry]:
    latest = ctx.latest_snapshot()
    return [] if latest is None else live_files.live_entries(ctx, latest)


def _partition_text(ctx: TableContext, partition: bytes) -> str:
    return paimon_text.row_text(ctx.partition_values(partition), ctx.partition_types)


class _ValueStats:
    """Renders a file's value statistics as Paimon's ``SimpleStatsEvolution`` presents them:
    mapped by field id onto the current schema's columns (a column the file's schema lacks has
    no bounds and all rows null), then printed as ``{column=value, ...}`` sorted by name."""

    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx
        self.columns = ctx.schema.fields

    def render(self, file: DataFileMeta) -> tuple[str, str, str]:
        """``null_value_counts``, ``min_value_stats`` and ``max_value_stats`` of ``file``."""
        file_schema = self.ctx.schema if file.schema_id == self.ctx.schema.id else self.ctx.schemas.get(file.schema_id)
        stats = file.value_stats
        by_id = {f.id: f for f in file_schema.fields}
        names = list(file.value_stats_cols) if file.value_stats_cols is not None else [
            f.name for f in file_schema.fields]
        types = [file_schema.field(n).arrow_field().type if _has_field(file_schema, n) else pa.binary()
                 for n in names]
        # nested columns have no bounds in Paimon's statistics: their slots are read as opaque bytes
        readable = [pa.binary() if pa.types.is_nested(t) else t for t in types]
        lows, highs = _row(stats.min_values, readable), _row(stats.max_values, readable)
        counts = stats.null_counts or ()
        nulls, mins, maxs = [], [], []
        for column in self.columns:
            source = by_id.get(column.id)
            at = names.index(source.name) if source is not None and source.name in names else -1
            if source is None:
                count = str(file.row_count)
            else:
                count = "null" if at < 0 or at >= len(counts) or counts[at] is None else str(counts[at])
            nulls.append((column.name, count))
            mins.append((column.name, _bound(lows, at, types)))
            maxs.append((column.name, _bound(highs, at, types)))
        return paimon_text.sorted_map(nulls), paimon_text.sorted_map(mins), paimon_text.sorted_map(maxs)


def _has_field(schema: TableSchema, name: str) -> bool:
    return any(f.name == name for f in schema.fields)


def _bound(values: tuple[Any, ...] | None, at: int, types: Sequence[pa.DataType]) -> str:
    if values is None or at < 0 or pa.types.is_nested(types[at]):
        return "null"
    return paimon_text.internal_object(values[at], types[at])


def _key_text(key: bytes, types: Sequence[pa.DataType]) -> str | None:
    """``Arrays.toString`` of a min/max key; None for a file without keys."""
    values = _row(key, types) if types else None
    return None if values is None else paimon_text.object_array(values, types)


def files(ctx: TableContext) -> pa.Table:
    """``FilesTable``: every live data file of the latest snapshot."""
    entries = _live(ctx)
    metas = [e.file for e in entries]
    key_types = [ctx.arrow_schema.field(k).type for k in ctx.key_names]
    stats = _ValueStats(ctx)
    rendered = [stats.render(f) for f in metas]
    return pa.table({
        "partition": pa.array([_partition_text(ctx, e.partition) for e in entries], pa.string()),
        "bucket": pa.array([e.bucket for e in entries], pa.int32()),
        "file_path": pa.array([e.file.external_path or ctx.entry_path(e)
                               for e in entries], pa.string()),
        "file_format": pa.array([f.file_name.rpartition(".")[2] for f in metas], pa.string()),
        "schema_id": pa.array([f.schema_id for f in metas], pa.int64()),
        "level": pa.array([f.level for f in metas], pa.int32()),
        "record_count": pa.array([f.row_count for f in metas], pa.int64()),
        "file_size_in_bytes": pa.array([f.file_size for f in metas], pa.int64()),
        "min_key": pa.array([_key_text(f.min_key, key_types) for f in metas], pa.string()),
        "max_key": pa.array([_key_text(f.max_key, key_types) for f in metas], pa.string()),
        "null_value_counts": pa.array([r[0] for r in rendered], pa.string()),
        "min_value_stats": pa.array([r[1] for r in rendered], pa.string()),
        "max_value_stats": pa.array([r[2] for r in rendered], pa.string()),
        "min_sequence_number": pa.array([f.min_sequence_number for f in metas], pa.int64()),
        "max_sequence_number": pa.array([f.max_sequence_number for f in metas], pa.int64()),
        "creation_time": pa.array([f.creation_time_ms for f in metas], pa.int64()).cast(TS),
        "deleteRowCount": pa.array([f.delete_row_count for f in metas], pa.int64()),
        "file_source": pa.array([None if f.file_source is None else FileSource(f.file_source).name for f in metas],
                                pa.string()),
        "first_row_id": pa.array([f.first_row_id for f in metas], pa.int64()),
        "write_cols": pa.array([None if f.write_cols is None else list(f.write_cols) for f in metas],
                               pa.list_(pa.string())),
    })


def _grouped(ctx: TableContext, key: Callable[[ManifestEntry], Any]) -> dict[Any, list[ManifestEntry]]:
    groups: dict[Any, list[ManifestEntry]] = defaultdict(list)
    for entry in _live(ctx):
        groups[key(entry)].append(entry)
    return dict(sorted(groups.items()))


def _sums(groups: dict[Any, list[ManifestEntry]]) -> dict[str, pa.Array]:
    values = list(groups.values())
    return {
        "record_count": pa.array([sum(e.file.row_count for e in g) for g in values], pa.int64()),
        "file_size_in_bytes": pa.array([sum(e.file.file_size for e in g) for g in values], pa.int64()),
        "file_count": pa.array([len(g) for g in values], pa.int64()),
        "last_update_time": pa.array([max((e.file.creation_time_ms or 0) for e in g) for g in values],
                                     pa.int64()).cast(TS),
    }


def _partition_spec(ctx: TableContext, partition: bytes) -> str:
    """``k=v/k2=v2`` with each value cast to STRING (null as ``partition.default-name``)."""
    default = ctx.options.partition_default_name
    return "/".join(f"{k}={default if v is None else paimon_text.cast_to_string(v, t)}" for k, v, t in
                    zip(ctx.partition_keys, ctx.partition_values(partition), ctx.partition_types, strict=True))


def partitions(ctx: TableContext) -> pa.Table:
    """``PartitionsTable`` (sorted by partition). A filesystem catalog keeps no partition
    metadata, so ``created_at``, ``created_by``, ``updated_by`` and ``options`` are null, as
    Paimon shows them for such tables."""
    groups = _grouped(ctx, lambda e: _partition_spec(ctx, e.partition))
    nothing = pa.nulls(len(groups))
    return pa.table({"partition": pa.array(list(groups), pa.string()), **_sums(groups),
                     "created_at": nothing.cast(TS), "created_by": nothing.cast(pa.string()),
                     "updated_by": nothing.cast(pa.string()), "options": nothing.cast(pa.string())})


def buckets(ctx: TableContext) -> pa.Table:
    """``BucketsTable`` (sorted by partition, then bucket)."""
    groups = _grouped(ctx, lambda e: (_partition_text(ctx, e.partition), e.bucket))
    return pa.table({"partition": pa.array([p for p, _ in groups], pa.string()),
                     "bucket": pa.array([b for _, b in groups], pa.int32()), **_sums(groups)})
