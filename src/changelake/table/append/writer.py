"""Writing an append table: rows go to their (partition, bucket) in input order and become
level-0 files of plain rows, numbered in write order; one commit lands them.

As Paimon's ``AppendOnlyWriter``: nothing is sorted or merged, the files hold the table's
columns only (no ``_KEY_``, ``_SEQUENCE_NUMBER`` or ``_VALUE_KIND``), their keys are empty and
their sequence numbers count the rows of the bucket. An unaware table (``bucket = -1``) writes
every partition's files to ``bucket-0`` with ``_TOTAL_BUCKETS = -1``; a fixed-bucket table hashes
``bucket-key`` as primary-key tables do. Rows continue the numbers committed in their bucket, so
files read back in the order they were committed, whoever wrote them (a commit racing another
in the same bucket is renumbered by the committer). Only inserts (+I, +U) are taken, as Paimon's
append writer takes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from changelake.errors import CommitConflictError, CommitOutcomeUnknownError, RowKindError
from changelake.table import snapshot_expiry
from changelake.table.append import compaction
from changelake.table.append.definition import UNAWARE_BUCKET
from changelake.table.commit import committer
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import binary_row, bucket, data_file, kv
from changelake.table.format.manifest import DataFileMeta
from changelake.table.format.snapshot import Snapshot
from changelake.table.write import bucketing
from changelake.table.write import conform as rows
from changelake.table.write.partitions import value_codes

if TYPE_CHECKING:
    from changelake.table.write.conform import WriteInput

Where = tuple[bytes, int]  # (partition, bucket)


@dataclass(frozen=True)
class _Checkpoint:
    """A writer's state before a write call, to return to if the call fails."""

    pending: tuple[pa.Table, ...]
    pending_bytes: int
    written: dict[Where, int]
    next_sequence: dict[Where, int]


