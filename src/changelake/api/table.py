"""A Paimon primary-key table: metadata, time travel, writes, scans and tags."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import ValidationError

from changelake.errors import (
    CorruptMetadataError,
    SnapshotNotFoundError,
    TableNotFoundError,
    TagAlreadyExistsError,
    TagNotFoundError,
)
from changelake.options import TableOptions
from changelake.table.format import binary_row, kv, snapshot
from changelake.table.format.data_file import FileSettings
from changelake.table.format.schema import TableSchema
from changelake.table.format.snapshot import Snapshot
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths, partition_path
from changelake.table.merge.engine import MergeEngine

if TYPE_CHECKING:
    import pyarrow.compute as pc

    from changelake.api.scan import Scan
    from changelake.table.write.writer import TableWriter, WriteInput

_SCHEMA_FILE = re.compile(r"^schema-(\d+)$")
_TAG_FILE = re.compile(r"^tag-(.+)$")


def read_latest_schema(file_io: FileIO, paths: TablePaths, name: str) -> TableSchema:
    """The newest schema of the table at ``paths``; TableNotFoundError when there is none."""
    ids = [int(m.group(1)) for n in file_io.list_names(paths.schema_dir) if (m := _SCHEMA_FILE.match(n))]
    if not ids:
        raise TableNotFoundError(f"table {name} does not exist (no schema under {paths.schema_dir})")
    path = paths.schema(max(ids))
    try:
        return TableSchema.model_validate_json(file_io.read_text(path))
    except (ValidationError, ValueError) as exc:
        raise CorruptMetadataError(f"schema file {path} is corrupt: {exc}") from None


class Table:
    """A primary-key table in a directory (local path or any fsspec URL).

    Cheap to pickle: it carries its file IO, location and schema, never open handles.
    """

    def __init__(self, name: str, file_io: FileIO, root: str, schema: TableSchema) -> None:
        self.name = name
        self.file_io = file_io
        self.paths = TablePaths(root)
        self.paimon_schema = schema

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "file_io": self.file_io, "root": self.paths.root,
                "schema": self.paimon_schema.model_dump_json(by_alias=True)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"], state["file_io"], state["root"],  # type: ignore[misc]
                      TableSchema.model_validate_json(state["schema"]))

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {self.paths.root!r})"

    # -- metadata ---------------------------------------------------------------------------

    @cached_property
    def schema(self) -> pa.Schema:
        """Arrow schema of the table's rows."""
        return self.paimon_schema.arrow_schema()

    @property
    def options(self) -> Mapping[str, str]:
        """The table's options exactly as stored (Paimon names)."""
        return dict(self.paimon_schema.options)

    @cached_property
    def config(self) -> TableOptions:
        """The options, parsed with Paimon's defaults."""
        return TableOptions(self.paimon_schema.options, self.name)

    @property
    def primary_keys(self) -> list[str]:
        """Primary-key columns."""
        return list(self.paimon_schema.primary_keys)

    @property
    def partition_keys(self) -> list[str]:
        """Partition columns."""
        return list(self.paimon_schema.partition_keys)

    @property
    def location(self) -> str:
        """The table directory (a path inside its filesystem)."""
        return self.paths.root

    @cached_property
    def partition_types(self) -> list[pa.DataType]:
        return [self.schema.field(k).type for k in self.partition_keys]

    @cached_property
    def key_names(self) -> tuple[str, ...]:
        """Primary keys minus partition keys: the ``_KEY_`` columns of data files."""
        return self.paimon_schema.trimmed_primary_keys

    @cached_property
    def key_types(self) -> list[pa.DataType]:
        return [self.schema.field(k).type for k in self.key_names]

    @cached_property
    def key_of(self) -> Callable[[bytes], tuple[Any, ...]]:
        """Decoder of serialized key BinaryRows (min/max keys) into comparable tuples."""
        types = self.key_types

        @functools.lru_cache(maxsize=65536)
        def decode(data: bytes) -> tuple[Any, ...]:
            return binary_row.from_bytes(binary_row.deserialize(data)[1], types)

        return decode

    @cached_property
    def file_settings(self) -> FileSettings:
        config = self.config
        return FileSettings(
            schema_id=self.paimon_schema.id,
            key_names=self.key_names,
            compression=config.file_compression,
            zstd_level=config.zstd_level,
            target_file_size=config.target_file_size,
            dictionary=bool(config.get("parquet.enable.dictionary", "true")),
        )

    @cached_property
    def merge_engine(self) -> MergeEngine:
        """How rows of one key merge (``merge-engine`` and its options)."""
        return MergeEngine.of(self.paimon_schema, self.paimon_schema.options, self.name)

    def merge_rows(self, rows: pa.Table, drop_deletes: bool) -> pa.Table:
        """One row per key (key order) by the table's merge engine; with ``drop_deletes`` the
        keys whose result is a retraction are removed instead of kept as delete markers."""
        return self.merge_engine.merge(rows, [kv.key_column(k) for k in self.key_names], drop_deletes)

    @cached_property
    def bucket_key(self) -> tuple[str, ...]:
        return self.config.bucket_key or self.key_names

    def partition_values(self, partition: bytes) -> tuple[Any, ...]:
        """Python values of a serialized partition BinaryRow."""
        return binary_row.from_bytes(binary_row.deserialize(partition)[1], self.partition_types)

    def bucket_dir(self, partition: bytes, bucket: int) -> str:
        """Directory of a bucket given its serialized partition BinaryRow."""
        values = self.partition_values(partition)
        config = self.config
        part = partition_path(self.partition_keys, values, self.partition_types, config.partition_default_name,
                              config.partition_legacy_name)
        return self.paths.bucket_dir(part, bucket)

    # -- snapshots --------------------------------------------------------------------------

    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot, or None for a table never written."""
        latest = snapshot.latest_id(self.file_io, self.paths)
        return None if latest is None else snapshot.read(self.file_io, self.paths, latest, self.name)

    def snapshot(self, snapshot_id: int) -> Snapshot:
        """Snapshot ``snapshot_id`` (SnapshotNotFoundError if absent)."""
        return snapshot.read(self.file_io, self.paths, snapshot_id, self.name)

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot still present, oldest first."""
        return [self.snapshot(i) for i in snapshot.list_ids(self.file_io, self.paths)]

    def snapshot_at(self, timestamp_ms: int) -> Snapshot:
        """The newest snapshot committed at or before ``timestamp_ms``."""
        ids = snapshot.list_ids(self.file_io, self.paths)
        found: Snapshot | None = None
        for snapshot_id in ids:
            candidate = self.snapshot(snapshot_id)
            if candidate.time_millis > timestamp_ms:
                break
            found = candidate
        if found is None:
            raise SnapshotNotFoundError(f"table {self.name} has no snapshot at or before {timestamp_ms}")
        return found

    # -- tags -------------------------------------------------------------------------------

    def create_tag(self, name: str, snapshot_id: int | None = None) -> Snapshot:
        """Tag a snapshot (default: the latest) so it can be read by name."""
        if snapshot_id is None:
            target = self.latest_snapshot()
            if target is None:
                raise SnapshotNotFoundError(f"table {self.name} has no snapshot to tag")
        else:
            target = self.snapshot(snapshot_id)
        if not self.file_io.create_if_absent(self.paths.tag(name), target.to_json().encode("utf-8")):
            raise TagAlreadyExistsError(f"table {self.name} already has a tag {name!r}")
        return target

    def tag(self, name: str) -> Snapshot:
        """The snapshot a tag points to."""
        path = self.paths.tag(name)
        try:
            data = self.file_io.read_bytes(path)
        except FileNotFoundError:
            raise TagNotFoundError(f"table {self.name} has no tag {name!r}") from None
        return snapshot.parse(data, path)

    def tags(self) -> dict[str, Snapshot]:
        """Every tag and its snapshot."""
        names = sorted(m.group(1) for n in self.file_io.list_names(self.paths.tag_dir) if (m := _TAG_FILE.match(n)))
        return {name: self.tag(name) for name in names}

    def delete_tag(self, name: str) -> None:
        """Remove a tag (the snapshot it named is unaffected)."""
        if not self.file_io.exists(self.paths.tag(name)):
            raise TagNotFoundError(f"table {self.name} has no tag {name!r}")
        self.file_io.delete(self.paths.tag(name))

    # -- reads and writes -------------------------------------------------------------------

    def scan(
        self,
        snapshot_id: int | None = None,
        *,
        tag: str | None = None,
        timestamp_ms: int | None = None,
        filter: pc.Expression | None = None,
        columns: list[str] | None = None,
    ) -> Scan:
        """A merged read of one snapshot (default the latest; or by id, tag or time)."""
        from changelake.api.scan import Scan

        return Scan(self, snapshot_id=snapshot_id, tag=tag, timestamp_ms=timestamp_ms,
                    filter=filter, columns=columns)

    def writer(self, commit_user: str | None = None) -> TableWriter:
        """A writer whose ``commit(identifier)`` lands each identifier at most once per user."""
        from changelake.table.write.writer import TableWriter

        return TableWriter(self, commit_user or str(uuid.uuid4()))

    def compact(self, full: bool = False, partitions: list[dict[str, Any]] | None = None) -> Snapshot | None:
        """Compact the table's buckets now (all, or those of ``partitions``, each a dict of
        partition values) as a COMPACT snapshot; ``full`` merges every bucket into its top
        level. Returns None when there was nothing to compact."""
        from changelake.table.commit import committer as commit
        from changelake.table.lsm import compactor as compaction

        messages = compaction.compact_table(self, full, partitions)
        if not messages:
            return None
        landed = commit.commit(self, messages, str(uuid.uuid4()), snapshot.BATCH_COMMIT_IDENTIFIER)
        return landed[0] if landed else None

    def write(self, data: WriteInput) -> Snapshot | None:
        """Write rows as one commit and return the new snapshot (None when ``data`` is empty)."""
        from changelake.table.write.writer import TableWriter

        with TableWriter(self, str(uuid.uuid4()), wait_compaction=True) as writer:
            writer.write(data)
            landed = writer.commit(snapshot.BATCH_COMMIT_IDENTIFIER)
        return landed[0] if landed else None

