"""Compaction with deletion vectors (Paimon's ``LookupMergeTreeCompactRewriter`` with
``deletion-vectors.enabled``): the rows a compaction brings up from level 0 are looked up in
the bucket's files above level 0 that it does not rewrite; each older row found is merged with
the new ones (so merge engines see the previous value) and its position goes into its file's
deletion vector. After every commit each key has at most one live row above level 0, so
readers read files alone. The vectors of a bucket are written as one index file."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from changelake.table.context import TableContext
from changelake.table.format import deletion_vector, index_manifest
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta
from changelake.table.io.killpoints import KillPoint
from changelake.table.lsm import lookup_files
from changelake.table.lsm.lookup_files import LookupFiles
from changelake.table.merge import sort
from changelake.table.read import deletion_vectors as read_vectors

Vectors = dict[str, BitMap]


@dataclass(frozen=True)
class IndexBase:
    """A bucket's committed index files and the deletion vectors they hold."""

    files: tuple[IndexFileMeta, ...]
    vectors: Vectors

    def after(self, vectors: Vectors, added: Sequence[IndexFileMeta], deleted: Sequence[IndexFileMeta],
              live: Iterable[DataFileMeta]) -> IndexBase:
        """The bucket's index files and vectors once a commit lands that replaces ``deleted``
        with ``added``, which hold ``vectors`` (those of the ``live`` files)."""
        names = {f.file_name for f in live}
        gone = {f.file_name for f in deleted}
        return IndexBase(tuple(f for f in self.files if f.file_name not in gone) + tuple(added),
                         {name: v for name, v in vectors.items() if name in names and v})


def live_rows(rows: pa.Table, vector: BitMap | None) -> pa.Table:
    """The rows of a whole file its deletion vector does not mark."""
    keep = deletion_vector.keep_mask(vector, rows.num_rows)
    return rows if keep is None else rows.filter(keep)


def _integer_key(ctx: TableContext, rows: pa.Table) -> str | None:
    """The key column when the table's key is one integer column (the binary-search path)."""
    key_columns = ctx.key_columns
    if len(key_columns) == 1 and pa.types.is_integer(rows.schema.field(key_columns[0]).type):
        return key_columns[0]
    return None


def _ascending(keys: np.ndarray) -> bool:
    return bool(np.all(keys[1:] >= keys[:-1]))


def take_older_rows(
    ctx: TableContext, bucket_dir: str, rows: pa.Table, span: Sequence[DataFileMeta], lookup: Iterable[DataFileMeta],
    store: LookupFiles, vectors: Vectors, *, with_values: bool,
) -> pa.Table:
    """The live rows of the ``lookup`` files whose keys are among ``rows``' keys (``span``: the
    files ``rows`` came from, whose key range bounds the search), marked deleted in
    ``vectors`` (replaced, not changed in place: callers share the older bitmaps). The files
    are read through the table's lookup files: without ``with_values`` (a merge that keeps
    the newest row never needs an older one) only their key columns, and no row is returned.

    For one integer key the incoming keys are sorted once; a file whose key range (from its
    metadata) holds none of them is not read at all, and the others are binary-searched for
    just the keys in their range: the work follows the incoming keys, not the table's size."""
    key_of = ctx.key_of
    integer_key = _integer_key(ctx, rows)
    # sorted (rows of one file are already), repeats kept (a repeated key finds the same
    # position twice: the bitmap takes it once)
    incoming = None if integer_key is None else rows.column(integer_key).to_numpy()
    wanted = None if incoming is None else incoming if _ascending(incoming) else np.sort(incoming)
    low = min(key_of(f.min_key) for f in span)
    high = max(key_of(f.max_key) for f in span)
    keys = rows.select(list(ctx.key_columns)) if wanted is None else None  # the semi join's side
    found = []
    for f in lookup:
        least, most = key_of(f.min_key), key_of(f.max_key)
        if most < low or least > high:
            continue
        path = lookup_files.path_of(bucket_dir, f.file_name)
        if wanted is not None:
            first = int(np.searchsorted(wanted, least[0], side="left"))
            last = int(np.searchsorted(wanted, most[0], side="right"))
            if first == last:
                continue
        if with_values:
            stored = store.rows(path, partial(ctx.read_file, bucket_dir, f))
        else:
            stored = store.keys(path, partial(ctx.read_file, bucket_dir, f, ctx.key_columns))
        if integer_key is not None and wanted is not None:
            at = sort.sorted_positions(stored.column(integer_key), wanted[first:last])
        else:
            assert keys is not None
            indexed = stored.select(ctx.key_columns).append_column(
                "__position", pa.array(np.arange(stored.num_rows)))
            semi = indexed.join(keys, keys=ctx.key_columns, join_type="left semi")
            at = np.asarray(semi.column("__position").to_numpy())
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
            taken = sort.take_sorted(stored, deletion_vector.positions_of(marked).astype(np.int64))
            found.append(taken.select(rows.schema.names).cast(rows.schema))
    return pa.concat_tables(found) if found else rows.schema.empty_table()


def write_index_file(ctx: TableContext, vectors: Mapping[str, BitMap]) -> IndexFileMeta | None:
    """One index file holding a bucket's (non-empty) deletion vectors; None when there are none."""
    data, ranges = deletion_vector.index_file_bytes(vectors)
    if not ranges:
        return None
    name = f"index-{uuid.uuid4()}-0"
    ctx.file_io.write_bytes(ctx.paths.index(name), data, kill_point=KillPoint.INDEX_FILE)
    read_vectors.remember_index_file(ctx, ctx.paths.index(name), data)
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
    if kept.keys() == base.keys() and all(kept[name] is base[name] or kept[name] == base[name] for name in kept):
        return (), ()
    added = write_index_file(ctx, kept)
    return (() if added is None else (added,)), tuple(base_files)


# A column a section's rows carry while merged when some are looked up: whether a row comes
# from a level-0 file.
FROM_LEVEL0 = "__changelake_from_level0__"


def tag_level0(rows: pa.Table, f: DataFileMeta) -> pa.Table:
    """Rows of ``f`` with the :data:`FROM_LEVEL0` column."""
    return rows.append_column(FROM_LEVEL0, pa.array(np.full(rows.num_rows, f.level == 0)))


def level0_only(ctx: TableContext, rows: pa.Table) -> pa.Table:
    """The rows (without the tag) from level 0 whose key has no row from a higher level. The
    higher rows (an intermediate run: the most) are only probed against the level-0 keys,
    never hashed or sorted themselves."""
    from_level0 = rows.column(FROM_LEVEL0).combine_chunks()
    rows = rows.drop_columns([FROM_LEVEL0])
    key_columns = ctx.key_columns
    level0, higher = rows.filter(from_level0), rows.select(key_columns).filter(pc.invert(from_level0))
    if not higher.num_rows or not level0.num_rows:
        return level0
    if len(key_columns) == 1:
        wanted = level0.column(key_columns[0])
        probed = higher.column(0)
        seen = probed.filter(pc.is_in(probed, value_set=wanted.combine_chunks()))  # few: level-0 keys at most
        return level0.filter(pc.invert(pc.is_in(wanted, value_set=seen.combine_chunks())))
    # (Arrow's joins hash their right side: the level-0 keys, then the few keys seen above)
    seen = higher.join(level0.select(key_columns), keys=key_columns, join_type="left semi")
    # (the join puts the key columns first and forgets that they are not null)
    return level0.join(seen, keys=key_columns, join_type="left anti").select(rows.schema.names).cast(rows.schema)
