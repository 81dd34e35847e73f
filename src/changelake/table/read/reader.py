"""Reading splits: each split's files merged by the merge engine (or read raw), filtered and
projected; many splits in parallel on the shared executor, a bounded window at a time. Change
scans read one-file splits as stored, with each row's kind."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from changelake.errors import ScanError
from changelake.table.context import TableContext
from changelake.table.executor import WORKERS, executor
from changelake.table.format import data_file, deletion_vector, kv
from changelake.table.format.manifest import DataFileMeta
from changelake.table.merge import chunked
from changelake.table.read import deletion_vectors, merged_split, planner
from changelake.table.read.constants import CONSTANT_COLUMNS
from changelake.table.read.deletion_vectors import DeletionFile
from changelake.table.read.planner import Split

# Splits read ahead of the one being returned weigh at most this much (their files' sizes).
READ_AHEAD_BYTES = 128 * 1024 * 1024


def read_split(
    ctx: TableContext,
    split: Split,
    columns: Sequence[str],
    expression: pc.Expression | None,
    rows: tuple[int, int] | None = None,
) -> pa.Table:
    """The merged rows of one split, filtered by ``expression`` and projected to ``columns``;
    ``rows`` = (start, stop) keeps only those merged rows (counted before the filter), so a
    change stream can resume inside a split."""
    if chunked.is_big(split.files):
        parts = list(iter_split(ctx, split, columns, expression, rows))
        return pa.concat_tables(parts) if parts else _empty(ctx, columns)
    if not split.raw_convertible:
        merged = _merged_where_shared(ctx, split, columns, expression, rows)
        if merged is not None:
            return merged
    wanted = _wanted(ctx, split, columns, expression)
    deletion_files = split.deletion_files or (None,) * len(split.files)
    if split.raw_convertible:
        # Not merged: each file's live rows, in one filter (before strings are decoded).
        parts = [data_file.decoded(_live_rows(ctx, ctx.read_file(split.bucket_dir, f, planner.file_columns(wanted, f),
                                                                  dictionaries=True, kinds_for_retractions=True), d))
                 for f, d in zip(split.files, deletion_files, strict=True)]
    else:
        parts = [ctx.read_file(split.bucket_dir, f, wanted, deleted=_vector(ctx, d))
                 for f, d in zip(split.files, deletion_files, strict=True)]
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    merged = _with_partition(ctx, split, table, columns, expression) if split.raw_convertible else \
        ctx.merge_rows(table, drop_deletes=True)
    if rows is not None:
        merged = merged.slice(rows[0], rows[1] - rows[0])
    return apply_filter(ctx, merged, expression).select(list(columns))


def _merged_where_shared(ctx: TableContext, split: Split, columns: Sequence[str],
                         expression: pc.Expression | None, rows: tuple[int, int] | None) -> pa.Table | None:
    """:func:`read_split` of a split to merge, merging only the keys that several of its rows
    hold (:mod:`merged_split`). Partition columns that order no merge are the split's
    constants, not read. None when the files do not allow it."""
    engine = ctx.merge_engine
    value_columns = list(ctx.arrow_schema.names) if expression is not None else engine.required_columns(columns)
    constant = set(_partition_columns(ctx, columns, expression)) - set(ctx.key_names) - engine.ordering_columns
    merged = merged_split.read(ctx, split, [c for c in value_columns if c not in constant])
    if merged is None:
        return None
    if rows is not None:
        merged = merged.slice(rows[0], rows[1] - rows[0])
    return apply_filter(ctx, _with_partition(ctx, split, merged, columns, expression), expression).select(list(columns))


def iter_split(
    ctx: TableContext,
    split: Split,
    columns: Sequence[str],
    expression: pc.Expression | None,
    rows: tuple[int, int] | None = None,
) -> Iterator[pa.Table]:
    """What :func:`read_split` returns, in parts of bounded size: a raw split batch by batch,
    else merged chunk by chunk (:func:`chunked.key_bounded`), never a whole file in memory."""
    wanted = _wanted(ctx, split, columns, expression)
    deletion_files = split.deletion_files or (None,) * len(split.files)
    sources = [_file_batches(ctx, split.bucket_dir, f, d, planner.file_columns(wanted, f) if split.raw_convertible
                             else wanted, kinds_for_retractions=split.raw_convertible)
               for f, d in zip(split.files, deletion_files, strict=True)]
    if split.raw_convertible:
        merged: Iterator[pa.Table] = (_with_partition(ctx, split, _without_retractions(batch), columns, expression)
                                      for source in sources for batch in source)
    else:
        merged = (ctx.merge_rows(chunk, drop_deletes=True)
                  for chunk in chunked.key_bounded(sources, ctx.key_columns))
    if rows is not None:
        merged = _window(merged, rows)
    for part in merged:
        out = apply_filter(ctx, part, expression).select(list(columns))
        if out.num_rows:
            yield out


def _wanted(ctx: TableContext, split: Split, columns: Sequence[str], expression: pc.Expression | None) -> list[str]:
    """The file columns a split's read needs."""
    # A filter may name any column; a projection needs the columns its merge depends on too.
    value_columns = list(ctx.arrow_schema.names) if expression is not None else \
        ctx.merge_engine.required_columns(columns)
    if split.raw_convertible:
        # Raw splits are not merged: their rows need only their values, not the partition's
        # columns (the split's partition gives them), and their kinds, to drop retractions
        # (left out by kinds_if_retracting where a file holds none).
        constant = set(_partition_columns(ctx, columns, expression))
        kinds = [kv.VALUE_KIND] if ctx.key_value_files else []
        stored = [c for c in value_columns if c not in constant]
        if not kinds and not stored:
            # An append table's read of partition columns only (or none): Arrow loses the row
            # count of a read without columns, so one column is read and projected away.
            stored = [next((c for c in ctx.arrow_schema.names if c not in constant), ctx.arrow_schema.names[0])]
        return [*kinds, *stored]
    return [*ctx.key_columns, kv.SEQUENCE, kv.VALUE_KIND, *value_columns]


