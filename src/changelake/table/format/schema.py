"""The table schema as Paimon stores it in ``schema/schema-<id>``."""

from __future__ import annotations

import enum
import itertools
import threading
import time
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from changelake.errors import CorruptMetadataError, SchemaError
from changelake.table.format import kv, types
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths

SCHEMA_VERSION = 3


class TableKind(enum.Enum):
    """Paimon's two kinds of table: with a primary key (an LSM tree of key-value files per
    bucket), or without one (an append table: files of plain rows, kept in write order)."""

    PRIMARY_KEY = "primary-key"
    APPEND = "append"


class DataField(BaseModel):
    """One column: a stable id, a name and a Paimon type."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    id: int
    name: str
    type: types.PaimonType
    description: str | None = None

    @property
    def nullable(self) -> bool:
        return types.is_nullable(self.type)

    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, types.to_arrow(self.type), nullable=self.nullable)


class TableSchema(BaseModel):
    """A version of a table's schema: fields, keys and options."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    version: int = SCHEMA_VERSION
    id: int = 0
    fields: tuple[DataField, ...]
    highest_field_id: int = Field(alias="highestFieldId")
    partition_keys: tuple[str, ...] = Field(default=(), alias="partitionKeys")
    primary_keys: tuple[str, ...] = Field(default=(), alias="primaryKeys")
    options: dict[str, str] = Field(default_factory=dict)
    comment: str | None = None
    time_millis: int = Field(default=0, alias="timeMillis")

    def field(self, name: str) -> DataField:
        for f in self.fields:
            if f.name == name:
                return f
        raise SchemaError("is not in the schema", column=name)

    @property
    def kind(self) -> TableKind:
        """A table without primary keys is an append table."""
        return TableKind.PRIMARY_KEY if self.primary_keys else TableKind.APPEND

    @property
    def trimmed_primary_keys(self) -> tuple[str, ...]:
        """Primary-key columns that are not partition columns: the ``_KEY_`` columns of files."""
        return tuple(k for k in self.primary_keys if k not in self.partition_keys)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([f.arrow_field() for f in self.fields])

    def to_json(self) -> str:
        # unset descriptions and comments are left out, as Java Paimon writes them (it would read
        # a JSON null back as the text "null")
        return self.model_dump_json(by_alias=True, indent=2, exclude_none=True)

    def names_in(self, older: TableSchema) -> dict[str, str | None]:
        """For each of this schema's columns, its name in ``older`` (matched by field id, so a
        renamed column maps to its old name), or None for a column ``older`` lacks (added
        since); only the columns whose name differs are listed. A renamed primary key's
        ``_KEY_`` column maps to the old one (Paimon renames key columns too)."""
        by_id = {f.id: f.name for f in older.fields}
        names = {f.name: by_id.get(f.id) for f in self.fields if by_id.get(f.id) != f.name}
        for key in self.trimmed_primary_keys:
            if (old := names.get(key)) is not None:
                names[kv.key_column(key)] = kv.key_column(old)
        return names


def parse(text: str, path: str, table: str) -> TableSchema:
    """A schema file's contents; CorruptMetadataError when they do not parse."""
    try:
        return TableSchema.model_validate_json(text)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise CorruptMetadataError(f"schema file is corrupt: {exc}", table=table, file=path) from None


class SchemaHistory:
    """The table's schemas by id, each read once: data files name the schema they were written
    with, and readers map old files to the current schema through it. Schema files never change
    once written, so the cache needs clearing only to bound memory."""

    def __init__(self, file_io: FileIO, paths: TablePaths, table: str) -> None:
        self._file_io = file_io
        self._paths = paths
        self._table = table
        self._schemas: dict[int, TableSchema] = {}
        self._lock = threading.Lock()

    def get(self, schema_id: int) -> TableSchema:
        """Schema ``schema_id`` (CorruptMetadataError when its file is missing or corrupt)."""
        found = self._schemas.get(schema_id)
        if found is None:
            path = self._paths.schema(schema_id)
            try:
                text = self._file_io.read_text(path)
            except FileNotFoundError:
                raise CorruptMetadataError("schema file is missing", table=self._table, file=path) from None
            found = parse(text, path, self._table)
            with self._lock:
                self._schemas[schema_id] = found
        return found

    def clear(self) -> None:
        """Forget the schemas read so far."""
        with self._lock:
            self._schemas.clear()


def from_arrow(
    table_name: str,
    schema: pa.Schema,
    primary_keys: list[str],
    partition_keys: list[str],
    options: dict[str, str],
    comment: str | None,
) -> TableSchema:
    """Schema 0 of a new table (an append table without ``primary_keys``); validates keys
    against the columns."""
    names = schema.names
    if len(set(names)) != len(names):
        raise SchemaError(f"duplicate column names in {names}", table=table_name)
    for kind, keys in (("primary key", primary_keys), ("partition key", partition_keys)):
        for key in keys:
            if key not in names:
                raise SchemaError(f"{kind} {key!r} is not a column of the schema {names}", table=table_name)
        if len(set(keys)) != len(keys):
            raise SchemaError(f"duplicate {kind}s in {keys}", table=table_name)
    if primary_keys and set(primary_keys) == set(partition_keys):
        raise SchemaError(
            f"primary keys {primary_keys} must not be the same as the partition keys", table=table_name
        )
    ids = itertools.count()
    fields: list[DataField] = []
    for arrow_field in schema:
        field_id = next(ids)
        not_null = arrow_field.name in primary_keys
        if not_null and not _keyable(arrow_field.type):
            raise SchemaError(
                f"of type {arrow_field.type} cannot be a key", table=table_name, column=arrow_field.name
            )
        paimon = types.to_paimon(arrow_field.type, ids, nullable=arrow_field.nullable and not not_null)
        description = None
        if arrow_field.metadata and b"description" in arrow_field.metadata:
            description = arrow_field.metadata[b"description"].decode()
        fields.append(DataField(id=field_id, name=arrow_field.name, type=paimon, description=description))
    data: dict[str, Any] = {
        "fields": tuple(fields),
        "highestFieldId": next(ids) - 1,
        "partitionKeys": tuple(partition_keys),
        "primaryKeys": tuple(primary_keys),
        "options": dict(options),
        "comment": comment,
        "timeMillis": int(time.time() * 1000),
    }
    return TableSchema.model_validate(data)


def _keyable(data_type: pa.DataType) -> bool:
    return not pa.types.is_nested(data_type)
