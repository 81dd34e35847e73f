"""Errors raised by changelake; every one derives from :class:`ChangelakeError`.

An error carries what it is about as fields (``table``, ``option``, ``column``, ``file``), so
callers can act on them without parsing messages; its text names them, formatted here once.
"""

from __future__ import annotations

import copy
from typing import Self


class ChangelakeError(Exception):
    """Base class of every error changelake raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        option: str | None = None,
        column: str | None = None,
        file: str | None = None,
    ) -> None:
        self.message = message
        self.table = table
        self.option = option
        self.column = column
        self.file = file
        super().__init__(message)

    def __str__(self) -> str:
        parts = []
        if self.table is not None:
            parts.append(f"table {self.table}")
        if self.option is not None:
            parts.append(f"option {self.option!r}")
        if self.column is not None:
            parts.append(f"column {self.column!r}")
        if self.file is not None:
            parts.append(f"file {self.file}")
        return ": ".join([*parts, self.message])

    def __reduce__(self) -> tuple[object, ...]:
        fields = {"table": self.table, "option": self.option, "column": self.column, "file": self.file}
        return (_restore, (type(self), self.message, fields))

    def in_table(self, table: str) -> Self:
        """The same error naming ``table`` (for errors raised where the table is not known)."""
        if self.table is not None:
            return self
        named = copy.copy(self)
        named.table = table
        return named


def _restore(kind: type[ChangelakeError], message: str, fields: dict[str, str | None]) -> ChangelakeError:
    return kind(message, **fields)


class DatabaseNotFoundError(ChangelakeError):
    """The named database does not exist in the warehouse."""


class DatabaseAlreadyExistsError(ChangelakeError):
    """A database of that name already exists."""


class DatabaseNotEmptyError(ChangelakeError):
    """A database to drop still holds tables (drop them first, or pass ``cascade``)."""


class TableNotFoundError(ChangelakeError):
    """The named table (or table directory) does not exist."""


class TableAlreadyExistsError(ChangelakeError):
    """A table of that name already exists."""


class SchemaError(ChangelakeError):
    """A table definition is invalid (keys, types, names)."""


class OptionError(ChangelakeError):
    """A table option is unknown or its value does not parse."""


class DataError(ChangelakeError):
    """Rows handed to a writer do not fit the table; nothing was written."""


class SchemaMismatchError(DataError):
    """Input columns are missing, unknown, or of a type that does not cast safely."""


class NullKeyError(DataError):
    """A primary-key, partition or NOT NULL column holds a null."""


class RowKindError(DataError):
    """A row kind is not one of +I, -U, +U, -D."""


class BucketRescaleError(DataError):
    """Rows go to a partition whose files were written with another number of buckets than the
    table's ``bucket`` now (changing ``bucket``, as Paimon's ``ALTER TABLE ... SET ('bucket' =
    'N')`` does, leaves the old partitions' files as they were): hashing their keys by the new
    number would put a key in two buckets. Nothing was written; ``table.rescale()`` rewrites the
    partition with the table's number."""


class SnapshotNotFoundError(ChangelakeError):
    """The requested snapshot (by id or time) does not exist."""


class SnapshotExpiredError(SnapshotNotFoundError):
    """The requested snapshot was committed once but has since been expired (it is older than
    the earliest snapshot still present)."""


class TagNotFoundError(ChangelakeError):
    """The named tag does not exist."""


class InvalidTagNameError(ChangelakeError):
    """A tag name is blank, a pure number, or holds a path separator."""


class TagAlreadyExistsError(ChangelakeError):
    """A tag of that name already exists."""


class BranchNotFoundError(ChangelakeError):
    """The named branch does not exist."""


class InvalidBranchNameError(ChangelakeError):
    """A branch name is ``main`` (the table itself), blank, a pure number, or holds a path
    separator."""


class BranchAlreadyExistsError(ChangelakeError):
    """A branch of that name already exists."""


class CorruptMetadataError(ChangelakeError):
    """A metadata file (schema, snapshot, manifest) is missing or unreadable."""


class CommitConflictError(ChangelakeError):
    """A commit cannot land because files it removes were removed by another commit."""


class ScanError(ChangelakeError):
    """A scan request is contradictory or names columns the table does not have."""


class FilterError(ScanError):
    """A filter string does not parse or does not fit the table's columns; ``position`` is
    where in the text (0-based)."""

    def __init__(self, message: str, *, position: int = 0, **fields: str | None) -> None:
        super().__init__(message, **fields)
        self.position = position


class OffsetError(ChangelakeError):
    """A stream offset does not belong to this table or points past its history."""


class RolledBackOffsetError(OffsetError):
    """An offset lies in history a rollback abandoned: the snapshot ids it names were (or
    will be) reused by newer commits, so reading on would return different data."""


class StreamingError(ChangelakeError):
    """A Spark write or read is used in a way that cannot be exactly once."""


class CdcError(ChangelakeError):
    """A request to decode CDC events cannot be served: an unknown format or malformed-event
    policy, an input column that is missing or not text, a schema column of a type the decoder
    cannot read from JSON, or output columns whose names clash. (A malformed event itself fails
    the Spark task that meets it, with the event's text in the message.)"""


class MissingExtraError(ChangelakeError, ImportError):
    """An optional library a feature needs is not installed; the message names the extra to
    install (``pip install 'changelake[polars]'``), or for a filesystem changelake has no extra
    for, the package fsspec asks for (``gcsfs`` for ``gs://``)."""


class StorageConfigError(ChangelakeError, ValueError):
    """The filesystem of a warehouse or table URL cannot be opened as given: fsspec knows no
    such protocol, or the storage options do not fit the filesystem (one it requires is
    missing, one it takes has a value it refuses). The message names the URL, the storage
    options given (their names, never their values) and fsspec's reason; nothing was read or
    written. It is a ``ValueError`` too, as fsspec's own error for an unknown protocol is."""


class UnsafeStorageError(ChangelakeError):
    """A commit is refused because the table's store cannot create a file only if it is absent
    (no conditional writes) and no commit lock is configured: two writers could overwrite each
    other's snapshot. Pass ``lock=`` to ``Catalog`` or ``open_table`` (see docs/storage.md)."""


class StorageError(ChangelakeError, OSError):
    """A read or write of the table's store failed after the filesystem client's own retries
    (a 5xx answer, a reset connection, a timeout); ``file`` names the file. Nothing a
    commit that raises it wrote became part of the table, except as :class:`CommitOutcomeUnknownError`
    says. It is an ``OSError`` too, so code that handles I/O errors handles it."""


class CommitOutcomeUnknownError(StorageError):
    """Creating a commit's snapshot file failed again and again, so whether the commit landed
    is unknown: the snapshot file (``file``) was neither confirmed nor ruled out. Nothing the
    commit wrote was deleted. A writer's ``commit(identifier)`` may be retried (it lands at
    most once); a retry of ``Table.write`` may apply the rows twice, so check the table first."""
