"""Writing rows: bucket, sort, merge within the batch, level-0 files, one commit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import OptionError
from changelake.table import binary_row, bucket, commit, data_file, kv, live_files, rows
from changelake.table.commit import CommitMessage
from changelake.table.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot

if TYPE_CHECKING:
    import pandas as pd

    from changelake.table.table import Table

WriteInput: TypeAlias = "pa.Table | pa.RecordBatch | pa.RecordBatchReader | pd.DataFrame"
_PARTITION = "__partition_group"


@dataclass(frozen=True)
class BucketGroups:
    """Rows tagged with their (partition, bucket) group, in input order."""

    codes: np.ndarray
    partitions: list[bytes]
    buckets: list[int]


def file_settings(table: Table) -> data_file.FileSettings:
    config = table.config
    return data_file.FileSettings(
        schema_id=table.paimon_schema.id,
        key_names=table.key_names,
        compression=config.file_compression,
        zstd_level=config.zstd_level,
        target_file_size=config.target_file_size,
    )


def group_by_bucket(table: Table, data: pa.Table) -> BucketGroups:
    """The (partition, bucket) group of every row."""
    num_buckets = table.config.bucket
    if num_buckets < 1:
        raise OptionError(
            f"table {table.name}: bucket={num_buckets} (dynamic bucket mode) is not supported "
            "for writing; create the table with a fixed 'bucket'"
        )
    bucket_ids = bucket.buckets([data.column(k) for k in table.bucket_key], num_buckets).astype(np.int64)
    codes = bucket_ids
    radix = num_buckets
    partition_columns = [data.column(k) for k in table.partition_keys]
    for column in partition_columns:
        encoded = pc.dictionary_encode(column).combine_chunks()
        codes = codes + np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64) * radix
        radix *= max(1, len(encoded.dictionary))
    unique, first_rows, inverse = np.unique(codes, return_index=True, return_inverse=True)
    arity = len(partition_columns)
    if arity:
        encoded_rows = binary_row.encode([c.take(pa.array(first_rows)) for c in partition_columns])
        partitions = [binary_row.serialize(encoded_rows.row(g), arity) for g in range(len(unique))]
    else:
        partitions = [binary_row.serialize(binary_row.to_bytes([], []), 0)] * len(unique)
    return BucketGroups(inverse.astype(np.int64), partitions, [int(bucket_ids[i]) for i in first_rows])


def restored_sequences(table: Table, groups: BucketGroups) -> np.ndarray:
    """Next sequence number of each group's bucket: one past the restored maximum."""
    latest = table.latest_snapshot()
    index = {(p, b): g for g, (p, b) in enumerate(zip(groups.partitions, groups.buckets, strict=True))}
    out = np.zeros(len(index), dtype=np.int64)
    if latest is None:
        return out
    for entry in live_files.live_entries(table, latest):
        g = index.get((entry.partition, entry.bucket))
        if g is not None:
            out[g] = max(out[g], entry.file.max_sequence_number + 1)
    return out


def to_key_values(table: Table, data: pa.Table, kinds: np.ndarray, groups: BucketGroups) -> tuple[pa.Table, np.ndarray]:
    """All rows in file layout, sorted by (group, key), merged within the batch (last row per
    key wins), with each row's group. Sequence numbers follow input order in every bucket."""
    n = data.num_rows
    position = np.arange(n, dtype=np.int64)
    sequence = restored_sequences(table, groups)[groups.codes] + position
    keys = [data.column(k) for k in table.key_names]
    order = kv.sort_indices([pa.array(groups.codes), *keys], pa.array(position))
    sorted_codes = groups.codes[order]
    ends = kv.group_ends([pa.array(sorted_codes), *(k.take(order) for k in keys)])
    keep = order[ends]
    schema = kv.file_schema(table.schema, table.key_names)
    columns = [*keys, pa.array(sequence), pa.array(kinds, type=pa.int8()), *data.columns]
    laid_out = pa.Table.from_arrays(columns, schema=schema).take(keep)
    return laid_out, sorted_codes[ends]


def write_bucket(table: Table, partition: bytes, bucket_id: int, merged: pa.Table) -> CommitMessage:
    settings = file_settings(table)
    bucket_dir = table.bucket_dir(partition, bucket_id)
    files = tuple(
        data_file.write(table.file_io, bucket_dir, part, settings, level=0)
        for part in data_file.roll(merged, settings.target_file_size)
    )
    return CommitMessage(partition, bucket_id, table.config.bucket, new_files=files)


class TableWriter:
    """Buffers rows and commits them; with a stable ``commit_user``, each commit identifier
    lands at most once (a replayed identifier is skipped)."""

    def __init__(self, table: Table, commit_user: str) -> None:
        self.table = table
        self.commit_user = commit_user
        self._pending: list[tuple[pa.Table, np.ndarray]] = []

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.abort()

    def write(self, data: WriteInput) -> None:
        """Validate and buffer rows (an optional ``rowkind`` column gives +I/-U/+U/-D)."""
        arrow = rows.to_arrow(data, self.table.name)
        conformed, kinds = rows.conform(self.table, arrow)
        if conformed.num_rows:
            self._pending.append((conformed, kinds))

    def abort(self) -> None:
        """Drop buffered rows that were not committed."""
        self._pending.clear()

    def prepare(self) -> list[CommitMessage]:
        """Write the buffered rows as level-0 files; the messages a committer lands."""
        if not self._pending:
            return []
        data = pa.concat_tables([t for t, _ in self._pending])
        kinds = np.concatenate([k for _, k in self._pending])
        self._pending.clear()
        groups = group_by_bucket(self.table, data)
        merged, codes = to_key_values(self.table, data, kinds, groups)
        bounds = np.searchsorted(codes, np.arange(len(groups.partitions) + 1))
        jobs = [
            (groups.partitions[g], groups.buckets[g], merged.slice(bounds[g], bounds[g + 1] - bounds[g]))
            for g in range(len(groups.partitions))
        ]
        with ThreadPoolExecutor(max_workers=min(4, len(jobs))) as pool:
            return list(pool.map(lambda job: write_bucket(self.table, *job), jobs))

    def commit(self, identifier: int) -> list[Snapshot]:
        """Flush and commit as ``identifier``; [] if this user already committed it."""
        if identifier != BATCH_COMMIT_IDENTIFIER:
            latest = self.table.latest_snapshot()
            mine = commit.latest_of_user(self.table, self.commit_user, latest)
            if mine is not None and mine.commit_identifier >= identifier:
                self.abort()
                return []
        messages = self.prepare()
        if not messages:
            return []
        return commit.commit(self.table, messages, self.commit_user, identifier)
