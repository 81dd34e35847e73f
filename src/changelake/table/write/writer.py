"""Writing rows: bucket, sort, merge within the batch, level-0 files, one commit."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import CommitConflictError, OptionError
from changelake.table.commit import committer as commit
from changelake.table.commit.committer import CommitMessage
from changelake.table.format import binary_row, bucket, data_file, kv
from changelake.table.format.manifest import DataFileMeta
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.lsm import compactor as compaction
from changelake.table.lsm.levels import Levels
from changelake.table.read import live_files
from changelake.table.write import conform as rows
from changelake.table.write import spill

if TYPE_CHECKING:
    import pandas as pd

    from changelake.api.table import Table

# Background compactions of different buckets run side by side (up to one per core, at most 4).
_COMPACTION_THREADS = max(1, min(4, os.cpu_count() or 1))

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
    latest = table.latest_snapshot()
    live = live_files.files_by_bucket(live_files.live_entries(table, latest) if latest is not None else [])
    return {(p, b): live.get((p, b), []) for p, b in zip(groups.partitions, groups.buckets, strict=True)}


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
    engine = table.merge_engine
    if engine.engine == "deduplicate" and not engine.sequence_fields:
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
    """A writer's view of one (partition, bucket): its LSM levels (committed files plus this
    writer's uncommitted ones), the next sequence number, and work not yet committed."""

    partition: bytes
    bucket: int
    levels: Levels
    next_sequence: int
    spilled: list[spill.SpilledRun] = field(default_factory=list)
    new_files: list[DataFileMeta] = field(default_factory=list)
    compacted: compaction.CompactResult = field(default_factory=compaction.CompactResult)
    running: Future[compaction.CompactResult] | None = None