def _partition_columns(ctx: TableContext, columns: Sequence[str], expression: pc.Expression | None) -> list[str]:
    """The partition columns a raw split's read returns or filters on."""
    return list(ctx.partition_keys) if expression is not None else [c for c in ctx.partition_keys if c in columns]


def _with_partition(ctx: TableContext, split: Split, rows: pa.Table, columns: Sequence[str],
                    expression: pc.Expression | None) -> pa.Table:
    """Rows of a raw split with its partition's columns added as constants: they are the same
    in every row of a bucket, so they are not decoded from the files (as Paimon's readers fill
    partition fields from the partition, not from the file)."""
    names = _partition_columns(ctx, columns, expression)
    if not names:
        return rows
    values = dict(zip(ctx.partition_keys, ctx.partition_values(split.partition), strict=True))
    for name in names:
        if name in rows.column_names:  # read from the file after all (see _wanted)
            continue
        field = ctx.arrow_schema.field(name)
        rows = rows.append_column(field, CONSTANT_COLUMNS.column(values[name], field.type, rows.num_rows))
    return rows


def _empty(ctx: TableContext, columns: Sequence[str]) -> pa.Table:
    return pa.schema([ctx.arrow_schema.field(c) for c in columns]).empty_table()


def _window(parts: Iterator[pa.Table], rows: tuple[int, int]) -> Iterator[pa.Table]:
    """Rows [start, stop) of the concatenation of ``parts``, counted across them."""
    start, stop = rows
    position = 0
    for part in parts:
        end = position + part.num_rows
        if end > start:
            yield part.slice(max(start - position, 0), min(stop, end) - max(start, position))
        position = end
        if position >= stop:
            return


def _file_batches(ctx: TableContext, bucket_dir: str, meta: DataFileMeta, deletion_file: DeletionFile | None,
                  columns: Sequence[str], *, kinds_for_retractions: bool) -> Iterator[pa.Table]:
    """The rows of a file in batches, without those its deletion vector marks (by position)."""
    vector = None if deletion_file is None else deletion_vectors.read_vector(ctx, deletion_file)
    position = 0
    for batch in ctx.read_file_batches(bucket_dir, meta, columns, chunked.BATCH_ROWS,
                                       kinds_for_retractions=kinds_for_retractions):
        keep = deletion_vector.keep_mask(vector, batch.num_rows, position)
        position += batch.num_rows
        yield batch if keep is None else batch.filter(keep)


def _vector(ctx: TableContext, deletion_file: DeletionFile | None) -> BitMap | None:
    return None if deletion_file is None else deletion_vectors.read_vector(ctx, deletion_file)


def _live_rows(ctx: TableContext, part: pa.Table, deletion_file: DeletionFile | None) -> pa.Table:
    """The rows of a whole file of a raw split that are neither retractions nor marked by the
    file's deletion vector (one mask, one filter), without their kinds (see :func:`_kindless`)."""
    keep = _kept_kinds(part)
    if deletion_file is not None:
        alive = deletion_vector.keep_mask(deletion_vectors.read_vector(ctx, deletion_file), part.num_rows)
        if alive is not None:
            keep = alive if keep is None else keep & alive
    return _kindless(part if keep is None or keep.all() else part.filter(keep))


