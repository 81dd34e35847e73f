"""Index manifests: Avro files listing a snapshot's index files (Paimon's
``IndexManifestEntry``/``IndexFileMeta``, field names, order and types as Paimon writes them).

changelake writes ``DELETION_VECTORS`` index files only (one per bucket that has deletion
vectors) and, as Paimon's ``IndexManifestFileHandler``, every index manifest lists all index
files of its snapshot as ADD entries. Entries of other index types that Paimon writers left
are carried over as they are.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from changelake.table.format import manifest
from changelake.table.format.deletion_vector import DeletionVectorMeta
from changelake.table.format.manifest import FileKind
from changelake.table.io.fileio import FileIO
from changelake.table.io.killpoints import KillPoint

DELETION_VECTORS = "DELETION_VECTORS"
_VERSION = 1

_DV_META_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "DeletionVectorMeta",
    "fields": [
        {"name": "f0", "type": "string"},
        {"name": "f1", "type": "int"},
        {"name": "f2", "type": "int"},
        {"name": "_CARDINALITY", "type": ["null", "long"], "default": None},
    ],
}

_GLOBAL_INDEX_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "GlobalIndexMeta",
    "fields": [
        {"name": "_ROW_RANGE_START", "type": "long"},
        {"name": "_ROW_RANGE_END", "type": "long"},
        {"name": "_INDEX_FIELD_ID", "type": "int"},
        {"name": "_EXTRA_FIELD_IDS", "type": ["null", {"type": "array", "items": "int"}], "default": None},
        {"name": "_INDEX_META", "type": ["null", "bytes"], "default": None},
        {"name": "_SOURCE_META", "type": ["null", "bytes"], "default": None},
    ],
}

INDEX_ENTRY_SCHEMA = fastavro.parse_schema({
    "type": "record",
    "name": "IndexManifestEntry",
    "fields": [
        {"name": "_VERSION", "type": "int"},
        {"name": "_KIND", "type": "int"},
        {"name": "_PARTITION", "type": "bytes"},
        {"name": "_BUCKET", "type": "int"},
        {"name": "_INDEX_TYPE", "type": "string"},
        {"name": "_FILE_NAME", "type": "string"},
        {"name": "_FILE_SIZE", "type": "long"},
        {"name": "_ROW_COUNT", "type": "long"},
        {"name": "_DELETIONS_VECTORS_RANGES", "type": ["null", {"type": "array", "items": _DV_META_SCHEMA}],
         "default": None},
        {"name": "_EXTERNAL_PATH", "type": ["null", "string"], "default": None},
        {"name": "_GLOBAL_INDEX", "type": ["null", _GLOBAL_INDEX_SCHEMA], "default": None},
    ],
})


@dataclass(frozen=True)
class IndexFileMeta:
    """One index file: its type, name, size, row count (for deletion vectors: how many vectors
    it holds) and the range of each data file's vector; ``extra`` keeps fields of other index
    types as read."""

    index_type: str
    file_name: str
    file_size: int
    row_count: int
    ranges: tuple[DeletionVectorMeta, ...] | None = None
    external_path: str | None = None
    global_index: dict[str, Any] | None = None


@dataclass(frozen=True)
class IndexManifestEntry:
    """An index file of one (serialized partition, bucket)."""

    kind: FileKind
    partition: bytes
    bucket: int
    file: IndexFileMeta

    def to_avro(self) -> dict[str, Any]:
        f = self.file
        ranges = None if f.ranges is None else [
            {"f0": r.data_file, "f1": r.offset, "f2": r.length, "_CARDINALITY": r.cardinality} for r in f.ranges]
        return {
            "_VERSION": _VERSION,
            "_KIND": int(self.kind),
            "_PARTITION": self.partition,
            "_BUCKET": self.bucket,
            "_INDEX_TYPE": f.index_type,
            "_FILE_NAME": f.file_name,
            "_FILE_SIZE": f.file_size,
            "_ROW_COUNT": f.row_count,
            "_DELETIONS_VECTORS_RANGES": ranges,
            "_EXTERNAL_PATH": f.external_path,
            "_GLOBAL_INDEX": f.global_index,
        }

    @staticmethod
    def from_avro(r: dict[str, Any]) -> IndexManifestEntry:
        raw_ranges = r.get("_DELETIONS_VECTORS_RANGES")
        ranges = None if raw_ranges is None else tuple(
            DeletionVectorMeta(x["f0"], x["f1"], x["f2"], x.get("_CARDINALITY")) for x in raw_ranges)
        return IndexManifestEntry(
            FileKind(r["_KIND"]), r["_PARTITION"], r["_BUCKET"],
            IndexFileMeta(r["_INDEX_TYPE"], r["_FILE_NAME"], r["_FILE_SIZE"], r["_ROW_COUNT"], ranges,
                          r.get("_EXTERNAL_PATH"), r.get("_GLOBAL_INDEX")),
        )


def encode(entries: Sequence[IndexManifestEntry], compression: str) -> bytes:
    """An index manifest's bytes."""
    return manifest.encode_avro(INDEX_ENTRY_SCHEMA, [e.to_avro() for e in entries], compression)


def write(file_io: FileIO, manifest_dir: str, entries: Sequence[IndexManifestEntry], compression: str) -> str:
    """Write a new index manifest of ``entries`` into ``manifest_dir``; returns its name."""
    name = f"index-manifest-{uuid.uuid4()}-0"
    file_io.write_bytes(f"{manifest_dir}/{name}", encode(entries, compression), kill_point=KillPoint.MANIFEST)
    return name


def read(file_io: FileIO, path: str) -> list[IndexManifestEntry]:
    """The entries of the index manifest at ``path``."""
    return [IndexManifestEntry.from_avro(r) for r in manifest.read_avro(file_io, path)]


def live(entries: Sequence[IndexManifestEntry]) -> list[IndexManifestEntry]:
    """The index files an index manifest's entries leave (ADDs not deleted again)."""
    files: dict[tuple[bytes, int, str], IndexManifestEntry] = {}
    for e in entries:
        key = (e.partition, e.bucket, e.file.file_name)
        if e.kind is FileKind.ADD:
            files[key] = e
        else:
            files.pop(key, None)
    return list(files.values())
