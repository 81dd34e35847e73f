"""Merge-on-read of a split whose files overlap, merging only the keys that need it.

A merge changes nothing for a key that one row of the split holds alone: the merge engines
return such a row as it is (Paimon's ``ReducerMergeFunctionWrapper``), and a read drops it if
it is a retraction. So the split's keys are sorted (not its rows), and only the rows of keys
held more than once go through the merge engine; a ``deduplicate`` table without
``sequence.field`` merges none, each key's last row is taken where it lies. The result is then
taken from the files' rows (and the merged ones) in key order, in one pass, as a merge of the
whole split returns it.

Files whose sequence-number ranges do not overlap are ordered by them, so their
``_SEQUENCE_NUMBER`` column is not read, unless a file holds a key twice (the rows' order in
the file would not tell which is newer): then the split is read the common way. Files without
a retraction (by their statistics) are read without ``_VALUE_KIND``; string columns stored as
dictionary indices are decoded from their dictionaries.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from changelake.table.context import TableContext
from changelake.table.format import data_file, kv
from changelake.table.format.manifest import DataFileMeta
from changelake.table.merge import sort
from changelake.table.read import deletion_vectors, planner
from changelake.table.read.planner import Split


def read(ctx: TableContext, split: Split, columns: Sequence[str]) -> pa.Table | None:
    """The merged rows of ``split`` in key order, without retractions, with ``columns`` (table
    columns, the merge's ordering columns among them); None when the split is to be read the
    common way (a file holds a key twice and sequence numbers were not read; an
    ``ignore-delete`` table's retractions)."""
    files = list(split.files)
    vectors = list(split.deletion_files or (None,) * len(files))
    oldest_first = _oldest_first(files)
    if oldest_first is not None:
        files, vectors = [files[i] for i in oldest_first], [vectors[i] for i in oldest_first]
    keys = list(ctx.key_names)
    values = list(dict.fromkeys([*keys, *columns]))
    wanted = [kv.VALUE_KIND, *([] if oldest_first is not None else [kv.SEQUENCE]), *values]
    parts = [ctx.read_file(split.bucket_dir, f, planner.file_columns(wanted, f),
                           kinds_for_retractions=True, dictionaries=True,
                           deleted=None if d is None else deletion_vectors.read_vector(ctx, d))
             for f, d in zip(files, vectors, strict=True)]
    counts = [p.num_rows for p in parts]
    schema = pa.schema([ctx.arrow_schema.field(c) for c in values])
    if not sum(counts):
        return schema.empty_table().select(list(columns))
    grouped = _grouped(ctx, parts, counts, ranked=oldest_first is not None)
    if grouped is None:
        return None
    order, ends, sequence = grouped
    adds = _adds(parts)
    engine = ctx.merge_engine
    if engine.ignore_delete and adds is not None and not adds.all():
        return None  # retractions the merge would skip before it groups the rows: the common way
    lasts = np.flatnonzero(ends)
    rows = [p.select(values) for p in parts]
    if engine.keeps_last_row:
        picked = order[lasts]  # each key's last row, in (key, sequence) order
        live = None if adds is None else adds[picked]
    else:
        starts = np.concatenate(([0], lasts[:-1] + 1)).astype(np.int64)
        alone = lasts == starts
        shared = np.sort(order[np.repeat(~alone, lasts - starts + 1)])
        picked = np.empty(len(lasts), dtype=np.int64)
        picked[alone] = order[starts[alone]]
        live = np.ones(len(lasts), dtype=bool)
        if adds is not None:
            live[alone] = adds[picked[alone]]
        if len(shared):
            merged = ctx.merge_rows(_layout(ctx, parts, counts, shared, sequence()), drop_deletes=False)
            if merged.num_rows != int((~alone).sum()):
                return None  # not one row per key (cannot happen without ignore-delete's retractions)
            kinds = np.asarray(merged.column(kv.VALUE_KIND).to_numpy())
            picked[~alone] = len(order) + np.arange(merged.num_rows)
            live[~alone] = (kinds & 1) == 0
            rows = [data_file.decoded(r) for r in rows] + [merged.select(values)]
    if live is not None and not live.all():
        picked = picked[live]
    if any(not r.schema.equals(rows[0].schema) for r in rows):
        rows = [_as(data_file.decoded(r), schema) for r in rows]
    # Taken before string columns are decoded: their dictionaries' indices are copied, not the strings.
    return _as(data_file.decoded(pa.concat_tables(rows).take(pa.array(picked))), schema).select(list(columns))


def _as(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    return rows if rows.schema.equals(schema) else rows.cast(schema)


def _grouped(ctx: TableContext, parts: Sequence[pa.Table], counts: Sequence[int], *, ranked: bool
             ) -> tuple[np.ndarray, np.ndarray, Callable[[], np.ndarray]] | None:
    """The rows of ``parts`` (concatenated) ordered by (key, sequence): that order, the mask of
    the last row of each key in it, and the rows' sequence numbers (or, ``ranked``, their
    file's rank; None when a file holds a key twice: its rows' order is then unknown)."""
    keys = [pa.chunked_array([c for p in parts for c in data_file.decoded_column(p.column(k)).chunks],
                             ctx.arrow_schema.field(k).type) for k in ctx.key_names]
    bounds = np.cumsum([0, *counts])

    def ranks() -> np.ndarray:
        return np.repeat(np.arange(len(parts), dtype=np.int64), counts)

    numeric = sort.numpy_key(keys[0]) if len(keys) == 1 and ranked else None
    if numeric is not None:
        # Each file's keys ascending and unique (files are sorted by key): one stable sort of
        # the files' runs, oldest first, orders the rows by (key, file).
        # (a file whose rows its deletion vector all marks holds none: numeric[0:-1] is not empty)
        if any(np.any(numeric[low + 1:high] <= numeric[low:high - 1])
               for low, high in itertools.pairwise(bounds) if high - low > 1):
            return None
        order = np.asarray(np.argsort(numeric, kind="stable"), dtype=np.int64)
        ordered = numeric[order]
        return order, np.append(ordered[1:] != ordered[:-1], True), ranks
    sequence = ranks() if ranked else np.concatenate([np.asarray(p.column(kv.SEQUENCE).to_numpy()) for p in parts])
    order = sort.sort_indices(keys, pa.array(sequence))
    ends = sort.ordered_group_ends(keys, order)
    if ranked and np.any(~ends[:-1] & (sequence[order][1:] == sequence[order][:-1])):
        return None
    return order, ends, lambda: sequence


def _oldest_first(files: Sequence[DataFileMeta]) -> list[int] | None:
    """The files' positions ordered by sequence numbers when no two files' ranges overlap
    (every row of a file is then newer than every row of the files before it); else None."""
    ordered = sorted(range(len(files)), key=lambda i: files[i].min_sequence_number)
    for a, b in itertools.pairwise(ordered):
        if files[a].max_sequence_number >= files[b].min_sequence_number:
            return None
    return ordered


def _adds(parts: Sequence[pa.Table]) -> np.ndarray | None:
    """Which rows are inserts or update-afters (None: all are; files read without their kinds
    hold no retraction)."""
    if all(kv.VALUE_KIND not in p.column_names for p in parts):
        return None
    kinds = np.concatenate([np.asarray(p.column(kv.VALUE_KIND).to_numpy()) if kv.VALUE_KIND in p.column_names
                            else np.full(p.num_rows, kv.INSERT, dtype=np.int8) for p in parts])
    adds: np.ndarray = (kinds & 1) == 0
    return adds


def _layout(ctx: TableContext, parts: Sequence[pa.Table], counts: Sequence[int], positions: np.ndarray,
            sequence: np.ndarray) -> pa.Table:
    """The rows at ascending ``positions`` (counted across ``parts``) in the key-value layout a
    merge takes: key columns (copies of their value columns), sequence numbers (``sequence``:
    read, or each file's rank) and kinds (inserts where a file was read without them)."""
    taken = []
    bounds = np.cumsum([0, *counts])
    for part, low, high in zip(parts, bounds[:-1], bounds[1:], strict=True):
        mine = positions[np.searchsorted(positions, low):np.searchsorted(positions, high)]
        if not len(mine):
            continue
        rows = data_file.decoded(part.take(pa.array(mine - low)))
        kinds = rows.column(kv.VALUE_KIND) if kv.VALUE_KIND in rows.column_names else \
            pa.array(np.full(len(mine), kv.INSERT, dtype=np.int8))
        values = rows.drop_columns([c for c in (kv.VALUE_KIND, kv.SEQUENCE) if c in rows.column_names])
        system = {kv.key_column(k): values.column(k) for k in ctx.key_names}
        system[kv.SEQUENCE] = pa.array(sequence[mine])
        system[kv.VALUE_KIND] = kinds
        taken.append(pa.Table.from_arrays([*system.values(), *values.columns],
                                          names=[*system, *values.column_names]))
    return pa.concat_tables(taken)
