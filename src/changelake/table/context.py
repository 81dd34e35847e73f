"""The table context: the small frozen value the storage engine works on.

It holds what the engine needs of one table (file IO, paths, schema, parsed options, key codec,
merge engine) and nothing of the user-facing facade. It pickles as its name, file IO, paths
and schema JSON, so Spark tasks get it by value and rebuild the derived parts lazily.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
from pyroaring import BitMap

from changelake.errors import OptionError, ScanError, TableNotFoundError
from changelake.options import TableOptions
from changelake.table.format import binary_row, casts, data_file, file_index, kv, snapshot, types, value_stats
from changelake.table.format.file_settings import FileSettings
from changelake.table.format.kv import KeyCodec
from changelake.table.format.manifest import DataFileMeta, ManifestEntry
from changelake.table.format.schema import SchemaHistory, TableKind, TableSchema
from changelake.table.format.snapshot import Snapshot
from changelake.table.format.types import PaimonType
from changelake.table.io import external_paths
from changelake.table.io.external_paths import ExternalPaths
from changelake.table.io.fileio import FileIO
from changelake.table.io.killpoints import KillPoint
from changelake.table.io.paths import TablePaths, partition_path
from changelake.table.merge import parse
from changelake.table.merge.engines import MergeEngine

# Paimon's default ``target-file-size`` of an append table (a primary-key table's is the option's)
APPEND_TARGET_FILE_SIZE = 256 * 1024 * 1024


@dataclass(frozen=True)
class TableContext:
    """One table at one schema, as the engine sees it."""

    name: str
    file_io: FileIO
    paths: TablePaths
    schema: TableSchema

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.name, self.file_io, self.paths, self.schema.to_json()))

    @cached_property
    def options(self) -> TableOptions:
        """The options, parsed once with Paimon's defaults."""
        return TableOptions.parse(self.schema.options, table=self.name)

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of the table's rows."""
        return self.schema.arrow_schema()

    @property
    def kind(self) -> TableKind:
        """A primary-key or an append table: the one thing that picks the engine's
        implementations (writer, splits, compaction) of the table."""
        return self.schema.kind

    @cached_property
    def file_schema(self) -> pa.Schema:
        """Arrow schema of the table's data files: the full key-value layout of a primary-key
        table; an append table's files hold its columns only, as Paimon writes them."""
        if self.kind is TableKind.APPEND:
            return self.arrow_schema
        return kv.file_schema(self.arrow_schema, self.key_names)

    @property
    def target_file_size(self) -> int:
        """``target-file-size``, whose default is Paimon's by table kind
        (``CoreOptions.targetFileSize``): 128 MB with a primary key, 256 MB without."""
        if "target-file-size" in self.options.raw or self.kind is TableKind.PRIMARY_KEY:
            return self.options.target_file_size
        return APPEND_TARGET_FILE_SIZE

    @property
    def key_value_files(self) -> bool:
        """Whether data files are in the key-value layout (``_KEY_``, ``_SEQUENCE_NUMBER``,
        ``_VALUE_KIND``): an append table's files hold plain rows, all inserts, numbered in the
        manifest only."""
        return self.kind is TableKind.PRIMARY_KEY

    @cached_property
    def schemas(self) -> SchemaHistory:
        """Every schema of the table by id, read once (what older data files were written with)."""
        return SchemaHistory(self.file_io, self.paths, self.name)

    def read_file(self, bucket_dir: str, meta: DataFileMeta, columns: Sequence[str] | None = None,
                  rows: tuple[int, int] | None = None, *, deleted: BitMap | None = None,
                  kinds_for_retractions: bool = False, dictionaries: bool = False) -> pa.Table:
        """Rows of a data (or changelog) file in this schema's key-value layout, whatever schema
        the file was written with: its columns are matched to this schema's by field id, so a
        dropped column is left out, a renamed one read under its old name, an added one is all
        nulls and one whose type changed cast as Paimon casts it (schema evolution on read).
        ``deleted`` (the file's deletion vector) leaves out the rows it marks.
        ``kinds_for_retractions``: the ``_VALUE_KIND`` column is left out where the file's
        statistics show no -U/-D row. ``dictionaries``: string columns a file of this schema
        stores as dictionary indices only may come back as dictionary arrays (see
        ``data_file.read``), for the caller to decode."""
        if meta.schema_id == self.schema.id:
            return data_file.read(self.file_io, self.file_path(bucket_dir, meta), self.file_schema, columns, rows,
                                  deleted=deleted, kinds_for_retractions=kinds_for_retractions,
                                  dictionaries=dictionaries)
        older = self._older(meta.schema_id)
        path = self.file_path(bucket_dir, meta)
        rows_read = data_file.read(self.file_io, path, older.read_schema, columns, rows, older.renames,
                                   deleted=deleted, kinds_for_retractions=kinds_for_retractions)
        return older.cast(rows_read, self, path)

    def read_file_batches(self, bucket_dir: str, meta: DataFileMeta, columns: Sequence[str],
                          batch_rows: int, *, kinds_for_retractions: bool = False) -> Iterator[pa.Table]:
        """The rows :meth:`read_file` reads, ``batch_rows`` at a time in file order."""
        path = self.file_path(bucket_dir, meta)
        if meta.schema_id == self.schema.id:
            return data_file.read_batches(self.file_io, path, self.file_schema, columns, batch_rows,
                                          kinds_for_retractions=kinds_for_retractions)
        older = self._older(meta.schema_id)
        batches = data_file.read_batches(self.file_io, path, older.read_schema, columns, batch_rows, older.renames,
                                         kinds_for_retractions=kinds_for_retractions)
        return (older.cast(batch, self, path) for batch in batches)

    def _older(self, schema_id: int) -> OlderSchema:
        """How files of schema ``schema_id`` map to this schema (worked out once per schema)."""
        found = self._olders.get(schema_id)
        if found is None:
            found = self._olders[schema_id] = OlderSchema.of(self, self.schemas.get(schema_id))
        return found

    @cached_property
    def _olders(self) -> dict[int, OlderSchema]:
        return {}

    def selected_columns(self, columns: Sequence[str]) -> tuple[str, ...]:
        """``columns`` as a read selects them: ScanError naming the table unless they are
        column names of the table, each given once (a string is not a list of names)."""
        if isinstance(columns, str):
            raise ScanError(f"columns must be a list of column names, not the string {columns!r}", table=self.name)
        names = self.arrow_schema.names
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise ScanError(f"unknown columns {unknown}; the table has {names}", table=self.name)
        twice = sorted(c for c, n in Counter(columns).items() if n > 1)
        if twice:
            raise ScanError(f"columns {twice} are selected more than once", table=self.name)
        return tuple(columns)

    @property
    def primary_keys(self) -> tuple[str, ...]:
        return self.schema.primary_keys

    @property
    def partition_keys(self) -> tuple[str, ...]:
        return self.schema.partition_keys

    @cached_property
    def partition_types(self) -> list[pa.DataType]:
        return [self.arrow_schema.field(k).type for k in self.partition_keys]

    @cached_property
    def key_names(self) -> tuple[str, ...]:
        """Primary keys minus partition keys: the ``_KEY_`` columns of data files."""
        return self.schema.trimmed_primary_keys

    @cached_property
    def key_columns(self) -> list[str]:
        """Names of the ``_KEY_`` columns of data files."""
        return [kv.key_column(k) for k in self.key_names]

    @cached_property
    def key_of(self) -> KeyCodec:
        """Decoder of serialized key BinaryRows (min/max keys) into comparable tuples."""
        return KeyCodec([self.arrow_schema.field(k).type for k in self.key_names])

    @cached_property
    def cross_partition(self) -> bool:
        """Whether a key may move between partitions: a primary key that lacks a partition column
        (Paimon's ``crossPartitionUpdate``; such tables are dynamic-bucket)."""
        return bool(self.primary_keys) and not set(self.partition_keys) <= set(self.primary_keys)

    @cached_property
    def bucket_key(self) -> tuple[str, ...]:
        return self.options.bucket_key or self.key_names

    @cached_property
    def merge_engine(self) -> MergeEngine:
        """How rows of one key merge (``merge-engine`` and its options)."""
        return parse.merge_engine(self.schema, self.options)

    @cached_property
    def file_settings(self) -> FileSettings:
        """How data files are written: each level's format and compression (``file.format``,
        ``file.compression`` and their ``.per.level`` maps), decided here for every writer.
        OptionError when a format cannot be written with its compression."""
        self.check_manifests_writable()
        options = self.options
        settings = FileSettings(
            schema_id=self.schema.id,
            key_names=self.key_names,
            compression=options.file_compression,
            zstd_level=options.zstd_level,
            compression_per_level=options.file_compression_per_level,
            target_file_size=self.target_file_size,
            dictionary=options.parquet_dictionary,
            prefix=options.data_file_prefix,
            thin=options.data_file_thin_mode,
            file_format=options.file_format,
            # Paimon's append writers write file.format at every level (its per-level formats are
            # the key-value writers')
            format_per_level=options.file_format_per_level if self.key_value_files else (),
            external=self.external_paths,
            value_fields=tuple(self.arrow_schema),
            value_modes=value_stats.column_modes(options, self.arrow_schema.names),
            file_index=file_index.spec(options, self.arrow_schema),
            # Paimon's append writers record metadata.stats-mode at every level, as their formats
            value_modes_per_level=tuple(
                (level, value_stats.column_modes(options, self.arrow_schema.names, mode))
                for level, mode in options.metadata_stats_mode_per_level) if self.key_value_files else (),
            dense_stats=options.metadata_stats_dense_store,
            partition_keys=tuple(self.partition_keys),
        )
        problem = settings.unwritable()
        if problem is not None:
            raise OptionError(problem, table=self.name, option="file.compression")
        return settings

    def check_writable(self) -> None:
        """OptionError naming the option when this table's files cannot be written (its
        manifest format, a format's compression, external paths that cannot be reached): a
        Spark driver calls it so that the error is one, before any task runs."""
        _ = (self.file_settings, self.changelog_file_settings)  # building them checks the options

    def check_manifests_writable(self) -> None:
        """OptionError naming ``manifest.format`` when it is ``orc``: changelake writes Avro
        manifests, and Java Paimon reads a table's manifests in the format the option names,
        so a commit here would break Java's reads (the table still reads here)."""
        if self.options.manifest_format != "avro":
            raise OptionError(f"changelake writes Avro manifests only; writing to a table whose manifests are "
                              f"{self.options.manifest_format!r} would break Java Paimon's reads of it",
                              table=self.name, option="manifest.format")

    @cached_property
    def external_paths(self) -> ExternalPaths | None:
        """Where new data files go instead of their bucket's directory
        (``data-file.external-paths``), checked and made once: OptionError naming the option
        when they cannot be written to (see :func:`external_paths.of_table`)."""
        return external_paths.of_table(self.file_io, self.paths.root, self.options, self.name)

    @cached_property
    def changelog_file_settings(self) -> FileSettings:
        """How changelog files are written: as data files (Paimon gives them the same layout,
        thin mode included, and rolling size), named ``changelog-file.prefix``, in
        ``changelog-file.format`` and ``changelog-file.compression`` (by default ``file.format``
        and ``file.compression``) whatever level they are written for (Paimon's per-level
        settings are for data files), with ``changelog-file.stats-mode``'s statistics."""
        options = self.options
        data_files = self.file_settings
        # changelog-file.stats-mode at every level when set; otherwise the data files' at the level
        mode = options.changelog_file_stats_mode
        settings = dataclasses.replace(
            data_files, prefix=options.changelog_file_prefix, kill_point=KillPoint.CHANGELOG_FILE,
            compression=options.changelog_file_compression or options.file_compression, compression_per_level=(),
            file_format=options.changelog_file_format or options.file_format, format_per_level=(),
            value_modes=data_files.value_modes if mode is None else value_stats.column_modes(
                options, self.arrow_schema.names, mode),
            value_modes_per_level=data_files.value_modes_per_level if mode is None else ())
        problem = settings.unwritable()
        if problem is not None:
            raise OptionError(f"changelog files: {problem}", table=self.name, option="changelog-file.compression")
        return settings

    def merge_rows(self, rows: pa.Table, *, drop_deletes: bool) -> pa.Table:
        """One row per key (key order) by the table's merge engine; with ``drop_deletes`` the
        keys whose result is a retraction are removed instead of kept as delete markers."""
        return self.merge_engine.merge(rows, self.key_columns, drop_deletes=drop_deletes)

    def partition_values(self, partition: bytes) -> tuple[Any, ...]:
        """Python values of a serialized partition BinaryRow."""
        return self._partition_values(partition)

    @cached_property
    def _partition_values(self) -> Callable[[bytes], tuple[Any, ...]]:
        """Partition values, cached: every commit decodes the same few partitions again."""
        def values(partition: bytes) -> tuple[Any, ...]:
            return binary_row.from_bytes(binary_row.deserialize(partition)[1], self.partition_types)
        return functools.lru_cache(maxsize=4096)(values)

    def partition_of(self, given: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values of a partition a caller names by its keys, as :meth:`partition_values`
        decodes them (see :func:`partition_of`)."""
        return partition_of(self.name, self.partition_keys, self.partition_types, given)

    def describe_partition(self, partition: bytes) -> str:
        """A serialized partition as Paimon's messages name it: ``partition {dt=2024-01-01, hr=10}``,
        or ``table`` for an unpartitioned table."""
        if not self.partition_keys:
            return "table"
        default = self.options.partition_default_name
        values = self.partition_values(partition)
        return "partition {" + ", ".join(f"{k}={default if v is None else v}"
                                         for k, v in zip(self.partition_keys, values, strict=True)) + "}"

    def bucket_dir(self, partition: bytes, bucket: int) -> str:
        """Directory of a bucket given its serialized partition BinaryRow (under
        ``data-file.path-directory`` when set)."""
        return self.paths.bucket_dir(self._partition_dir(partition), bucket,
                                     directory=self.options.data_file_path_directory)

    @property
    def data_root(self) -> str:
        """The directory of the partition and bucket directories: the table's, or its
        ``data-file.path-directory``."""
        return self.paths.data_root(self.options.data_file_path_directory)

    def file_path(self, bucket_dir: str, meta: DataFileMeta) -> str:
        """Where a data or changelog file of the bucket ``bucket_dir`` is: at its recorded
        external path when it has one (``data-file.external-paths``), else in the bucket's
        directory. Every read, copy and delete of a data file finds it here."""
        if meta.external_path is not None:
            return external_paths.resolve(self.file_io, meta.external_path)
        return f"{bucket_dir}/{meta.file_name}"

    def entry_path(self, entry: ManifestEntry) -> str:
        """Where the data or changelog file of a manifest entry is (see :meth:`file_path`)."""
        return self.file_path(self.bucket_dir(entry.partition, entry.bucket), entry.file)

    def file_paths(self, bucket_dir: str, files: Iterable[DataFileMeta]) -> list[str]:
        """Where data or changelog files of the bucket ``bucket_dir`` are, each followed by its
        extra files (its file index), which lie beside it: what writing the files made and
        what deleting them removes."""
        paths = []
        for meta in files:
            path = self.file_path(bucket_dir, meta)
            paths.append(path)
            if meta.extra_files:
                directory = path.rsplit("/", 1)[0]
                paths.extend(f"{directory}/{extra}" for extra in meta.extra_files)
        return paths

    def entry_paths(self, entry: ManifestEntry) -> list[str]:
        """The data or changelog file of a manifest entry and its extra files (see :meth:`file_paths`)."""
        return self.file_paths(self.bucket_dir(entry.partition, entry.bucket), [entry.file])

    @cached_property
    def _partition_dir(self) -> Callable[[bytes], str]:
        """A partition's directory name, cached: a commit asks for the same few partitions for
        every file it writes, lands or removes, and escaping a name is per-character Python."""
        options = self.options

        def name(partition: bytes) -> str:
            return partition_path(self.partition_keys, self.partition_values(partition), self.partition_types,
                                  options.partition_default_name, legacy=options.partition_legacy_name)
        return functools.lru_cache(maxsize=4096)(name)

    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot, or None for a table never written; TableNotFoundError for a
        table dropped since this context was made (not read as an empty one)."""
        latest = snapshot.latest_id(self.file_io, self.paths)
        if latest is None and not self.file_io.exists(self.paths.schema(self.schema.id)):
            raise TableNotFoundError(f"does not exist (no schema under {self.paths.schema_dir})", table=self.name)
        return None if latest is None else self.snapshot(latest)

    def snapshot(self, snapshot_id: int) -> Snapshot:
        """Snapshot ``snapshot_id`` (SnapshotNotFoundError if absent)."""
        return snapshot.read(self.file_io, self.paths, snapshot_id, self.name)


@dataclass(frozen=True)
class OlderSchema:
    """Files of an older schema as a context reads them: columns matched by field id
    (``renames``: the old name of each column whose name differs, None for one added since),
    read in the types they were written with (``read_schema``), then the columns whose type
    changed (``retyped``: old and new type) cast as Paimon casts them."""

    renames: Mapping[str, str | None]
    read_schema: pa.Schema
    retyped: Mapping[str, tuple[PaimonType, PaimonType]]
    # The files' schema is newer than the reader's (a stream reading on in the schema it began
    # with, past a widening): a value the reader's type cannot hold is an error, never wrapped.
    newer: bool = False

    @staticmethod
    def of(ctx: TableContext, older: TableSchema) -> OlderSchema:
        old_types = {f.id: f.type for f in older.fields}
        retyped = {f.name: (old_types[f.id], f.type) for f in ctx.schema.fields
                   if f.id in old_types and _retyped(old_types[f.id], f.type)}
        read_schema = ctx.file_schema
        for name, (old, _) in retyped.items():
            index = read_schema.get_field_index(name)
            read_schema = read_schema.set(index, read_schema.field(index).with_type(types.to_arrow(old)))
        return OlderSchema(ctx.schema.names_in(older), read_schema, retyped, newer=older.id > ctx.schema.id)

    def cast(self, rows: pa.Table, ctx: TableContext, path: str) -> pa.Table:
        """``rows`` read in the old types, in the context's types."""
        for name, (old, new) in self.retyped.items():
            index = rows.schema.get_field_index(name)
            if index >= 0:
                column = casts.cast(rows.column(index), old, new, table=ctx.name, column=name, file=path)
                if self.newer:
                    casts.check_held(rows.column(index), column, old, new, table=ctx.name, column=name, file=path)
                rows = rows.set_column(index, ctx.file_schema.field(name), column)
        return rows


def _retyped(old: PaimonType, new: PaimonType) -> bool:
    """Whether values of type ``old`` need a cast to be ``new`` values (not a change of
    nullability alone)."""
    return types.root(old) != types.root(new) or types.to_arrow(old) != types.to_arrow(new)


def partition_of(table: str, keys: Sequence[str], types: Sequence[pa.DataType],
                 given: Mapping[str, Any]) -> tuple[Any, ...]:
    """The values of a partition of ``table`` that a caller names by its ``keys`` (one left
    out is null), as the table's partitions decode: each value is encoded in a partition
    BinaryRow and decoded again, so any value pyarrow takes for the key's type matches (a
    datetime or the nanoseconds, an int, for a TIMESTAMP(7..9), which decodes as the int).
    ScanError naming the table for a key that is not a partition key or a value that does not
    fit its type."""
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise ScanError(f"{unknown} are not partition keys {list(keys)}", table=table)
    values = [given.get(k) for k in keys]
    try:
        row = binary_row.to_bytes(values, types)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise ScanError(f"partition {dict(given)} does not fit the partition keys' types: {exc}",
                        table=table) from None
    return binary_row.from_bytes(row, types)


def _rebuild(name: str, file_io: FileIO, paths: TablePaths, schema_json: str) -> TableContext:
    return TableContext(name, file_io, paths, TableSchema.model_validate_json(schema_json))
