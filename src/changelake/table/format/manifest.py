"""Manifests: Avro files listing data files (ADD/DELETE), and manifest lists of manifests (read
in ORC too, as Java Paimon writes them under ``manifest.format = orc``).

Field names, order and types are exactly Paimon's (see ``ManifestEntry`` / ``DataFileMeta`` /
``ManifestFileMeta`` in Apache Paimon), so any Paimon reader reads what we write.
"""

from __future__ import annotations

import datetime as dt
import enum
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import fastavro
import pyarrow as pa
import pyarrow.orc as orc

from changelake.errors import CorruptMetadataError
from changelake.table.io.fileio import FileIO


class FileKind(enum.IntEnum):
    """A manifest entry adds a data file to a bucket or deletes it."""

    ADD = 0
    DELETE = 1


class FileSource(enum.IntEnum):
    """Whether a data file was written by a write or by a compaction."""

    APPEND = 0
    COMPACT = 1


_ORC_MAGIC = b"ORC"
_NULLABLE_LONG_ARRAY: Any = ["null", {"type": "array", "items": ["null", "long"]}]


def _stats_schema(name: str) -> dict[str, Any]:
    return {
        "type": "record",
        "name": name,
        "fields": [
            {"name": "_MIN_VALUES", "type": "bytes"},
            {"name": "_MAX_VALUES", "type": "bytes"},
            {"name": "_NULL_COUNTS", "type": _NULLABLE_LONG_ARRAY, "default": None},
        ],
    }


def _optional(name: str, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None}


_DATA_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "DataFileMeta",
    "fields": [
        {"name": "_FILE_NAME", "type": "string"},
        {"name": "_FILE_SIZE", "type": "long"},
        {"name": "_ROW_COUNT", "type": "long"},
        {"name": "_MIN_KEY", "type": "bytes"},
        {"name": "_MAX_KEY", "type": "bytes"},
        {"name": "_KEY_STATS", "type": _stats_schema("record_KEY_STATS")},
        {"name": "_VALUE_STATS", "type": _stats_schema("record_VALUE_STATS")},
        {"name": "_MIN_SEQUENCE_NUMBER", "type": "long"},
        {"name": "_MAX_SEQUENCE_NUMBER", "type": "long"},
        {"name": "_SCHEMA_ID", "type": "long"},
        {"name": "_LEVEL", "type": "int"},
        {"name": "_EXTRA_FILES", "type": {"type": "array", "items": "string"}},
        _optional("_CREATION_TIME", {"type": "long", "logicalType": "timestamp-millis"}),
        _optional("_DELETE_ROW_COUNT", "long"),
        _optional("_EMBEDDED_FILE_INDEX", "bytes"),
        _optional("_FILE_SOURCE", "int"),
        _optional("_VALUE_STATS_COLS", {"type": "array", "items": "string"}),
        _optional("_EXTERNAL_PATH", "string"),
        _optional("_FIRST_ROW_ID", "long"),
        _optional("_WRITE_COLS", {"type": "array", "items": "string"}),
        _optional("_WRITE_COLS_SEQUENCES", {"type": "array", "items": "long"}),
    ],
}

ENTRY_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ManifestEntry",
        "fields": [
            {"name": "_VERSION", "type": "int"},
            {"name": "_KIND", "type": "int"},
            {"name": "_PARTITION", "type": "bytes"},
            {"name": "_BUCKET", "type": "int"},
            {"name": "_TOTAL_BUCKETS", "type": "int"},
            {"name": "_FILE", "type": _DATA_FILE_SCHEMA},
        ],
    }
)

MANIFEST_FILE_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ManifestFileMeta",
        "fields": [
            {"name": "_VERSION", "type": "int"},
            {"name": "_FILE_NAME", "type": "string"},
            {"name": "_FILE_SIZE", "type": "long"},
            {"name": "_NUM_ADDED_FILES", "type": "long"},
            {"name": "_NUM_DELETED_FILES", "type": "long"},
            {"name": "_PARTITION_STATS", "type": _stats_schema("record_PARTITION_STATS")},
            {"name": "_SCHEMA_ID", "type": "long"},
            _optional("_MIN_BUCKET", "int"),
            _optional("_MAX_BUCKET", "int"),
            _optional("_MIN_LEVEL", "int"),
            _optional("_MAX_LEVEL", "int"),
            _optional("_MIN_ROW_ID", "long"),
            _optional("_MAX_ROW_ID", "long"),
            _optional("_TOTAL_BUCKETS", "int"),
            _optional("_EXTRA_FILES", {"type": "array", "items": "string"}),
        ],
    }
)

_CODECS = {"zstd": "zstandard", "snappy": "snappy", "deflate": "deflate", "null": "null", "none": "null"}


