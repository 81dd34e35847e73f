"""A filesystem catalog: ``<warehouse>/<db>.db/<table>/`` directories, as Paimon lays them out."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from changelake import options as table_options
from changelake.api.table import Table, read_latest_schema
from changelake.errors import (
    DatabaseAlreadyExistsError,
    DatabaseNotFoundError,
    OptionError,
    SchemaError,
    TableAlreadyExistsError,
)
from changelake.table.format import schema as table_schema
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths
from changelake.table.merge.engine import MergeEngine

_DB_SUFFIX = ".db"
_DEFAULT_BUCKETS = "1"


def _split_name(name: str) -> tuple[str, str]:
    parts = name.split(".")
    if len(parts) != 2 or not all(parts):
        raise SchemaError(f"table name {name!r} must be 'database.table'")
    return parts[0], parts[1]


class Catalog:
    """Databases and tables under a warehouse directory (a path or any fsspec URL)."""

    def __init__(self, warehouse: str, storage_options: dict[str, Any] | None = None) -> None:
        self.file_io, self.warehouse = FileIO.for_url(str(warehouse), storage_options)

    def __repr__(self) -> str:
        return f"Catalog({self.warehouse!r})"

    def _database_dir(self, database: str) -> str:
        return f"{self.warehouse}/{database}{_DB_SUFFIX}"

    def list_databases(self) -> list[str]:
        """Names of the databases in the warehouse."""
        names = self.file_io.list_names(self.warehouse)
        return sorted(n[: -len(_DB_SUFFIX)] for n in names if n.endswith(_DB_SUFFIX))

    def create_database(self, name: str, ignore_if_exists: bool = False) -> None:
        """Create ``<warehouse>/<name>.db``."""
        path = self._database_dir(name)
        if self.file_io.exists(path):
            if ignore_if_exists:
                return
            raise DatabaseAlreadyExistsError(f"database {name} already exists at {path}")
        self.file_io.makedirs(path)

    def list_tables(self, database: str) -> list[str]:
        """Names of the tables of a database."""
        path = self._database_dir(database)
        if not self.file_io.exists(path):
            raise DatabaseNotFoundError(f"database {database} does not exist ({path})")
        return sorted(
            n for n in self.file_io.list_names(path)
            if self.file_io.list_names(TablePaths(f"{path}/{n}").schema_dir)
        )

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        primary_keys: list[str],
        partition_keys: list[str] | None = None,
        options: dict[str, str] | None = None,
        comment: str | None = None,
    ) -> Table:
        """Create a primary-key table (its database too, if needed).

        Options use Paimon's names; unknown keys and unparsable values are rejected. Without a
        ``bucket`` option the table gets ``bucket=1`` (changelake writes fixed buckets only).
        """
        database, table_name = _split_name(name)
        checked = table_options.validate_new(options or {}, name)
        checked.setdefault("bucket", _DEFAULT_BUCKETS)
        if int(checked["bucket"]) < 1:
            raise OptionError(
                f"table {name}: option 'bucket' must be a positive fixed number of buckets; "
                "dynamic bucket mode is not supported"
            )
        if checked.get("file.format", "parquet") != "parquet":
            raise OptionError(f"table {name}: only file.format=parquet is supported")
        new_schema = table_schema.from_arrow(
            name, schema, list(primary_keys), list(partition_keys or []), checked, comment
        )
        for key in ("rowkind.field", "bucket-key", "sequence.field"):
            for column in filter(None, (c.strip() for c in checked.get(key, "").split(","))):
                if column not in schema.names:
                    raise OptionError(f"table {name}: option {key!r} names unknown column {column!r}")
        MergeEngine.of(new_schema, checked, name)  # rejects invalid merge-engine settings now
        root = f"{self._database_dir(database)}/{table_name}"
        paths = TablePaths(root)
        if not self.file_io.create_if_absent(paths.schema(0), new_schema.to_json().encode("utf-8")):
            raise TableAlreadyExistsError(f"table {name} already exists at {root}")
        return Table(name, self.file_io, root, new_schema)

    def get_table(self, name: str) -> Table:
        """Open ``database.table``."""
        database, table_name = _split_name(name)
        db_dir = self._database_dir(database)
        if not self.file_io.exists(db_dir):
            raise DatabaseNotFoundError(f"database {database} does not exist ({db_dir})")
        root = f"{db_dir}/{table_name}"
        paths = TablePaths(root)
        return Table(name, self.file_io, root, read_latest_schema(self.file_io, paths, name))


def open_table(path: str, storage_options: dict[str, Any] | None = None) -> Table:
    """Open the table in directory ``path`` (a local path or any fsspec URL)."""
    file_io, root = FileIO.for_url(str(path), storage_options)
    parts = root.rstrip("/").rsplit("/", 2)
    name = f"{parts[-2].removesuffix(_DB_SUFFIX)}.{parts[-1]}" if len(parts) >= 2 else parts[-1]
    paths = TablePaths(root)
    return Table(name, file_io, root, read_latest_schema(file_io, paths, name))
