"""The user-facing writer: buffer rows, commit them exactly once per (commit user, identifier)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from changelake.changelog import producers
from changelake.table.append.writer import AppendWrite
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import Snapshot
from changelake.table.write import postpone
from changelake.table.write.writer import TableWrite

if TYPE_CHECKING:
    from changelake.table.write.conform import WriteInput


# The engine's writer of either kind of table.
EngineWrite: TypeAlias = "TableWrite | AppendWrite"


def open_write(ctx: TableContext, commit_user: str, *, one_shot: bool = False) -> EngineWrite:
    """The engine's writer of the table's kind: an LSM writer with the table's changelog
    producer for a primary-key table (a postpone writer for a postpone-bucket one), an append
    writer for an append table. ``one_shot``
    writers (``Table.write``, Spark tasks) wait for their compactions."""
    if ctx.kind is TableKind.APPEND:
        return AppendWrite(ctx, commit_user)
    return postpone.table_write(ctx, commit_user, changelog=producers.for_table(ctx), wait_compaction=one_shot)


class TableWriter:
    """Buffers rows and commits them; with a stable ``commit_user``, each commit identifier
    lands at most once (a replayed identifier is skipped and its rows dropped).

    Rows are buffered up to ``write-buffer-size``. A primary-key table's rows spill to local
    disk past it, and each bucket is an LSM tree compacted in the background, its results
    landing as COMPACT snapshots; an append table's rows become files in input order, its
    fixed buckets compacted after a commit. Call :meth:`close` (or use ``with``) when done.
    """

    def __init__(self, write: EngineWrite) -> None:
        self._write = write

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def commit_user(self) -> str:
        """The user this writer commits as."""
        return self._write.commit_user

    def write(self, data: WriteInput) -> None:
        """Validate and buffer rows (an optional ``rowkind`` column gives +I/-U/+U/-D)."""
        self._write.write(data)

    def commit(self, identifier: int) -> list[Snapshot]:
        """Flush and commit as ``identifier``: the new snapshots (an APPEND, then a COMPACT
        when compaction results land too); [] if this user already committed ``identifier``.

        If the commit fails (StorageError: the store failed, naming the file), calling
        ``commit`` again retries it; after CommitOutcomeUnknownError too, since the retry finds
        the identifier committed if it did land. A commit that landed is never reported as
        failed. A conflict that voids the commit raises CommitConflictError and the writer
        starts afresh."""
        return self._write.commit(identifier)

    def abort(self) -> None:
        """Drop everything not committed (buffered rows, spill files, uncommitted files)."""
        self._write.abort()

    def close(self) -> None:
        """Abort what is not committed and wait for background compactions."""
        self._write.close()
