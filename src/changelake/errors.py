"""Errors raised by changelake; every one derives from :class:`ChangelakeError`."""

from __future__ import annotations


class ChangelakeError(Exception):
    """Base class of every error changelake raises on purpose."""


class DatabaseNotFoundError(ChangelakeError):
    """The named database does not exist in the warehouse."""


class DatabaseAlreadyExistsError(ChangelakeError):
    """A database of that name already exists."""


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


class SnapshotNotFoundError(ChangelakeError):
    """The requested snapshot (by id or time) does not exist."""


class TagNotFoundError(ChangelakeError):
    """The named tag does not exist."""


class TagAlreadyExistsError(ChangelakeError):
    """A tag of that name already exists."""


class CorruptMetadataError(ChangelakeError):
    """A metadata file (schema, snapshot, manifest) is missing or unreadable."""


class CommitConflictError(ChangelakeError):
    """A commit cannot land because files it removes were removed by another commit."""


class ScanError(ChangelakeError):
    """A scan request is contradictory or names columns the table does not have."""
