"""Writing rows: bucket, sort, merge within the batch, level-0 files, one commit."""

from __future__ import annotations

from collections.abc import Sequence
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
class BucketRows:
    """Rows of one (partition, bucket) in input order, before sequence numbers."""

    partition: bytes
    bucket: int
    rows: pa.Table
    kinds: np.ndarray


def file_settings(table: Table) -> data_file.FileSettings:
    config = table.config
    return data_file.FileSettings(
        schema_id=table.paimon_schema.id,
        key_names=table.key_names,
        compression=config.file_compression,
        zstd_level=config.zstd_level,
        target_file_size=config.target_file_size,
    )


def split_by_bucket(table: Table, data: pa.Table, kinds: np.ndarray) -> list[BucketRows]:
    """Group conformed rows by partition and bucket (input order kept inside a group)."""
    num_buckets = table.config.bucket
    if num_buckets < 1:
        raise OptionError(
            f"table {table.name}: bucket={num_buckets} (dynamic bucket mode) is not supported "
            "for writing; create the table with a fixed 'bucket'"
        )
    n = data.num_rows
    bucket_ids = bucket.buckets([data.column(k) for k in table.bucket_key], num_buckets).astype(np.int64)
    codes = bucket_ids
    partition_columns = [data.column(k) for k in table.partition_keys]
    for column in partition_columns:
        encoded = pc.dictionary_encode(column).combine_chunks()
        codes = codes + np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64) * (
            int(codes.max()) + 1 if n else 1
        )
    unique, first_index, inverse = np.unique(codes, return_index=True, return_inverse=True)
    arity = len(partition_columns)
    partitions = binary_row.encode([c.take(pa.array(first_index)) for c in partition_columns]) if arity else None
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
    groups = []
    for g in range(len(unique)):
        idx = order[bounds[g] : bounds[g + 1]]
        partition = binary_row.serialize(partitions.row(g) if partitions is not None
                                         else binary_row.to_bytes([], []), arity)
        groups.append(BucketRows(partition, int(bucket_ids[first_index[g]]), data.take(idx), kinds[idx]))
    return groups


def restored_sequences(table: Table, groups: Sequence[BucketRows]) -> dict[tuple[bytes, int], int]:
    """Next sequence number of each touched bucket: one past the restored maximum."""
    latest = table.latest_snapshot()
    out = {(g.partition, g.bucket): 0 for g in groups}
    if latest is None:
        return out
    for entry in live_files.live_entries(table, latest):
        key = (entry.partition, entry.bucket)
        if key in out:
            out[key] = max(out[key], entry.file.max_sequence_number + 1)
    return out


def to_key_values(table: Table, group: BucketRows, first_sequence: int) -> pa.Table:
    """A bucket's rows in file layout, merged within the batch (last row per key wins)."""
    n = group.rows.num_rows
    keys = [group.rows.column(k) for k in table.key_names]
    system = [
        pa.array(np.arange(first_sequence, first_sequence + n, dtype=np.int64)),
        pa.array(group.kinds, type=pa.int8()),
    ]
    schema = kv.file_schema(table.schema, table.key_names)
    laid_out = pa.Table.from_arrays(keys + system + list(group.rows.columns), schema=schema)
    return kv.deduplicate(laid_out, [kv.key_column(k) for k in table.key_names])


def write_bucket(table: Table, group: BucketRows, first_sequence: int) -> CommitMessage:
    merged = to_key_values(table, group, first_sequence)
    settings = file_settings(table)
    bucket_dir = table.bucket_dir(group.partition, group.bucket)
    files = tuple(
        data_file.write(table.file_io, bucket_dir, part, settings, level=0)
        for part in data_file.roll(merged, settings.target_file_size)
    )
    return CommitMessage(group.partition, group.bucket, table.config.bucket, new_files=files)


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
        groups = split_by_bucket(self.table, data, kinds)
        sequences = restored_sequences(self.table, groups)
        with ThreadPoolExecutor(max_workers=min(4, len(groups))) as pool:
            return list(pool.map(lambda g: write_bucket(self.table, g, sequences[(g.partition, g.bucket)]),
                                 groups))

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
