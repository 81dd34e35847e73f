"""Batch reads: plan the files of a snapshot into splits, then merge-on-read each split."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from changelake.errors import ScanError
from changelake.table.format import binary_row, data_file, kv
from changelake.table.format.manifest import DataFileMeta, ManifestEntry, ManifestFileMeta, SimpleStats
from changelake.table.format.snapshot import Snapshot
from changelake.table.lsm.levels import interval_partition
from changelake.table.read import live_files

if TYPE_CHECKING:
    import pandas as pd

    from changelake.api.table import Table

_READ_THREADS = 4


@dataclass(frozen=True)
class Split:
    """Files of one bucket that are read (and merged) together.

    ``raw_convertible`` splits hold no overlapping keys and no delete rows, so their rows
    are read as they are, without a merge.
    """

    partition: bytes
    bucket: int
    bucket_dir: str
    files: tuple[DataFileMeta, ...]
    raw_convertible: bool

    @property
    def row_count(self) -> int:
        """Rows stored in the split's files (before merging)."""
        return sum(f.row_count for f in self.files)


def _range_guarantee(names: Sequence[str], types: Sequence[pa.DataType], stats: SimpleStats) -> pc.Expression:
    """What every row covered by ``stats`` satisfies: each column within its [min, max]."""
    if binary_row.deserialize(stats.min_values)[0] != len(types):
        return pc.scalar(True)  # stats of other columns (or none): no guarantee
    lows = binary_row.from_bytes(binary_row.deserialize(stats.min_values)[1], types)
    highs = binary_row.from_bytes(binary_row.deserialize(stats.max_values)[1], types)
    guarantee = pc.scalar(True)
    for name, t, low, high in zip(names, types, lows, highs, strict=True):
        if low is None or high is None:
            continue
        field = pc.field(name)
        if low == high:
            guarantee = guarantee & (field == pc.scalar(pa.scalar(low, t)))
        else:
            guarantee = guarantee & (field >= pc.scalar(pa.scalar(low, t))) & (field <= pc.scalar(pa.scalar(high, t)))
    return guarantee


def _prune(candidates: Sequence[Any], guarantees: Sequence[pc.Expression], schema: pa.Schema,
           expression: pc.Expression, table_name: str) -> list[Any]:
    """The candidates whose guarantee does not contradict the filter (Arrow simplifies)."""
    if not candidates:
        return []
    dataset = ds.FileSystemDataset.from_paths(
        [str(i) for i in range(len(candidates))], schema=schema, format=ds.ParquetFileFormat(),
        filesystem=pafs.LocalFileSystem(), partitions=list(guarantees),
    )
    try:
        kept = dataset.get_fragments(filter=expression)
        return [candidates[int(f.path)] for f in kept]
    except pa.ArrowException as exc:
        raise ScanError(f"table {table_name}: filter {expression} does not apply: {exc}") from None


def _pack(
    items: Sequence[list[DataFileMeta]], weight: Callable[[Sequence[DataFileMeta]], int], target: int
) -> list[list[DataFileMeta]]:
    """Ordered bin packing: consecutive items fill a bin up to ``target`` weight."""
    bins: list[list[DataFileMeta]] = []
    current: list[DataFileMeta] = []
    current_weight = 0
    for item in items:
        w = weight(item)
        if current and current_weight + w > target:
            bins.append(current)
            current, current_weight = [], 0
        current += item
        current_weight += w
    if current:
        bins.append(current)
    return bins


