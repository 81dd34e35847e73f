"""What a read of the ``changelake`` Spark data source asks for: the table at its ``path``
option (or one of its system tables; or a branch: Paimon's ``branch`` option, or a path
``<table>$branch_<name>``), the options over the table's, the columns Spark reads with, and the
record batches Spark receives."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from changelake.api import system_tables
from changelake.api.catalog import open_table
from changelake.api.system_tables import SystemTable
from changelake.api.table import Table
from changelake.changelog.source import COMMIT_METADATA, ROWKIND
from changelake.errors import OptionError, SchemaError
from changelake.options import TableOptions, canonical_key
from changelake.streaming import storage_options
from changelake.streaming.spark_schema import check_requested, struct_type
from changelake.table import time_travel
from changelake.table.format.kv import RowKind

# What Spark adds to a source's options, not table options: a CREATE TABLE ... USING changelake
# adds these (and "option."-prefixed copies of the user's), a streaming write its checkpoint.
_SPARK_KEYS = frozenset({"location", "owner", "provider", "checkpointlocation"})
BRANCH_OPTION = "branch"  # Paimon's CoreOptions.BRANCH: the branch read or written (default main)
_BRANCH_PATH = "branch_"  # a path ``<table>$branch_<name>``
_UPSERTS = pa.array([RowKind.INSERT.symbol, RowKind.UPDATE_AFTER.symbol])


@dataclass(frozen=True)
class ReadRequest:
    """The table at the ``path`` option and the other options under their declared (Paimon)
    keys, parsed over the table's own. ``read_table`` is the table reads read: at the schema of
    the snapshot ``scan.snapshot-id``, ``scan.tag-name`` or a time names, as Paimon's time
    travel (``scan.time-travel.schema``); writes write ``table``."""

    table: Table
    read_table: Table
    overrides: Mapping[str, str]
    options: TableOptions
    # A path ``<table>$<name>`` reads the table's system table ``name`` (batch only); ``$ro``
    # is a batch read of the top level only, split like any other.
    system: SystemTable | None = None
    read_optimized: bool = False

    @staticmethod
    def of(options: Mapping[str, str]) -> ReadRequest:
        """OptionError for a missing path or an unknown option; the table must exist."""
        path = options.get("path")
        if not path:
            raise OptionError("no table path: give it to load(path) or save(path), or create the catalog table "
                              "with CREATE TABLE t USING changelake LOCATION '<table path>' (no column list)",
                              option="path")
        location, system_name = path, ""
        if "$" in path.rstrip("/").rsplit("/", 1)[-1]:
            location, _, system_name = path.rstrip("/").rpartition("$")
        given = {k: v for k, v in options.items()
                 if k.lower() not in _SPARK_KEYS and not k.lower().startswith("option.")}
        table_options, storage = storage_options.split(given)
        table = open_table(location, storage or None)
        branch = next((v for k, v in table_options.items() if k.lower() == BRANCH_OPTION), None)
        if system_name.startswith(_BRANCH_PATH):
            branch, system_name = system_name.removeprefix(_BRANCH_PATH), ""
        if branch:
            table = table.branch(branch)
        system = system_tables.parse_name(table.context, system_name) if system_name else None
        overrides = {canonical_key(key, table=table.name): value for key, value in table_options.items()
                     if key != "path" and key.lower() != BRANCH_OPTION}
        parsed = TableOptions.parse({**table.options, **overrides}, table=table.name)
        reading = table if system is not None else Table(time_travel.read_context(table.context, parsed))
        if parsed.read_changelog and ROWKIND in reading.schema.names and system is None:
            raise SchemaError(f"read.changelog adds a {ROWKIND!r} column, and the table has one", table=table.name,
                              column=ROWKIND)
        taken = [f.name for f in COMMIT_METADATA if f.name in reading.schema.names]
        if parsed.read_commit_metadata and taken and system is None:
            raise SchemaError(f"read.commit-metadata adds a {taken[0]!r} column, and the table has one",
                              table=table.name, column=taken[0])
        if system is SystemTable.RO:
            return ReadRequest(table, reading, overrides, parsed, None, read_optimized=True)
        return ReadRequest(table, reading, overrides, parsed, system)

    @cached_property
    def schema(self) -> pa.Schema:
        """What the read offers: the system table's columns; else ``rowkind`` first with
        ``read.changelog``, then the columns, then the commit metadata with
        ``read.commit-metadata``."""
        if self.system is not None:
            return self.table.system(self.system).schema
        kind = [pa.field(ROWKIND, pa.string(), nullable=False)] if self.options.read_changelog else []
        metadata = list(COMMIT_METADATA) if self.options.read_commit_metadata else []
        return pa.schema([*kind, *self.read_table.schema, *metadata])

    def columns(self, requested: StructType) -> tuple[str, ...]:
        """The table columns ``requested`` (the schema Spark reads with) carries; SchemaError
        when it is not a selection of :attr:`schema`."""
        check_requested(requested, struct_type(self.schema, table=self.table.name), table=self.table.name)
        added = {ROWKIND} if self.options.read_changelog else set()
        if self.options.read_commit_metadata:
            added |= {f.name for f in COMMIT_METADATA}
        return tuple(name for name in requested.names if name not in added)


@dataclass(frozen=True)
class Output:
    """What Spark receives: record batches of exactly its Arrow ``schema``; with
    ``upserts_only``, of the +I and +U change rows only."""

    schema: pa.Schema
    _: dataclasses.KW_ONLY
    upserts_only: bool = False

    def batches(self, rows: pa.Table) -> Iterator[pa.RecordBatch]:
        """``rows`` in Spark's schema (Spark holds timestamps in microseconds: finer ones are
        cut, the only cast that can lose anything)."""
        if self.upserts_only:
            rows = rows.filter(pc.is_in(rows.column(ROWKIND), value_set=_UPSERTS))
        yield from rows.select(self.schema.names).cast(self.schema, safe=False).to_batches()
