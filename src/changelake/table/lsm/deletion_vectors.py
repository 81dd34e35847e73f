"""Compaction with deletion vectors (Paimon's ``LookupMergeTreeCompactRewriter`` with
``deletion-vectors.enabled``): the rows a compaction brings up from level 0 are looked up in
the bucket's files above level 0 that it does not rewrite; each older row found is merged with
the new ones (so merge engines see the previous value) and its position goes into its file's
deletion vector. After every commit each key has at most one live row above level 0, so
readers read files alone. The vectors of a bucket are written as one index file."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from changelake.table.context import TableContext
from changelake.table.format import deletion_vector, index_manifest
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta
from changelake.table.io.killpoints import KillPoint
from changelake.table.lsm import recent_files

Vectors = dict[str, BitMap]


def live_rows(rows: pa.Table, vector: BitMap | None) -> pa.Table:
    """The rows of a whole file its deletion vector does not mark."""
    keep = deletion_vector.keep_mask(vector, rows.num_rows)
    return rows if keep is None else rows.filter(keep)


def _positions(ctx: TableContext, stored: pa.Table, keys: pa.Table) -> np.ndarray:
    """Positions of the rows of a key-sorted file (unique keys: a file above level 0) whose key
    is among ``keys`` (in any order, repeated when a key repeats): binary searches for one
    integer key, else a semi join."""
    key_columns = list(ctx.key_columns)
    column = stored.column(key_columns[0])
    if len(key_columns) == 1 and pa.types.is_integer(column.type) and column.null_count == 0:
        values = column.to_numpy()
        wanted = keys.column(0).to_numpy()
        at: np.ndarray = np.searchsorted(values, wanted)
        inside = at < len(values)
        at = at[inside]
        return np.asarray(at[values[at] == wanted[inside]])
    indexed = stored.select(key_columns).append_column("__position", pa.array(np.arange(stored.num_rows)))
    found = indexed.join(keys.select(key_columns), keys=key_columns, join_type="left semi")
    return np.asarray(found.column("__position").to_numpy())


def take_older_rows(
    ctx: TableContext, bucket_dir: str, rows: pa.Table, span: Sequence[DataFileMeta], lookup: Iterable[DataFileMeta],
    read: Callable[[DataFileMeta], pa.Table], vectors: Vectors, *, with_values: bool,
) -> pa.Table:
    """The live rows of the ``lookup`` files whose keys are among ``rows``' keys (``span``: the
    files ``rows`` came from, whose key range bounds the search), marked deleted in
    ``vectors`` (replaced, not changed in place: callers share the older bitmaps). Without
    ``with_values`` (a merge that keeps the newest row never needs an older one) only the key
    columns of the files are read and no row is returned."""
    key_of = ctx.key_of
    low = min(key_of(f.min_key) for f in span)
    high = max(key_of(f.max_key) for f in span)
    keys = rows.select(list(ctx.key_columns))
    found = []
    for f in lookup:
        if key_of(f.max_key) < low or key_of(f.min_key) > high:
            continue
        stored = read(f) if with_values else recent_files.read(ctx, bucket_dir, f, ctx.key_columns)
        at = _positions(ctx, stored, keys)
        if not len(at):
            continue
        marked = deletion_vector.bitmap_of(at)
        vector = vectors.get(f.file_name)
        if vector:
            marked -= vector  # rows marked before are not live: only the newly found ones
        if not marked:
            continue
        vectors[f.file_name] = marked if not vector else vector | marked
        if with_values:
            taken = stored.take(pa.array(deletion_vector.positions_of(marked)))
            found.append(taken.select(rows.schema.names).cast(rows.schema))
    return pa.concat_tables(found) if found else rows.schema.empty_table()


def write_index_file(ctx: TableContext, vectors: Mapping[str, BitMap]) -> IndexFileMeta | None:
    """One index file holding a bucket's (non-empty) deletion vectors; None when there are none."""
    data, ranges = deletion_vector.index_file_bytes(vectors)
    if not ranges:
        return None
    name = f"index-{uuid.uuid4()}-0"
    ctx.file_io.write_bytes(ctx.paths.index(name), data, kill_point=KillPoint.INDEX_FILE)
    return IndexFileMeta(index_manifest.DELETION_VECTORS, name, len(data), len(ranges), ranges)


def index_changes(
    ctx: TableContext, base_files: Sequence[IndexFileMeta], base: Mapping[str, BitMap], vectors: Vectors | None,
    live: Iterable[DataFileMeta],
) -> tuple[tuple[IndexFileMeta, ...], tuple[IndexFileMeta, ...]]:
    """The index files a compaction adds and deletes for a bucket: the bucket's vectors after it
    (``vectors``, None: unchanged) restricted to its ``live`` files replace ``base_files`` (the
    index files that held ``base``) when they differ."""
    if vectors is None:
        return (), ()
    names = {f.file_name for f in live}
    kept = {name: v for name, v in vectors.items() if name in names and v}
    if kept.keys() == base.keys() and all(kept[name] == base[name] for name in kept):
        return (), ()
    added = write_index_file(ctx, kept)
    return (() if added is None else (added,)), tuple(base_files)