class Scan:
    """A read of one snapshot, merged to one row per key (deleted keys absent)."""

    def __init__(
        self,
        table: Table,
        snapshot_id: int | None = None,
        tag: str | None = None,
        timestamp_ms: int | None = None,
        filter: pc.Expression | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        chosen = [n for n, v in (("snapshot_id", snapshot_id), ("tag", tag), ("timestamp_ms", timestamp_ms))
                  if v is not None]
        if len(chosen) > 1:
            raise ScanError(f"table {table.name}: give at most one of snapshot_id, tag, timestamp_ms; got {chosen}")
        if columns is not None:
            unknown = [c for c in columns if c not in table.schema.names]
            if unknown:
                raise ScanError(f"table {table.name}: unknown columns {unknown}; the table has {table.schema.names}")
        if filter is not None and not isinstance(filter, pc.Expression):
            raise ScanError(f"table {table.name}: filter must be a pyarrow.compute.Expression, got {filter!r}")
        self.table = table
        self._snapshot_id = snapshot_id
        self._tag = tag
        self._timestamp_ms = timestamp_ms
        self.filter = filter
        self.columns = list(columns) if columns is not None else list(table.schema.names)

    @cached_property
    def snapshot(self) -> Snapshot | None:
        """The snapshot this scan reads (None: the table has none yet)."""
        if self._snapshot_id is not None:
            return self.table.snapshot(self._snapshot_id)
        if self._tag is not None:
            return self.table.tag(self._tag)
        if self._timestamp_ms is not None:
            return self.table.snapshot_at(self._timestamp_ms)
        return self.table.latest_snapshot()

    @cached_property
    def output_schema(self) -> pa.Schema:
        """Schema of the rows this scan returns."""
        return pa.schema([self.table.schema.field(c) for c in self.columns])

    def _prune_manifests(self, manifests: list[ManifestFileMeta]) -> list[ManifestFileMeta]:
        table = self.table
        if self.filter is None or not table.partition_keys:
            return manifests
        guarantees = [_range_guarantee(table.partition_keys, table.partition_types, m.partition_stats)
                      for m in manifests]
        return _prune(manifests, guarantees, table.schema, self.filter, table.name)

    def _prune_files(self, entries: list[ManifestEntry]) -> list[ManifestEntry]:
        if self.filter is None:
            return entries
        table = self.table
        key_types = [table.schema.field(k).type for k in table.key_names]
        guarantees = []
        for entry in entries:
            values = binary_row.from_bytes(binary_row.deserialize(entry.partition)[1], table.partition_types)
            guarantee = _range_guarantee(table.key_names, key_types, entry.file.key_stats)
            for name, t, value in zip(table.partition_keys, table.partition_types, values, strict=True):
                field = pc.field(name)
                guarantee = guarantee & (field.is_null() if value is None else field == pc.scalar(pa.scalar(value, t)))
            guarantees.append(guarantee)
        return _prune(entries, guarantees, table.schema, self.filter, table.name)

    def plan(self) -> list[Split]:
        """The splits to read. Per bucket, files whose key ranges overlap stay in one split
        (interval partition into sections); sections are packed up to
        ``source.split.target-size``, each file weighing at least ``source.split.open-file-cost``."""
        if self.snapshot is None:
            return []
        manifests = self._prune_manifests(live_files.data_manifests(self.table, self.snapshot))
        entries = self._prune_files(live_files.live_entries(self.table, self.snapshot, manifests))
        buckets = live_files.files_by_bucket(entries)
        splits = []
        for (partition, bucket), files in sorted(buckets.items(), key=lambda item: item[0]):
            bucket_dir = self.table.bucket_dir(partition, bucket)
            for group, raw in self._split_bucket(files):
                splits.append(Split(partition, bucket, bucket_dir, tuple(group), raw))
        return splits

    def _split_bucket(self, files: list[DataFileMeta]) -> list[tuple[list[DataFileMeta], bool]]:
        config = self.table.config
        target, open_cost = config.split_target_size, config.split_open_file_cost

        def weight(group: Sequence[DataFileMeta]) -> int:
            return max(sum(f.file_size for f in group), open_cost)

        no_deletes = all(f.level != 0 and f.delete_row_count == 0 for f in files)
        first_row = self.table.merge_engine.engine == "first-row"
        if no_deletes and (len({f.level for f in files}) == 1 or first_row):
            # One sorted run without deletes: every file is read as it is.
            ordered = sorted(files, key=lambda f: self.table.key_of(f.min_key))
            return [(g, True) for g in _pack([[f] for f in ordered], weight, target)]
        sections = [[f for run in section for f in run.files]
                    for section in interval_partition(files, self.table.key_of)]
        return [(g, len(g) == 1 and g[0].delete_row_count == 0) for g in _pack(sections, weight, target)]

    def _read_columns(self) -> list[str]:
        if self.filter is not None:
            return list(self.table.schema.names)
        return self.table.merge_engine.required_columns(self.columns)

    def read_split(self, split: Split) -> pa.Table:
        """The merged rows of one split, filtered and projected."""
        table = self.table
        key_columns = [kv.key_column(k) for k in table.key_names]
        wanted = [*key_columns, kv.SEQUENCE, kv.VALUE_KIND, *self._read_columns()]
        file_schema = kv.file_schema(table.schema, table.key_names)
        parts = [data_file.read(table.file_io, f"{split.bucket_dir}/{f.file_name}", file_schema, wanted)
                 for f in split.files]
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        # Raw splits hold no deletes by their metadata; dropping retractions anyway guards
        # against writers whose delete counts are wrong.
        rows = kv.drop_retractions(rows) if split.raw_convertible else table.merge_rows(rows, drop_deletes=True)
        if self.filter is not None:
            try:
                rows = rows.filter(self.filter)
            except pa.ArrowException as exc:
                raise ScanError(f"table {table.name}: filter {self.filter} does not apply: {exc}") from None
        return rows.select(self.columns)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Merged rows as a stream of record batches, a few splits in memory at a time."""
        splits = self.plan()
        with ThreadPoolExecutor(max_workers=_READ_THREADS) as pool:
            window = _READ_THREADS * 2
            futures = [pool.submit(self.read_split, s) for s in splits[:window]]
            next_index = len(futures)
            while futures:
                result = futures.pop(0).result()
                if next_index < len(splits):
                    futures.append(pool.submit(self.read_split, splits[next_index]))
                    next_index += 1
                yield from result.cast(self.output_schema).to_batches()

    def to_arrow(self) -> pa.Table:
        """All merged rows of the snapshot as one Arrow table."""
        splits = self.plan()
        if not splits:
            return self.output_schema.empty_table()
        with ThreadPoolExecutor(max_workers=_READ_THREADS) as pool:
            tables = list(pool.map(self.read_split, splits))
        return pa.concat_tables(tables).cast(self.output_schema)

    def to_pandas(self) -> pd.DataFrame:
        """All merged rows as a pandas DataFrame."""
        return self.to_arrow().to_pandas()
