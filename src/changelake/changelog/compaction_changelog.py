"""Changelog made by compaction (``lookup`` and ``full-compaction``): the diff of a bucket's state
before and after a compaction, for the keys the compaction brought new rows of.

The state is what a reader sees of the bucket without the rows not yet compacted: for
``lookup`` every file above level 0 (a compaction that includes level 0 moves all of it up,
so level 0 is never part of it), for ``full-compaction`` the top level. Each changelog-making
compaction takes the bucket from the state the previous one ended in to the next, so the
changelog of all of them, in order, folds into the state. Per key (Paimon's
LookupChangelogMergeFunctionWrapper and FullChangelogMergeFunctionWrapper): no before and an add
after → +I(after); an add before and none after → -D(before); adds before and after → -U(before),
+U(after), unless ``changelog-producer.row-deduplicate`` and their values are equal. first-row
emits only new keys, each as it was written, +I or +U (Paimon's FirstRowMergeFunctionWrapper adds
the kept row as it is).

Everything is whole-column: the previous rows of the keys come from the state's files (binary
searches in the sorted files for an integer key, else an Arrow semi join with the keys) and
are merged by the table's merge engine; the new rows are those merged with the incoming rows
(what the compaction writes); both sides are paired by one sort by (key, side).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from changelake.option_values import MergeEngineKind
from changelake.table.context import TableContext
from changelake.table.format import data_file, kv
from changelake.table.format.deletion_vector import bitmap_of, positions_of
from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm import lookup_files
from changelake.table.lsm.deletion_vectors import live_rows
from changelake.table.lsm.lookup_files import LookupFiles
from changelake.table.merge import sort

_ADDS = (kv.INSERT, kv.UPDATE_AFTER)


def file_rows(ctx: TableContext, cache: LookupFiles, bucket_dir: str, f: DataFileMeta) -> pa.Table:
    """All rows of a data file, through the table's lookup files."""
    return cache.rows(lookup_files.path_of(bucket_dir, f.file_name), partial(ctx.read_file, bucket_dir, f))


def incoming_rows(ctx: TableContext, cache: LookupFiles, bucket_dir: str,
                  files: Sequence[DataFileMeta]) -> pa.Table:
    """Every row of ``files``, the files a compaction brings into the state (the compaction
    read them through the cache just before)."""
    schema = ctx.file_schema
    parts = [kv.conformed(file_rows(ctx, cache, bucket_dir, f), schema) for f in files]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def merged_rows(ctx: TableContext, cache: LookupFiles, bucket_dir: str, files: Sequence[DataFileMeta],
                keys: pa.Table, span: tuple[DataFileMeta, ...], vectors: Mapping[str, BitMap]) -> pa.Table:
    """The merged row (delete markers kept) of every key of ``keys`` found in ``files`` (minus
    the rows their deletion ``vectors`` mark), one per key in key order. Files whose key range
    misses ``span``'s (the files the keys came from) are not read."""
    key_of = ctx.key_of
    low = min(key_of(f.min_key) for f in span)
    high = max(key_of(f.max_key) for f in span)
    schema = ctx.file_schema
    overlapping = [f for f in files if key_of(f.min_key) <= high and key_of(f.max_key) >= low]
    if not overlapping:
        return schema.empty_table()
    key_columns = list(ctx.key_columns)
    if len(key_columns) == 1 and pa.types.is_integer(schema.field(key_columns[0]).type):
        # Binary searches for the keys, then the found rows a deletion vector leaves: the work
        # follows the keys, not the size of the files.
        wanted = sort.unique_sorted(np.asarray(keys.column(0).to_numpy()))
        parts = []
        for f in overlapping:
            stored = file_rows(ctx, cache, bucket_dir, f)
            at = sort.sorted_positions(stored.column(key_columns[0]), wanted)
            vector = vectors.get(f.file_name)
            if vector and len(at):
                at = positions_of(bitmap_of(at) - vector).astype(np.int64)
            parts.append(kv.conformed(sort.take_sorted(stored, at), schema))
        rows = pa.concat_tables(parts)
    else:
        # One semi join over all the files (a zero-copy concatenation): the hash table is
        # built once, on the keys.
        rows = pa.concat_tables(kv.conformed(live_rows(file_rows(ctx, cache, bucket_dir, f),
                                                       vectors.get(f.file_name)), schema) for f in overlapping)
        rows = rows.join(keys, keys=key_columns, join_type="left semi")
    return kv.conformed(ctx.merge_rows(rows.select(schema.names), drop_deletes=False), schema)


