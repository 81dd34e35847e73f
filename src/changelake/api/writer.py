"""The user-facing writer: buffer rows, commit them exactly once per (commit user, identifier)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from changelake.table.format.snapshot import Snapshot
from changelake.table.write.writer import TableWrite

if TYPE_CHECKING:
    from changelake.table.write.conform import WriteInput


class TableWriter:
    """Buffers rows and commits them; with a stable ``commit_user``, each commit identifier
    lands at most once (a replayed identifier is skipped and its rows dropped).

    Rows are buffered up to ``write-buffer-size`` and spilled to local disk past it; each
    bucket is an LSM tree compacted in the background, its results landing as COMPACT
    snapshots. Call :meth:`close` (or use ``with``) when done.
    """

    def __init__(self, write: TableWrite) -> None:
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