class AppendWrite:
    """Buffers an append table's rows and commits them; with a stable ``commit_user``, each
    commit identifier lands at most once (a replayed identifier is skipped).

    Rows are buffered up to ``write-buffer-size``, then written as level-0 files per (partition,
    bucket), rolling at ``target-file-size``. A commit lands them as an APPEND snapshot; then a
    fixed-bucket table's writer (unless ``write-only``) compacts the buckets it wrote whose
    small files a pick takes (see :mod:`changelake.table.append.compaction`), landed as a
    COMPACT snapshot right after. Call :meth:`close` (or use ``with``) when done.
    """

    # The snapshot a compaction looked up: append compactions look nothing up.
    view: int | None = None

    def __init__(self, ctx: TableContext, commit_user: str) -> None:
        self.ctx = ctx
        self.commit_user = commit_user
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        self._written: dict[Where, list[DataFileMeta]] = {}
        self._next_sequence: dict[Where, int] = {}
        # Messages of a commit that failed for a reason other than a conflict: committing
        # again, with the same identifier, retries exactly these. Whether it may have landed.
        self._unlanded: list[CommitMessage] = []
        self._unlanded_unknown = False

    def __enter__(self) -> AppendWrite:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def write(self, data: WriteInput) -> None:
        """Validate and buffer rows (an optional ``rowkind`` column may say +I or +U; -U and -D
        are refused: an append table keeps every row). A call that raises leaves the writer
        exactly as it was before the call."""
        checkpoint = self._checkpoint()
        try:
            for part in rows.input_tables(data, self.ctx.name):
                self._buffer(part)
        except BaseException:
            self._restore(checkpoint)
            raise

    def _checkpoint(self) -> _Checkpoint:
        return _Checkpoint(tuple(self._pending), self._pending_bytes,
                           {where: len(files) for where, files in self._written.items()}, dict(self._next_sequence))

    def _restore(self, checkpoint: _Checkpoint) -> None:
        """Undo a failed write call or flush: its rows leave the buffer, the files written
        meanwhile are deleted, and rows buffered before, which those files also took, are
        buffered again."""
        self._pending = list(checkpoint.pending)
        self._pending_bytes = checkpoint.pending_bytes
        for where, files in list(self._written.items()):
            kept = checkpoint.written.get(where, 0)
            self.ctx.file_io.discard(self.ctx.file_paths(self.ctx.bucket_dir(*where), files[kept:]))
            del files[kept:]
        self._next_sequence = checkpoint.next_sequence

    def _buffer(self, arrow: pa.Table) -> None:
        conformed = inserts(self.ctx, arrow)
        if conformed.num_rows:
            self._pending.append(conformed)
            self._pending_bytes += conformed.nbytes
        if self._pending_bytes > self.ctx.options.write_buffer_size:
            self._flush()

    def _flush(self) -> None:
        """Write the buffer as level-0 files, each bucket's rows in input order."""
        if not self._pending:
            return
        data = pa.concat_tables(self._pending).combine_chunks()
        groups, order, bounds = group_rows(self.ctx, data)
        committed: dict[Where, list[DataFileMeta]] = {}
        settings = self.ctx.file_settings
        new = [w for w in zip(groups.partitions, groups.buckets, strict=True) if w not in self._next_sequence]
        if new:
            # Numbers continue those committed in the bucket (the check refuses a partition
            # written with another number of buckets).
            committed = bucketing.restored_files(self.ctx, groups)
        wheres = list(zip(groups.partitions, groups.buckets, strict=True))
        firsts = [self._next_sequence[where] if where in self._next_sequence
                  else max((f.max_sequence_number + 1 for f in committed.get(where, ())), default=0)
                  for where in wheres]

        done: dict[int, list[DataFileMeta]] = {}

        def write_group(group: int) -> None:
            part = data.take(order[bounds[group]:bounds[group + 1]])
            done[group] = data_file.write(self.ctx.file_io, self.ctx.bucket_dir(*wheres[group]), [part], settings,
                                          level=0, first_sequence=firsts[group])

        # Buckets are written in parallel. When one fails, :meth:`_restore` deletes the files
        # the others wrote, which it finds once they are recorded.
        try:
            map_all(write_group, range(len(wheres)))
        finally:
            for group, files in sorted(done.items()):
                self._written.setdefault(wheres[group], []).extend(files)
        for group, where in enumerate(wheres):
            self._next_sequence[where] = firsts[group] + int(bounds[group + 1] - bounds[group])
        self._pending.clear()
        self._pending_bytes = 0

    def prepare(self) -> list[CommitMessage]:
        """Flush everything: the messages a committer lands (one per bucket written). A flush
        that fails leaves the rows buffered as before, so that preparing again writes them."""
        checkpoint = self._checkpoint()
        try:
            self._flush()
        except BaseException:
            self._restore(checkpoint)
            raise
        total = self.ctx.options.bucket
        messages = [CommitMessage(p, b, total, new_files=tuple(files))
                    for (p, b), files in self._written.items() if files]
        self._written = {}
        return messages

    def commit(self, identifier: int) -> list[Snapshot]:
        """Flush and commit as ``identifier``; [] if this user already committed it. Then a
        fixed-bucket table's buckets written are compacted as they need (a COMPACT snapshot). If the commit fails
        (an I/O error), calling ``commit`` again retries it; a conflict raises
        CommitConflictError and the writer starts afresh."""
        ctx = self.ctx
        if committer.already_committed(ctx, self.commit_user, identifier, ctx.latest_snapshot()):
            self._unlanded = []  # landed after all: in the table, not to be deleted
            self.abort()
            return []
        messages = [*self._unlanded, *self.prepare()]
        self._unlanded = []
        if not messages:
            return []
        try:
            landed = committer.commit(ctx, messages, self.commit_user, identifier)
        except CommitConflictError:
            self._next_sequence.clear()
            raise
        except Exception as exc:
            self._unlanded = messages
            self._unlanded_unknown = isinstance(exc, CommitOutcomeUnknownError)
            raise
        # Numbers are read again from the table at the next flush: the committer may have
        # renumbered these files above a commit that landed meanwhile.
        self._next_sequence.clear()
        if landed and not ctx.options.write_only:
            landed += compaction.compact_after_commit(ctx, {(m.partition, m.bucket) for m in messages})
        if landed:
            snapshot_expiry.expire_after_commit(ctx)
        return landed

    def abort(self) -> None:
        """Drop everything not committed: buffered rows, files written since the last commit,
        and the files of a commit that failed (left to orphan cleanup when that commit may have
        landed)."""
        unlanded, self._unlanded = self._unlanded, []
        if not self._unlanded_unknown:
            self.ctx.file_io.discard(path for m in unlanded for path in m.written(self.ctx))
        self._pending.clear()
        self._pending_bytes = 0
        for where, files in self._written.items():
            self.ctx.file_io.discard(self.ctx.file_paths(self.ctx.bucket_dir(*where), files))
        self._written = {}
        self._next_sequence.clear()

    def close(self) -> None:
        """Abort what is not committed."""
        self.abort()


