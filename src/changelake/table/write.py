"""Writing rows: bucket, sort, merge within the batch, level-0 files, one commit."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import OptionError
from changelake.table import binary_row, bucket, commit, compaction, data_file, kv, live_files, rows
from changelake.table.commit import CommitMessage
from changelake.table.levels import Levels
from changelake.table.manifest import DataFileMeta
from changelake.table.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot

if TYPE_CHECKING:
    import pandas as pd

    from changelake.table.table import Table

WriteInput: TypeAlias = "pa.Table | pa.RecordBatch | pa.RecordBatchReader | pd.DataFrame"


@dataclass(frozen=True)
class BucketGroups:
    """Rows tagged with their (partition, bucket) group, in input order."""

    codes: np.ndarray
    partitions: list[bytes]
    buckets: list[int]


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


def restored_files(table: Table, groups: BucketGroups) -> dict[tuple[bytes, int], list[DataFileMeta]]:
    """Live files of every bucket the rows go to (from the latest snapshot)."""
    out: dict[tuple[bytes, int], list[DataFileMeta]] = {
        (p, b): [] for p, b in zip(groups.partitions, groups.buckets, strict=True)
    }
    latest = table.latest_snapshot()
    if latest is not None:
        for entry in live_files.live_entries(table, latest):
            files = out.get((entry.partition, entry.bucket))
            if files is not None:
                files.append(entry.file)
    return out


def sort_and_merge(table: Table, data: pa.Table, kinds: np.ndarray, groups: BucketGroups,
                   first_sequences: np.ndarray) -> list[pa.Table]:
    """Each group's rows in file layout, sorted by key and merged within the batch by the
    merge engine. Sequence numbers follow input order within every bucket."""
    n = data.num_rows
    position = np.arange(n, dtype=np.int64)
    sequence = first_sequences[groups.codes] + position
    keys = [data.column(k) for k in table.key_names]
    order = kv.sort_indices([pa.array(groups.codes), *keys], pa.array(position))
    sorted_codes = groups.codes[order]
    schema = kv.file_schema(table.schema, table.key_names)
    columns = [*keys, pa.array(sequence), pa.array(kinds, type=pa.int8()), *data.columns]
    laid_out = pa.Table.from_arrays(columns, schema=schema)
    if table.config.merge_engine == "deduplicate":
        # One global pass: the last row of every (group, key) wins.
        ends = kv.group_ends([pa.array(sorted_codes), *(k.take(order) for k in keys)])
        merged, codes = laid_out.take(order[ends]), sorted_codes[ends]
        bounds = np.searchsorted(codes, np.arange(len(groups.partitions) + 1))
        return [merged.slice(bounds[g], bounds[g + 1] - bounds[g]) for g in range(len(groups.partitions))]
    ordered = laid_out.take(order)
    bounds = np.searchsorted(sorted_codes, np.arange(len(groups.partitions) + 1))
    return [table.merge_rows(ordered.slice(bounds[g], bounds[g + 1] - bounds[g]), drop_deletes=False)
            for g in range(len(groups.partitions))]


@dataclass
class _Bucket:
    """Writer state of one (partition, bucket): restored files, next sequence, unflushed output."""

    partition: bytes
    bucket: int
    restored: list[DataFileMeta]
    next_sequence: int
    spilled: list[str] = field(default_factory=list)
    new_files: list[DataFileMeta] = field(default_factory=list)


class TableWriter:
    """Buffers rows and commits them; with a stable ``commit_user``, each commit identifier
    lands at most once (a replayed identifier is skipped).

    Rows are buffered up to ``write-buffer-size``; past it they are sorted and either spilled
    to a local temp directory (``write-buffer-spillable``, merged at commit) or flushed as
    level-0 files. At commit, each touched bucket is compacted as its LSM tree needs
    (unless ``write-only``) and the commit lands as an APPEND and, if anything was
    compacted, a COMPACT snapshot.
    """

    def __init__(self, table: Table, commit_user: str) -> None:
        self.table = table
        self.commit_user = commit_user
        self._pending: list[tuple[pa.Table, np.ndarray]] = []
        self._pending_bytes = 0
        self._buckets: dict[tuple[bytes, int], _Bucket] = {}
        self._spill_dir: str | None = None
        self._commits = 0

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.abort()

    def write(self, data: WriteInput) -> None:
        """Validate and buffer rows (an optional ``rowkind`` column gives +I/-U/+U/-D)."""
        arrow = rows.to_arrow(data, self.table.name)
        limit = self.table.config.write_buffer_size
        per_row = max(1, arrow.nbytes // max(1, arrow.num_rows))
        step = max(1, limit // (2 * per_row))
        for start in range(0, max(1, arrow.num_rows), step):
            conformed, kinds = rows.conform(self.table, arrow.slice(start, step))
            if conformed.num_rows:
                self._pending.append((conformed, kinds))
                self._pending_bytes += conformed.nbytes
            if self._pending_bytes > limit:
                self._flush(final=False)

    def abort(self) -> None:
        """Drop everything not committed: buffered rows, spill files, unflushed data files."""
        self._pending.clear()
        self._pending_bytes = 0
        for state in self._buckets.values():
            for f in state.new_files:
                self.table.file_io.delete(f"{self.table.bucket_dir(state.partition, state.bucket)}/{f.file_name}")
        self._buckets.clear()
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None

    def _flush(self, final: bool) -> None:
        """Sort and merge the buffer per bucket; spill it, or write it as level-0 files."""
        if not self._pending:
            return
        data = pa.concat_tables([t for t, _ in self._pending])
        kinds = np.concatenate([k for _, k in self._pending])
        self._pending.clear()
        self._pending_bytes = 0
        groups = group_by_bucket(self.table, data)
        unknown = [(p, b) for p, b in zip(groups.partitions, groups.buckets, strict=True)
                   if (p, b) not in self._buckets]
        if unknown:
            restored = restored_files(self.table, groups)
            for key in unknown:
                files = restored[key]
                first = max((f.max_sequence_number + 1 for f in files), default=0)
                self._buckets[key] = _Bucket(key[0], key[1], files, first)
        states = [self._buckets[(p, b)] for p, b in zip(groups.partitions, groups.buckets, strict=True)]
        firsts = np.array([s.next_sequence for s in states], dtype=np.int64)
        merged = sort_and_merge(self.table, data, kinds, groups, firsts)
        spill = not final and self.table.config.write_buffer_spillable
        for state, part in zip(states, merged, strict=True):
            # Sequences are the group's first number plus the row's position in this flush.
            state.next_sequence += data.num_rows
            if spill:
                state.spilled.append(self._spill(part))
        if not spill:
            with ThreadPoolExecutor(max_workers=min(4, len(states))) as pool:
                list(pool.map(lambda job: self._write_level0(*job), zip(states, merged, strict=True)))

    def _spill(self, part: pa.Table) -> str:
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="changelake-spill-")
        path = os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(
            sink, part.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")
        ) as out:
            out.write_table(part)
        return path

    def _write_level0(self, state: _Bucket, part: pa.Table) -> None:
        table = self.table
        if state.spilled:
            runs = [part] + [pa.ipc.open_file(pa.memory_map(p)).read_all() for p in state.spilled]
            part = table.merge_rows(pa.concat_tables(runs), drop_deletes=False)
            for p in state.spilled:
                os.unlink(p)
            state.spilled.clear()
        bucket_dir = table.bucket_dir(state.partition, state.bucket)
        settings = table.file_settings
        state.new_files += [
            data_file.write(table.file_io, bucket_dir, chunk, settings, level=0)
            for chunk in data_file.roll(part, settings.target_file_size)
        ]

    def prepare(self, full_compaction: bool = False) -> list[CommitMessage]:
        """Flush everything as level-0 files and compact the touched buckets: the messages a
        committer lands."""
        self._flush(final=True)
        leftover = [s for s in self._buckets.values() if s.spilled]
        if leftover:
            empty = kv.file_schema(self.table.schema, self.table.key_names).empty_table()
            for state in leftover:
                self._write_level0(state, empty)
        states = [s for s in self._buckets.values() if s.new_files]
        self._buckets.clear()
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None
        compact = not self.table.config.write_only
        with ThreadPoolExecutor(max_workers=min(4, max(1, len(states)))) as pool:
            return list(pool.map(lambda s: self._message(s, compact, full_compaction), states))

    def _message(self, state: _Bucket, compact: bool, full: bool) -> CommitMessage:
        table = self.table
        before: list[DataFileMeta] = []
        after: list[DataFileMeta] = []
        if compact:
            levels = Levels(tuple(state.restored + state.new_files), table.config.num_levels)
            _, result = compaction.compact_bucket(table, table.bucket_dir(state.partition, state.bucket), levels, full)
            before, after = result.before, result.after
        return CommitMessage(state.partition, state.bucket, table.config.bucket, new_files=tuple(state.new_files),
                             compact_before=tuple(before), compact_after=tuple(after))

    def commit(self, identifier: int) -> list[Snapshot]:
        """Flush and commit as ``identifier``; [] if this user already committed it."""
        if identifier != BATCH_COMMIT_IDENTIFIER:
            latest = self.table.latest_snapshot()
            mine = commit.latest_of_user(self.table, self.commit_user, latest)
            if mine is not None and mine.commit_identifier >= identifier:
                self.abort()
                return []
        delta_commits = self.table.config.full_compaction_delta_commits
        self._commits += 1
        full = delta_commits is not None and self._commits % delta_commits == 0
        messages = self.prepare(full_compaction=full)
        if not messages:
            return []
        return commit.commit(self.table, messages, self.commit_user, identifier, compact_conflicts_fatal=False)
