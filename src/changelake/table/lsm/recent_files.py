"""Rows of the data files this process wrote recently, for the compactions that read them next.

A table with deletion vectors compacts each commit's level-0 files right after writing them, and
every commit's compaction reads the files the previous ones wrote (to merge them, or to look
their keys up). Data files are immutable and uniquely named, so the rows a writer just encoded
serve those reads without decoding the files again. The cache is bounded by bytes, least
recently used first out; a miss reads the file as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import pyarrow as pa

from changelake.table.context import TableContext
from changelake.table.format.manifest import DataFileMeta

MAX_BYTES = 128 * 1024 * 1024

_lock = threading.Lock()
# (path of the data file, schema id of its rows) -> its rows in the data-file layout, their bytes
_rows: OrderedDict[tuple[str, int], tuple[pa.Table, int]] = OrderedDict()
_size = 0


def _key(ctx: TableContext, bucket_dir: str, f: DataFileMeta) -> tuple[str, int]:
    return f"{ctx.file_io.protocol}://{bucket_dir}/{f.file_name}", f.schema_id


def keep(ctx: TableContext, bucket_dir: str, f: DataFileMeta, rows: pa.Table) -> None:
    """Remember the rows (all of them, in the data-file layout of ``ctx``'s schema) of the data
    file ``f`` that was just written in ``bucket_dir``."""
    global _size
    size = rows.nbytes
    if f.schema_id != ctx.schema.id or size > MAX_BYTES // 4:
        return
    key = _key(ctx, bucket_dir, f)
    with _lock:
        if key in _rows:
            return
        _rows[key] = rows, size
        _size += size
        while _size > MAX_BYTES:
            _, (_, evicted) = _rows.popitem(last=False)
            _size -= evicted


def get(ctx: TableContext, bucket_dir: str, f: DataFileMeta, columns: Sequence[str] | None = None) -> pa.Table | None:
    """The rows of ``f`` (only ``columns`` when given) if this process wrote it recently in
    ``ctx``'s schema; None otherwise."""
    if f.schema_id != ctx.schema.id:
        return None
    key = _key(ctx, bucket_dir, f)
    with _lock:
        kept = _rows.get(key)
        if kept is None:
            return None
        _rows.move_to_end(key)
    rows = kept[0]
    return rows if columns is None else rows.select(list(columns))


def read(ctx: TableContext, bucket_dir: str, f: DataFileMeta, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of ``f`` (only ``columns`` when given): kept ones, else read from storage."""
    rows = get(ctx, bucket_dir, f, columns)
    return ctx.read_file(bucket_dir, f, columns) if rows is None else rows