@dataclass(frozen=True)
class SimpleStats:
    """Min and max values (serialized BinaryRows) and null counts of some columns."""

    min_values: bytes
    max_values: bytes
    null_counts: tuple[int | None, ...] | None

    def to_avro(self) -> dict[str, Any]:
        counts = list(self.null_counts) if self.null_counts is not None else None
        return {"_MIN_VALUES": self.min_values, "_MAX_VALUES": self.max_values, "_NULL_COUNTS": counts}

    @staticmethod
    def from_avro(record: dict[str, Any]) -> SimpleStats:
        counts = record.get("_NULL_COUNTS")
        return SimpleStats(
            record["_MIN_VALUES"], record["_MAX_VALUES"], tuple(counts) if counts is not None else None
        )


@dataclass(frozen=True)
class DataFileMeta:
    """One data file of a bucket, as a manifest describes it."""

    file_name: str
    file_size: int
    row_count: int
    min_key: bytes
    max_key: bytes
    key_stats: SimpleStats
    value_stats: SimpleStats
    min_sequence_number: int
    max_sequence_number: int
    schema_id: int
    level: int
    creation_time_ms: int | None = None
    delete_row_count: int | None = None
    file_source: int | None = FileSource.APPEND
    value_stats_cols: tuple[str, ...] | None = ()
    extra_files: tuple[str, ...] = ()
    embedded_index: bytes | None = None
    external_path: str | None = None
    first_row_id: int | None = None
    write_cols: tuple[str, ...] | None = None

    def upgrade(self, level: int) -> DataFileMeta:
        """The same file moved to another level (a metadata-only change)."""
        return replace(self, level=level)

    def to_avro(self) -> dict[str, Any]:
        return {
            "_FILE_NAME": self.file_name,
            "_FILE_SIZE": self.file_size,
            "_ROW_COUNT": self.row_count,
            "_MIN_KEY": self.min_key,
            "_MAX_KEY": self.max_key,
            "_KEY_STATS": self.key_stats.to_avro(),
            "_VALUE_STATS": self.value_stats.to_avro(),
            "_MIN_SEQUENCE_NUMBER": self.min_sequence_number,
            "_MAX_SEQUENCE_NUMBER": self.max_sequence_number,
            "_SCHEMA_ID": self.schema_id,
            "_LEVEL": self.level,
            "_EXTRA_FILES": list(self.extra_files),
            "_CREATION_TIME": self.creation_time_ms,
            "_DELETE_ROW_COUNT": self.delete_row_count,
            "_EMBEDDED_FILE_INDEX": self.embedded_index,
            "_FILE_SOURCE": self.file_source,
            "_VALUE_STATS_COLS": list(self.value_stats_cols) if self.value_stats_cols is not None else None,
            "_EXTERNAL_PATH": self.external_path,
            "_FIRST_ROW_ID": self.first_row_id,
            "_WRITE_COLS": list(self.write_cols) if self.write_cols is not None else None,
            "_WRITE_COLS_SEQUENCES": None,
        }

    @staticmethod
    def from_avro(r: dict[str, Any]) -> DataFileMeta:
        created = r.get("_CREATION_TIME")
        if isinstance(created, dt.datetime):
            created = int(created.timestamp() * 1000)
        cols = r.get("_VALUE_STATS_COLS")
        write_cols = r.get("_WRITE_COLS")
        return DataFileMeta(
            file_name=r["_FILE_NAME"],
            file_size=r["_FILE_SIZE"],
            row_count=r["_ROW_COUNT"],
            min_key=r["_MIN_KEY"],
            max_key=r["_MAX_KEY"],
            key_stats=SimpleStats.from_avro(r["_KEY_STATS"]),
            value_stats=SimpleStats.from_avro(r["_VALUE_STATS"]),
            min_sequence_number=r["_MIN_SEQUENCE_NUMBER"],
            max_sequence_number=r["_MAX_SEQUENCE_NUMBER"],
            schema_id=r["_SCHEMA_ID"],
            level=r["_LEVEL"],
            creation_time_ms=created,
            delete_row_count=r.get("_DELETE_ROW_COUNT"),
            file_source=r.get("_FILE_SOURCE"),
            value_stats_cols=tuple(cols) if cols is not None else None,
            extra_files=tuple(r.get("_EXTRA_FILES") or ()),
            embedded_index=r.get("_EMBEDDED_FILE_INDEX"),
            external_path=r.get("_EXTERNAL_PATH"),
            first_row_id=r.get("_FIRST_ROW_ID"),
            write_cols=tuple(write_cols) if write_cols is not None else None,
        )


@dataclass(frozen=True)
class ManifestEntry:
    """ADD or DELETE of one data file in one (partition, bucket)."""

    kind: FileKind
    partition: bytes
    bucket: int
    total_buckets: int
    file: DataFileMeta

    @property
    def identifier(self) -> tuple[bytes, int, int, str]:
        """What an ADD and its later DELETE have in common."""
        return (self.partition, self.bucket, self.file.level, self.file.file_name)

    def to_avro(self) -> dict[str, Any]:
        return {
            "_VERSION": 2,
            "_KIND": self.kind,
            "_PARTITION": self.partition,
            "_BUCKET": self.bucket,
            "_TOTAL_BUCKETS": self.total_buckets,
            "_FILE": self.file.to_avro(),
        }

    @staticmethod
    def from_avro(r: dict[str, Any]) -> ManifestEntry:
        return ManifestEntry(
            kind=FileKind(r["_KIND"]),
            partition=r["_PARTITION"],
            bucket=r["_BUCKET"],
            total_buckets=r["_TOTAL_BUCKETS"],
            file=DataFileMeta.from_avro(r["_FILE"]),
        )