class TableWriter:
    """Buffers rows and commits them; with a stable ``commit_user``, each commit identifier
    lands at most once (a replayed identifier is skipped).

    Rows are buffered up to ``write-buffer-size``; past it they are sorted and either spilled
    to a local temp directory (``write-buffer-spillable``, merged at commit) or flushed as
    level-0 files. Each bucket is an LSM tree: after a flush, universal compaction runs in a
    background thread and its result lands with a later commit as a COMPACT snapshot, except
    that a commit waits for compaction when the bucket has more sorted runs than
    ``num-sorted-run.stop-trigger``, with ``commit.force-compact``, for a full compaction
    (``full-compaction.delta-commits``), and for one-shot writers (``Table.write``).
    ``write-only`` disables compaction. Call :meth:`close` (or use ``with``) when done.
    """

    def __init__(self, table: Table, commit_user: str, wait_compaction: bool = False) -> None:
        self.table = table
        self.commit_user = commit_user
        self.wait_compaction = wait_compaction
        self._pending: list[tuple[pa.Table, np.ndarray]] = []
        self._pending_bytes = 0
        self._buckets: dict[tuple[bytes, int], _Bucket] = {}
        self._spill_dir: str | None = None
        self._compactor: ThreadPoolExecutor | None = None
        self._commits = 0
        # Messages of a commit that failed for a reason other than a conflict (an I/O error,
        # say): committing again, with the same identifier, retries exactly these.
        self._unlanded: list[CommitMessage] = []

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def write(self, data: WriteInput) -> None:
        """Validate and buffer rows (an optional ``rowkind`` column gives +I/-U/+U/-D)."""
        if isinstance(data, pa.RecordBatchReader):
            for batch in data:  # a stream is buffered batch by batch, never read whole
                self.write(pa.Table.from_batches([batch]))
            return
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
        """Drop everything not committed: buffered rows, spill files, data files written
        since the last commit, and compaction results not yet committed."""
        self._pending.clear()
        self._pending_bytes = 0
        for state in self._buckets.values():
            self._discard(state)
        self._buckets.clear()
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None

    def close(self) -> None:
        """Abort what is not committed and stop the background compaction thread."""
        self.abort()
        if self._compactor is not None:
            self._compactor.shutdown(wait=True)
            self._compactor = None

    def _discard(self, state: _Bucket) -> None:
        bucket_dir = self.table.bucket_dir(state.partition, state.bucket)
        running, state.running = state.running, None
        if running is not None:
            try:
                result = running.result()
            except Exception:  # a discarded compaction's failure is moot
                result = compaction.CompactResult()
            for f in state.compacted.merge(result):
                self.table.file_io.delete(f"{bucket_dir}/{f.file_name}")
        kept = {f.file_name for f in state.compacted.before}
        for f in [*state.new_files, *state.compacted.after]:
            if f.file_name not in kept:
                self.table.file_io.delete(f"{bucket_dir}/{f.file_name}")

    def _flush(self, final: bool) -> None:
        """Sort and merge the buffer per bucket; spill it, or write it as level-0 files."""
        if not self._pending:
            return
        data = pa.concat_tables([t for t, _ in self._pending])
        kinds = np.concatenate([k for _, k in self._pending])
        self._pending.clear()
        self._pending_bytes = 0
        groups = group_by_bucket(self.table, data)
        keys = list(zip(groups.partitions, groups.buckets, strict=True))
        unknown = [key for key in keys if key not in self._buckets]
        if unknown:
            restored = restored_files(self.table, groups)
            for key in unknown:
                files = restored[key]
                first = max((f.max_sequence_number + 1 for f in files), default=0)
                self._buckets[key] = _Bucket(key[0], key[1], Levels(tuple(files), self.table.config.num_levels), first)
        states = [self._buckets[key] for key in keys]
        firsts = np.array([s.next_sequence for s in states], dtype=np.int64)
        merged = sort_and_merge(self.table, data, kinds, groups, firsts)
        spill = not final and self.table.config.write_buffer_spillable
        for state, part in zip(states, merged, strict=True):
            # Sequences are the group's first number plus the row's position in this flush.
            state.next_sequence += data.num_rows
            if spill:
                state.spilled.append(self._spill(part))
        if not spill:
            # Buckets with spilled runs merge one at a time, to keep memory near one buffer.
            workers = 1 if any(s.spilled for s in states) else min(4, len(states))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                list(pool.map(lambda job: self._write_level0(*job), zip(states, merged, strict=True)))

    def _spill(self, part: pa.Table) -> spill.SpilledRun:
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="changelake-spill-")
        return spill.SpilledRun.write(os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.arrow"), part,
                                kv.key_column(self.table.key_names[0]))

    def _write_level0(self, state: _Bucket, part: pa.Table) -> None:
        table = self.table
        chunks: Iterable[pa.Table] = [part]
        if state.spilled:
            chunks = spill.merge_runs(table, state.spilled, part)
        bucket_dir = table.bucket_dir(state.partition, state.bucket)
        files = data_file.write(table.file_io, bucket_dir, chunks, table.file_settings, level=0)
        state.new_files += files
        state.levels = state.levels.replace((), files)
        for run in state.spilled:
            os.unlink(run.path)
        state.spilled.clear()

    def _collect(self, state: _Bucket) -> None:
        """Take in a background compaction's result (waiting for it if still running)."""
        running, state.running = state.running, None
        if running is None:
            return
        result = running.result()
        state.levels = state.levels.replace(result.before, result.after)
        bucket_dir = self.table.bucket_dir(state.partition, state.bucket)
        for f in state.compacted.merge(result):
            self.table.file_io.delete(f"{bucket_dir}/{f.file_name}")

    def _compact(self, state: _Bucket, full: bool) -> None:
        table = self.table
        config = table.config
        if config.write_only:
            return
        if state.running is not None and state.running.done():
            self._collect(state)
        bucket_dir = table.bucket_dir(state.partition, state.bucket)
        runs = len(state.levels.sorted_runs(table.key_of))
        if full or self.wait_compaction or config.commit_force_compact or runs > config.stop_trigger:
            self._collect(state)
            state.levels, result = compaction.compact_bucket(table, bucket_dir, state.levels, full)
            for f in state.compacted.merge(result):
                table.file_io.delete(f"{bucket_dir}/{f.file_name}")
        elif state.running is None and self._compactor is not None:
            unit = compaction.picker(table).pick(state.levels.num_levels, state.levels.sorted_runs(table.key_of))
            if unit is not None:
                state.running = self._compactor.submit(compaction.compact, table, bucket_dir, state.levels, unit)

    def prepare(self, full_compaction: bool = False) -> list[CommitMessage]:
        """Flush everything as level-0 files and compact as the buckets need: the messages a
        committer lands (compactions finished since the last commit included)."""
        self._flush(final=True)
        leftover = [s for s in self._buckets.values() if s.spilled]
        if leftover:
            empty = kv.file_schema(self.table.schema, self.table.key_names).empty_table()
            for state in leftover:
                self._write_level0(state, empty)
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None
        states = list(self._buckets.values())
        background = not (self.wait_compaction or self.table.config.write_only)
        if background and self._compactor is None:
            self._compactor = ThreadPoolExecutor(_COMPACTION_THREADS, thread_name_prefix="changelake-compact")
        with ThreadPoolExecutor(max_workers=min(4, max(1, len(states)))) as pool:
            list(pool.map(lambda s: self._compact(s, full_compaction), states))
        messages = []
        for state in states:
            if state.new_files or state.compacted.before or state.compacted.after:
                messages.append(CommitMessage(
                    state.partition, state.bucket, self.table.config.bucket, new_files=tuple(state.new_files),
                    compact_before=tuple(state.compacted.before), compact_after=tuple(state.compacted.after),
                ))
            state.new_files = []
            state.compacted = compaction.CompactResult()
        return messages

    def commit(self, identifier: int) -> list[Snapshot]:
        """Flush and commit as ``identifier``; [] if this user already committed it.

        If the commit fails (an I/O error), calling ``commit`` again retries it. A conflict
        that voids the commit raises CommitConflictError and the writer starts afresh."""
        if identifier != BATCH_COMMIT_IDENTIFIER:
            latest = self.table.latest_snapshot()
            mine = commit.latest_of_user(self.table, self.commit_user, latest)
            if mine is not None and mine.commit_identifier >= identifier:
                self._unlanded = []
                self.abort()
                return []
        delta_commits = self.table.config.full_compaction_delta_commits
        self._commits += 1
        full = delta_commits is not None and self._commits % delta_commits == 0
        messages = [*self._unlanded, *self.prepare(full_compaction=full)]
        self._unlanded = []
        if not messages:
            return []
        try:
            landed = commit.commit(self.table, messages, self.commit_user, identifier,
                                   compact_conflicts_fatal=False)
        except CommitConflictError:
            self._forget_buckets()
            raise
        except Exception:
            self._unlanded = messages
            raise
        compacted = any(m.compact_before or m.compact_after for m in messages)
        if not landed or (compacted and landed[-1].commit_kind != "COMPACT"):
            # Skipped, or our compaction lost to another committer: this writer's view of the
            # buckets is stale, so it is restored from the table at the next flush.
            self._forget_buckets()
        return landed

    def _forget_buckets(self) -> None:
        for state in self._buckets.values():
            self._discard(state)
        self._buckets.clear()