def inserts(ctx: TableContext, data: pa.Table) -> pa.Table:
    """Input rows cast to the append table's schema; RowKindError naming the table when a
    ``rowkind`` (or ``rowkind.field``) says -U or -D: an append table takes inserts only."""
    conformed, kinds = rows.conform(ctx, data)
    retractions = (kinds == kv.UPDATE_BEFORE) | (kinds == kv.DELETE)
    if retractions.any():
        first = kv.RowKind(int(kinds[np.argmax(retractions)])).symbol
        raise RowKindError(f"an append table takes inserts only (+I, +U), but {int(retractions.sum())} rows are "
                           f"retractions (the first is {first}); define primary keys to update or delete rows",
                           table=ctx.name, column=rows.ROWKIND_COLUMN)
    return conformed


def group_rows(ctx: TableContext, data: pa.Table) -> tuple[bucketing.BucketGroups, np.ndarray, np.ndarray]:
    """Each row's (partition, bucket) group, and the order that lists each group's rows in
    input order: group ``g`` is ``order[bounds[g]:bounds[g + 1]]``. Unaware tables put every
    row of a partition in bucket 0; fixed-bucket ones hash ``bucket-key``."""
    num_buckets = ctx.options.bucket
    if num_buckets == UNAWARE_BUCKET:
        ids = np.zeros(data.num_rows, dtype=np.int64)
        radix = 1
    else:
        ids = bucket.buckets([data.column(k) for k in ctx.bucket_key], num_buckets).astype(np.int64)
        radix = num_buckets
    partition_columns = [data.column(k) for k in ctx.partition_keys]
    codes, radix = value_codes(partition_columns, ids, radix)
    if radix <= max(data.num_rows, 1 << 16):
        # Few groups: counted, not sorted; a stable sort of small ints is a radix sort.
        unique = np.flatnonzero(np.bincount(codes, minlength=radix))
        index = np.zeros(radix, dtype=np.int64)
        index[unique] = np.arange(len(unique))
        inverse = index[codes].astype(np.min_scalar_type(max(len(unique) - 1, 0)))
        last_row = np.zeros(radix, dtype=np.int64)
        last_row[codes] = np.arange(len(codes))  # any row of a group will do
        first_rows = last_row[unique]
    else:
        unique, first_rows, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
    arity = len(partition_columns)
    if arity:
        encoded_rows = binary_row.encode([c.take(pa.array(first_rows)) for c in partition_columns])
        partitions = [binary_row.serialize(encoded_rows.row(g), arity) for g in range(len(unique))]
    else:
        partitions = [binary_row.serialize(binary_row.to_bytes([], []), 0)] * len(unique)
    groups = bucketing.BucketGroups(inverse.astype(np.int64), partitions, [int(ids[r]) for r in first_rows])
    return groups, order, bounds

