"""Writing and reading the Parquet data files of a bucket, with their manifest metadata."""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from changelake.errors import CorruptMetadataError
from changelake.table import binary_row, kv
from changelake.table.fileio import FileIO
from changelake.table.manifest import FILE_SOURCE_APPEND, DataFileMeta, SimpleStats

EMPTY_STATS = SimpleStats(
    binary_row.serialize(binary_row.to_bytes([], []), 0),
    binary_row.serialize(binary_row.to_bytes([], []), 0),
    (),
)


@dataclass(frozen=True)
class FileSettings:
    """How data files of one table are written."""

    schema_id: int
    key_names: tuple[str, ...]
    compression: str
    zstd_level: int
    target_file_size: int
    prefix: str = "data-"


def _key_row(table: pa.Table, names: Sequence[str], index: int) -> bytes:
    columns = [table.column(kv.key_column(k)).slice(index, 1) for k in names]
    return binary_row.serialize(binary_row.encode(columns).row(0), len(names))


def _key_stats(table: pa.Table, names: Sequence[str]) -> SimpleStats:
    mins, maxs, nulls = [], [], []
    for name in names:
        column = table.column(kv.key_column(name))
        bounds = pc.min_max(column)
        mins.append(pa.array([bounds["min"].as_py()], type=column.type))
        maxs.append(pa.array([bounds["max"].as_py()], type=column.type))
        nulls.append(column.null_count)
    arity = len(names)
    return SimpleStats(
        binary_row.serialize(binary_row.encode(mins).row(0), arity),
        binary_row.serialize(binary_row.encode(maxs).row(0), arity),
        tuple(nulls),
    )


def file_name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4()}-0.parquet"


def write(
    file_io: FileIO, bucket_dir: str, rows: pa.Table, settings: FileSettings, level: int,
    file_source: int = FILE_SOURCE_APPEND,
) -> DataFileMeta:
    """Write sorted key-value rows as one Parquet file and describe it for the manifest."""
    name = file_name(settings.prefix)
    sink = io.BytesIO()
    level_arg = settings.zstd_level if settings.compression == "zstd" else None
    pq.write_table(
        rows, sink, compression=settings.compression, compression_level=level_arg,
        write_statistics=False, store_schema=True,
    )
    data = sink.getvalue()
    file_io.write_bytes(f"{bucket_dir}/{name}", data)
    seq = pc.min_max(rows.column(kv.SEQUENCE))
    kinds = rows.column(kv.VALUE_KIND)
    deletes = pc.sum(pc.or_(pc.equal(kinds, kv.UPDATE_BEFORE), pc.equal(kinds, kv.DELETE))).as_py() or 0
    return DataFileMeta(
        file_name=name,
        file_size=len(data),
        row_count=rows.num_rows,
        min_key=_key_row(rows, settings.key_names, 0),
        max_key=_key_row(rows, settings.key_names, rows.num_rows - 1),
        key_stats=_key_stats(rows, settings.key_names),
        value_stats=EMPTY_STATS,
        min_sequence_number=seq["min"].as_py(),
        max_sequence_number=seq["max"].as_py(),
        schema_id=settings.schema_id,
        level=level,
        creation_time_ms=int(time.time() * 1000),
        delete_row_count=deletes,
        file_source=file_source,
        value_stats_cols=(),
    )


def roll(rows: pa.Table, target_size: int) -> list[pa.Table]:
    """Slices of sorted rows of about ``target_size`` in-memory bytes each (file rolling)."""
    if rows.num_rows == 0:
        return []
    per_row = max(1, rows.nbytes // rows.num_rows)
    step = max(1, target_size // per_row)
    return [rows.slice(start, step) for start in range(0, rows.num_rows, step)]


def read(file_io: FileIO, path: str, schema: pa.Schema, columns: Sequence[str] | None = None) -> pa.Table:
    """Rows of a data file in ``schema``'s types (a subset of columns when given)."""
    try:
        with file_io.arrow_fs.open_input_file(path) as source:
            table = pq.ParquetFile(source).read(columns=list(columns) if columns is not None else None)
    except FileNotFoundError:
        raise CorruptMetadataError(f"data file {path} is missing") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file {path} is unreadable: {exc}") from None
    wanted = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    if table.schema.equals(wanted):
        return table
    return table.select(wanted.names).cast(wanted)