@dataclass(frozen=True)
class ManifestFileMeta:
    """One manifest file as a manifest list names it."""

    file_name: str
    file_size: int
    num_added_files: int
    num_deleted_files: int
    partition_stats: SimpleStats
    schema_id: int
    min_bucket: int | None = None
    max_bucket: int | None = None
    min_level: int | None = None
    max_level: int | None = None
    total_buckets: int | None = None
    # row tracking's row-id range of the manifest's files (kept as another writer wrote it)
    min_row_id: int | None = None
    max_row_id: int | None = None

    def to_avro(self) -> dict[str, Any]:
        return {
            "_VERSION": 2,
            "_FILE_NAME": self.file_name,
            "_FILE_SIZE": self.file_size,
            "_NUM_ADDED_FILES": self.num_added_files,
            "_NUM_DELETED_FILES": self.num_deleted_files,
            "_PARTITION_STATS": self.partition_stats.to_avro(),
            "_SCHEMA_ID": self.schema_id,
            "_MIN_BUCKET": self.min_bucket,
            "_MAX_BUCKET": self.max_bucket,
            "_MIN_LEVEL": self.min_level,
            "_MAX_LEVEL": self.max_level,
            "_MIN_ROW_ID": self.min_row_id,
            "_MAX_ROW_ID": self.max_row_id,
            "_TOTAL_BUCKETS": self.total_buckets,
            "_EXTRA_FILES": None,
        }

    @staticmethod
    def from_avro(r: dict[str, Any]) -> ManifestFileMeta:
        return ManifestFileMeta(
            file_name=r["_FILE_NAME"],
            file_size=r["_FILE_SIZE"],
            num_added_files=r["_NUM_ADDED_FILES"],
            num_deleted_files=r["_NUM_DELETED_FILES"],
            partition_stats=SimpleStats.from_avro(r["_PARTITION_STATS"]),
            schema_id=r["_SCHEMA_ID"],
            min_bucket=r.get("_MIN_BUCKET"),
            max_bucket=r.get("_MAX_BUCKET"),
            min_level=r.get("_MIN_LEVEL"),
            max_level=r.get("_MAX_LEVEL"),
            total_buckets=r.get("_TOTAL_BUCKETS"),
            min_row_id=r.get("_MIN_ROW_ID"),
            max_row_id=r.get("_MAX_ROW_ID"),
        )


def encode_avro(schema: Any, records: Iterable[dict[str, Any]], compression: str) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records, codec=_CODECS.get(compression, "zstandard"))
    return buf.getvalue()


def read_avro(file_io: FileIO, path: str) -> list[dict[str, Any]]:
    """Records of a metadata file, told Avro or ORC by its content whatever ``manifest.format``
    says (Java Paimon writes ORC manifests under ``manifest.format = orc``; their columns are
    the Avro ones, so their rows read as the same records); a missing or corrupt file names
    itself in the error."""
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise CorruptMetadataError("metadata file is missing", file=path) from None
    if data[:3] == _ORC_MAGIC:
        try:
            rows = orc.ORCFile(pa.BufferReader(data)).read().to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise CorruptMetadataError(f"ORC metadata file is corrupt: {exc}", file=path) from None
        return [_utc_times(r) for r in rows]
    try:
        return [cast(dict[str, Any], r) for r in fastavro.reader(io.BytesIO(data))]
    except Exception as exc:  # fastavro raises many types for garbage input
        raise CorruptMetadataError(f"metadata file is corrupt: {exc}", file=path) from None


def _utc_times(record: dict[str, Any]) -> dict[str, Any]:
    """An ORC manifest row with its timestamps in UTC, as Avro's timestamp-millis reads."""
    for name, value in record.items():
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            record[name] = value.replace(tzinfo=dt.UTC)
        elif isinstance(value, dict):
            _utc_times(value)
    return record


def read_entries(file_io: FileIO, path: str) -> list[ManifestEntry]:
    return [ManifestEntry.from_avro(r) for r in read_avro(file_io, path)]


def read_manifest_list(file_io: FileIO, path: str) -> list[ManifestFileMeta]:
    return [ManifestFileMeta.from_avro(r) for r in read_avro(file_io, path)]


def merge_entries(entries: Iterable[ManifestEntry]) -> dict[tuple[bytes, int, int, str], ManifestEntry]:
    """Live files after applying ADDs and DELETEs in order."""
    live: dict[tuple[bytes, int, int, str], ManifestEntry] = {}
    for entry in entries:
        if entry.kind == FileKind.ADD:
            live[entry.identifier] = entry
        else:
            live.pop(entry.identifier, None)
    return live


def bounds(values: Sequence[int]) -> tuple[int | None, int | None]:
    return (min(values), max(values)) if values else (None, None)
