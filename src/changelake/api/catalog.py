"""A filesystem catalog: ``<warehouse>/<db>.db/<table>/`` directories, as Paimon lays them out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from changelake.api.table import Table
from changelake.errors import (
    DatabaseAlreadyExistsError,
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    SchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from changelake.table import metadata
from changelake.table.io.atomic import CommitLock
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths

_DB_SUFFIX = ".db"
_BRANCH_SUFFIX = "$branch_"  # ``t$branch_b``: branch b of table t


def _split_name(name: str) -> tuple[str, str]:
    parts = name.split(".")
    if len(parts) != 2 or not all(parts):
        raise SchemaError(f"table name {name!r} must be 'database.table'")
    return parts[0], parts[1]


class Catalog:
    """Databases and tables under a warehouse directory (a path or any fsspec URL).

    ``storage_options`` go to the fsspec filesystem (e.g. s3fs's ``key``, ``secret``,
    ``endpoint_url``). ``lock`` is a commit lock (Paimon's ``lock.enabled`` catalog lock): a
    callable taking a table directory and returning a context manager; stores without
    conditional writes need one to commit (see docs/storage.md).
    """

    def __init__(self, warehouse: str, storage_options: dict[str, Any] | None = None, *,
                 lock: CommitLock | None = None) -> None:
        self.file_io, self.warehouse = FileIO.for_url(str(warehouse), storage_options, lock=lock)

    def __repr__(self) -> str:
        return f"Catalog({self.warehouse!r})"

    def _database_dir(self, database: str) -> str:
        return f"{self.warehouse}/{database}{_DB_SUFFIX}"

    def list_databases(self) -> list[str]:
        """Names of the databases in the warehouse."""
        names = self.file_io.list_names(self.warehouse)
        return sorted(n[: -len(_DB_SUFFIX)] for n in names if n.endswith(_DB_SUFFIX))

    def create_database(self, name: str, *, ignore_if_exists: bool = False) -> None:
        """Create ``<warehouse>/<name>.db``."""
        path = self._database_dir(name)
        if self.file_io.exists(path):
            if ignore_if_exists:
                return
            raise DatabaseAlreadyExistsError(f"database {name} already exists at {path}")
        self.file_io.create_directory(path)

    def drop_database(self, name: str, *, ignore_if_not_exists: bool = False, cascade: bool = False) -> None:
        """Delete ``<warehouse>/<name>.db``: DatabaseNotEmptyError while it holds tables,
        unless ``cascade`` (then its tables go too, as :meth:`drop_table` drops them)."""
        path = self._database_dir(name)
        if not self.file_io.exists(path):
            if ignore_if_not_exists:
                return
            raise DatabaseNotFoundError(f"database {name} does not exist ({path})")
        tables = self.list_tables(name)
        if tables and not cascade:
            raise DatabaseNotEmptyError(f"database {name} holds tables {tables}: drop them first, or pass cascade=True")
        self.file_io.delete_tree(path)

    def list_tables(self, database: str) -> list[str]:
        """Names of the tables of a database."""
        path = self._database_dir(database)
        if not self.file_io.exists(path):
            raise DatabaseNotFoundError(f"database {database} does not exist ({path})")
        return sorted(
            n for n in self.file_io.list_names(path)
            if self.file_io.list_names(TablePaths(f"{path}/{n}").schema_dir)
        )

    def _table_dir(self, name: str) -> str:
        database, table_name = _split_name(name)
        return f"{self._database_dir(database)}/{table_name}"

    def table_exists(self, name: str) -> bool:
        """Whether ``database.table`` exists (its directory holds a schema)."""
        return bool(self.file_io.list_names(TablePaths(self._table_dir(name)).schema_dir))

    def drop_table(self, name: str, *, ignore_if_not_exists: bool = False) -> None:
        """Delete ``database.table``: its directory, with every snapshot, tag, branch and data
        file, as Paimon's filesystem catalog drops a table. Readers and writers of it fail
        from then on; nothing of it can be restored."""
        if not self.table_exists(name):
            if ignore_if_not_exists:
                return
            raise TableNotFoundError(f"does not exist ({self._table_dir(name)})", table=name)
        self.file_io.delete_tree(self._table_dir(name))

    def rename_table(self, name: str, new_name: str) -> Table:
        """Rename ``database.table`` to ``new_name`` (``database.table`` too, in an existing
        database) by renaming its directory, as Paimon's filesystem catalog does, and open it.
        The rename is atomic on a local filesystem; on an object store it is a copy then a
        delete, so stop the table's writers and readers first. Tables opened under the old
        name no longer read."""
        if not self.table_exists(name):
            raise TableNotFoundError(f"does not exist ({self._table_dir(name)})", table=name)
        database, _ = _split_name(new_name)
        if not self.file_io.exists(self._database_dir(database)):
            raise DatabaseNotFoundError(f"database {database} does not exist ({self._database_dir(database)})")
        target = self._table_dir(new_name)
        if self.file_io.exists(target):
            raise TableAlreadyExistsError(f"already exists ({target})", table=new_name)
        self.file_io.rename(self._table_dir(name), target)
        return self.get_table(new_name)

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        primary_keys: Sequence[str] | None = None,
        partition_keys: list[str] | None = None,
        options: dict[str, str] | None = None,
        comment: str | None = None,
    ) -> Table:
        """Create a table (its database too, if needed): a primary-key table, or without
        ``primary_keys`` (None or empty) an append table.

        Options use Paimon's names; unknown keys and unparsable values are rejected, and so are
        options only primary-key tables take on an append table. Without a ``bucket`` option
        the table has ``bucket = -1``, as in Paimon: a primary-key table is dynamic-bucket (each
        partition's HASH index places keys in buckets of ``dynamic-bucket.target-row-num``
        keys), an append table unaware; a fixed-bucket append table needs a ``bucket-key``.
        """
        database, table_name = _split_name(name)
        root = f"{self._database_dir(database)}/{table_name}"
        return Table(metadata.create_table(self.file_io, root, name, schema, list(primary_keys or []),
                                           list(partition_keys or []), dict(options or {}), comment))

    def get_table(self, name: str) -> Table:
        """Open ``database.table``, or its branch ``database.table$branch_<name>`` (Paimon's
        naming) as :meth:`Table.branch` opens it."""
        database, table_name = _split_name(name)
        table_name, on_branch, branch = table_name.partition(_BRANCH_SUFFIX)
        db_dir = self._database_dir(database)
        if not self.file_io.exists(db_dir):
            raise DatabaseNotFoundError(f"database {database} does not exist ({db_dir})")
        table = Table(metadata.open_context(self.file_io, f"{db_dir}/{table_name}", f"{database}.{table_name}"))
        return table.branch(branch) if on_branch else table


def open_table(path: str, storage_options: dict[str, Any] | None = None, *,
               lock: CommitLock | None = None) -> Table:
    """Open the table in directory ``path`` (a local path or any fsspec URL), with the
    filesystem's ``storage_options`` and a commit ``lock`` as for :class:`Catalog`; a path
    ``<table directory>$branch_<name>`` opens that branch of it (:meth:`Table.branch`)."""
    parent, slash, last = str(path).rstrip("/").rpartition("/")
    directory, on_branch, branch = last.partition(_BRANCH_SUFFIX)
    file_io, root = FileIO.for_url(f"{parent}{slash}{directory}", storage_options, lock=lock)
    parts = root.rstrip("/").rsplit("/", 2)
    name = f"{parts[-2].removesuffix(_DB_SUFFIX)}.{parts[-1]}" if len(parts) >= 2 else parts[-1]
    table = Table(metadata.open_context(file_io, root, name))
    return table.branch(branch) if on_branch else table