def before_and_after(ctx: TableContext, cache: LookupFiles, bucket_dir: str, state: Sequence[DataFileMeta],
                     incoming: tuple[DataFileMeta, ...], vectors: Mapping[str, BitMap]) -> tuple[pa.Table, pa.Table]:
    """The merged rows, before and after a compaction, of the keys of the ``incoming`` files
    the compaction brings into the ``state`` files. The after-image of a key is its
    before-image merged with its incoming rows, as Paimon's lookup merge does: what the
    compaction writes for the key, without reading its output back."""
    rows = incoming_rows(ctx, cache, bucket_dir, incoming)
    before = merged_rows(ctx, cache, bucket_dir, state, rows.select(list(ctx.key_columns)), incoming, vectors)
    after = kv.conformed(ctx.merge_rows(pa.concat_tables([before, rows]), drop_deletes=False), before.schema)
    return before, after


def diff(ctx: TableContext, before: pa.Table, after: pa.Table) -> pa.Table:
    """The changelog rows (data-file layout, sorted by key; a key's -U before its +U) that take
    the keys from their ``before`` rows to their ``after`` rows (one merged row per key each)."""
    both = pa.concat_tables([before, after.select(before.schema.names)])
    side = np.concatenate([np.zeros(before.num_rows, np.int64), np.ones(after.num_rows, np.int64)])
    keys = [both.column(c) for c in ctx.key_columns]
    order = sort.sort_indices(keys, pa.array(side))
    side = side[order]
    n = len(order)
    if n == 0:
        return both
    # Worked out on the order, not on the rows sorted: only the changelog's rows are taken.
    ends = sort.ordered_group_ends(keys, order)
    starts = np.roll(ends, 1)
    starts[0] = True
    first = np.flatnonzero(starts)  # each key's first row: its before-image when side is 0
    last = np.flatnonzero(ends)  # each key's last row: its after-image when side is 1
    stored = np.asarray(both.column(kv.VALUE_KIND).to_numpy())[order]
    adds = np.isin(stored, _ADDS)
    had = (side[first] == 0) & adds[first]
    has = (side[last] == 1) & adds[last]
    inserted = ~had & has
    deleted = had & ~has
    updated = had & has
    first_row = ctx.merge_engine.kind is MergeEngineKind.FIRST_ROW
    if first_row:
        # A key's first row never changes once it is there: only new keys are changes.
        deleted[:] = False
        updated[:] = False
    elif ctx.options.changelog_row_deduplicate and updated.any():
        updated &= ~_equal_values(ctx, both, order[first], order[last])
    kinds = np.full(n, -1, dtype=np.int8)
    kinds[last[inserted]] = stored[last[inserted]] if first_row else kv.INSERT
    kinds[first[deleted]] = kv.DELETE
    kinds[first[updated]] = kv.UPDATE_BEFORE
    kinds[last[updated]] = kv.UPDATE_AFTER
    keep = kinds >= 0
    out = both.take(pa.array(order[keep]))
    index = out.schema.get_field_index(kv.VALUE_KIND)
    return out.set_column(index, out.schema.field(index), pa.array(kinds[keep], out.schema.field(index).type))


def _equal_values(ctx: TableContext, rows: pa.Table, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Whether rows ``left[i]`` and ``right[i]`` have equal values (nulls equal to nulls), the
    ``changelog-producer.row-deduplicate-ignore-fields`` aside."""
    ignored = set(ctx.options.changelog_row_deduplicate_ignore_fields)
    equal = np.ones(len(left), dtype=bool)
    for name in ctx.arrow_schema.names:
        if name in ignored:
            continue
        a, b = rows.column(name).take(pa.array(left)), rows.column(name).take(pa.array(right))
        same = pc.fill_null(pc.equal(a, b), False)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        equal &= np.asarray(pc.or_(same, both_null).to_numpy(zero_copy_only=False))
    return equal


def write(ctx: TableContext, bucket_dir: str, changes: pa.Table, level: int) -> list[DataFileMeta]:
    """The changelog rows as changelog files of the bucket (none when there are no rows)."""
    if changes.num_rows == 0:
        return []
    return data_file.write(ctx.file_io, bucket_dir, [changes], ctx.changelog_file_settings, level=level)