def _without_retractions(rows: pa.Table) -> pa.Table:
    """The rows of a raw split's batch that are not retractions (see :func:`_live_rows`)."""
    keep = _kept_kinds(rows)
    return _kindless(rows if keep is None else rows.filter(keep))


def _kindless(rows: pa.Table) -> pa.Table:
    """Rows of a raw split without ``_VALUE_KIND``, which a file whose statistics show no
    retraction was read without: every part of a split then has the same columns. Kept when
    it is the only column (a table without columns loses its row count when concatenated)."""
    if kv.VALUE_KIND in rows.column_names and rows.num_columns > 1:
        return rows.drop_columns([kv.VALUE_KIND])
    return rows


def _kept_kinds(rows: pa.Table) -> np.ndarray | None:
    """Which rows are inserts or update-afters; None when all are (or the kinds were left
    out: the file's statistics showed no retraction)."""
    if kv.VALUE_KIND not in rows.column_names:
        return None
    kinds = np.asarray(rows.column(kv.VALUE_KIND).to_numpy())
    if not _any_odd(kinds):
        return None
    keep: np.ndarray = (kinds & 1) == 0
    return keep


def _any_odd(kinds: np.ndarray) -> bool:
    """Whether some kind is -U (1) or -D (3), the odd ones: the bytes ORed eight at a time."""
    whole = len(kinds) // 8 * 8
    bits = int(np.bitwise_or.reduce(kinds[:whole].view(np.uint64))) if whole else 0
    bits |= int(np.bitwise_or.reduce(kinds[whole:].view(np.uint8))) if whole < len(kinds) else 0
    return bool(bits & 0x0101010101010101)


def apply_filter(ctx: TableContext, table: pa.Table, expression: pc.Expression | None) -> pa.Table:
    """The rows of ``table`` that match ``expression`` (all rows without one)."""
    if expression is None:
        return table
    try:
        return table.filter(expression)
    except pa.ArrowException as exc:
        raise ScanError(f"filter {expression} does not apply: {exc}", table=ctx.name) from None


def read_changes(ctx: TableContext, split: Split, columns: Sequence[str],
                 rows: tuple[int, int] | None = None) -> pa.Table:
    """The rows of a one-file split as stored, not merged: ``_VALUE_KIND`` (each row's kind;
    +I for an append table's) then ``columns``, in file order; ``rows`` = (start, stop) reads
    only those rows, less those the split's deletion vector (if any) marks."""
    (meta,) = split.files
    if ctx.key_value_files:
        stored = ctx.read_file(split.bucket_dir, meta, [kv.VALUE_KIND, *columns], rows)
    else:  # an append table's rows are all inserts
        plain = ctx.read_file(split.bucket_dir, meta, columns, rows)
        stored = plain.add_column(0, pa.field(kv.VALUE_KIND, pa.int8(), nullable=False),
                                  CONSTANT_COLUMNS.column(kv.INSERT, pa.int8(), plain.num_rows))
    deletion = split.deletion_files[0] if split.deletion_files else None
    # Positions stay those of the stored rows: the vector drops rows of the range read.
    keep = deletion_vector.keep_mask(_vector(ctx, deletion), stored.num_rows, rows[0] if rows else 0)
    return stored if keep is None else stored.filter(pa.array(keep))


def read_splits(
    ctx: TableContext, splits: Sequence[Split], columns: Sequence[str], expression: pc.Expression | None
) -> Iterator[pa.Table]:
    """Every split's rows in plan order, read in parallel with a window of a few splits ahead
    whose files weigh at most :data:`READ_AHEAD_BYTES` together (always at least one split).
    A big split is read when its turn comes, in chunks (:func:`iter_split`)."""
    pool = executor()
    # (weight, a small split's read, or a big split to read in turn)
    pending: deque[tuple[int, Future[pa.Table] | Split]] = deque()
    upcoming = iter(splits)
    waiting = next(upcoming, None)
    in_flight = 0

    def top_up() -> None:
        nonlocal waiting, in_flight
        while waiting is not None and len(pending) < 2 * WORKERS:
            big = chunked.is_big(waiting.files)
            # A big split holds about the chunked-merge threshold at a time.
            weight = chunked.CHUNKED_MERGE_BYTES if big else sum(f.file_size for f in waiting.files)
            if pending and in_flight + weight > READ_AHEAD_BYTES:
                return
            read = waiting if big else pool.submit(read_split, ctx, waiting, columns, expression)
            pending.append((weight, read))
            in_flight += weight
            waiting = next(upcoming, None)

    top_up()
    while pending:
        weight, read = pending.popleft()
        if isinstance(read, Future):
            result = read.result()
            in_flight -= weight
            top_up()
            yield result
        else:
            yield from iter_split(ctx, read, columns, expression)
            in_flight -= weight
            top_up()
