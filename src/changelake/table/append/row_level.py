"""Row-level DELETE, UPDATE and MERGE of append tables, as Paimon runs them on a table without
a primary key (its Spark ``DeleteFromPaimonTableCommand``, ``UpdatePaimonTableCommand`` and
``MergeIntoPaimonTable``). The rows an operation touches are found in the latest snapshot's
files, by file and position; then:

* with ``deletion-vectors.enabled``, their positions are marked in their files' deletion
  vectors (merged with the vectors the files have; see :mod:`changelake.table.append.vectors`)
  and new values (updated rows) are written as new files, as Paimon's ``persistDeletionVectors``;
* without, each file holding a touched row is rewritten into its bucket, without the removed
  rows and with the updated ones in place, its rows keeping their order and sequence numbers
  (an updated row that belongs to another partition or bucket now goes to a new file).

Rows a merge inserts go to new files, as a write's. Everything lands as one OVERWRITE
snapshot (Paimon commits a delta that deletes files or changes deletion vectors as OVERWRITE).

The operation reads the latest snapshot; a commit that rewrote or compacted one of its files
meanwhile, or changed the deletion vectors it extends, makes it fail with CommitConflictError
(run it again); appends of new files meanwhile are kept (they were not read, so they are not
matched: the later commit wins).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyroaring import BitMap

from changelake.table.append import vectors
from changelake.table.append.vectors import BucketVectors
from changelake.table.append.writer import AppendWrite
from changelake.table.commit import overwrite
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import bucket, data_file, deletion_vector
from changelake.table.format.manifest import ManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import deletion_vectors, live_files, planner
from changelake.table.read.deletion_vectors import DeletionFile
from changelake.table.write import row_level

FILE_COLUMN, POSITION_COLUMN = "__file", "__position"


@dataclass(frozen=True)
class TargetFile:
    """A live file an operation may touch, with its deletion vector (None: none)."""

    entry: ManifestEntry
    deletion_file: DeletionFile | None

    def rows(self, ctx: TableContext) -> tuple[pa.Table, np.ndarray | None]:
        """The file's stored rows (every column, deleted ones too: positions are those of the
        stored rows) and which of them are live (None: all)."""
        stored = ctx.read_file(ctx.bucket_dir(self.entry.partition, self.entry.bucket), self.entry.file)
        vector = None if self.deletion_file is None else deletion_vectors.read_vector(ctx, self.deletion_file)
        return stored.cast(ctx.arrow_schema), deletion_vector.keep_mask(vector, stored.num_rows)


def target_files(ctx: TableContext, snapshot: Snapshot, row_filter: pc.Expression | None) -> list[TargetFile]:
    """The live files of ``snapshot`` that may hold rows ``row_filter`` passes (pruned by
    partition and statistics), with their deletion vectors."""
    found: dict[tuple[bytes, int, str], DeletionFile | None] = {}
    for split in planner.plan(ctx, snapshot, row_filter):
        files = split.deletion_files or (None,) * len(split.files)
        for f, d in zip(split.files, files, strict=True):
            found[(split.partition, split.bucket, f.file_name)] = d
    return [TargetFile(e, found[key]) for e in live_files.live_entries(ctx, snapshot)
            if (key := (e.partition, e.bucket, e.file.file_name)) in found]


def indexed_rows(ctx: TableContext, targets: list[TargetFile], row_filter: pc.Expression | None) -> pa.Table:
    """The live rows of ``targets`` that ``row_filter`` passes, each with its file (index into
    ``targets``) and position in it, as columns ``__file`` and ``__position``."""
    def read(index: int) -> pa.Table:
        stored, live = targets[index].rows(ctx)
        positions = np.arange(stored.num_rows, dtype=np.int64)
        rows = stored.append_column(FILE_COLUMN, pa.array(np.full(stored.num_rows, index, dtype=np.int32))) \
            .append_column(POSITION_COLUMN, pa.array(positions))
        if live is not None:
            rows = rows.filter(live)
        return rows if row_filter is None else ds.dataset(rows).to_table(filter=row_filter)

    schema = ctx.arrow_schema.append(pa.field(FILE_COLUMN, pa.int32())).append(pa.field(POSITION_COLUMN, pa.int64()))
    parts = [part for part in map_all(read, range(len(targets))) if part.num_rows]
    return pa.concat_tables(parts) if parts else schema.empty_table()


@dataclass
class Edits:
    """What an operation does to the rows it read (``__file`` and ``__position`` say which):
    rows removed, rows replaced by new values, and new rows inserted, all in the table's
    columns."""

    removed: list[pa.Table] = field(default_factory=list)  # indexed rows
    replaced: list[tuple[pa.Table, pa.Table]] = field(default_factory=list)  # (indexed old rows, new rows)
    inserted: list[pa.Table] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(t.num_rows for t in self.removed) or any(old.num_rows for old, _ in self.replaced) or \
            any(t.num_rows for t in self.inserted)


def delete(ctx: TableContext, predicate: pc.Expression | str, commit_user: str) -> Snapshot | None:
    """Delete the rows ``predicate`` matches; None when it matches none."""
    row_filter = row_level.predicate_of(ctx, predicate)
    latest = ctx.latest_snapshot()
    if latest is None:
        return None
    targets = target_files(ctx, latest, row_filter)
    if not ctx.options.deletion_vectors_enabled:
        return _rewrite_matching(ctx, targets, row_filter, None, commit_user)
    return commit_edits(ctx, latest, targets, Edits(removed=[indexed_rows(ctx, targets, row_filter)]), commit_user)


def update(ctx: TableContext, predicate: pc.Expression | str, assignments: Mapping[str, Any],
           commit_user: str) -> Snapshot | None:
    """Set the ``assignments`` on the rows ``predicate`` matches; None when it matches none."""
    row_level.check_assignments(ctx, assignments)
    row_filter = row_level.predicate_of(ctx, predicate)
    latest = ctx.latest_snapshot()
    if latest is None:
        return None
    targets = target_files(ctx, latest, row_filter)
    if not ctx.options.deletion_vectors_enabled:
        return _rewrite_matching(ctx, targets, row_filter, assignments, commit_user)
    old = indexed_rows(ctx, targets, row_filter)
    new = row_level.updated(ctx, old.select(ctx.arrow_schema.names), assignments)
    return commit_edits(ctx, latest, targets, Edits(replaced=[(old, new)]), commit_user)


def commit_edits(ctx: TableContext, base: Snapshot | None, targets: list[TargetFile], edits: Edits,
                 commit_user: str) -> Snapshot | None:
    """Carry out ``edits`` on ``targets`` (the files of snapshot ``base`` their rows were read
    from) as one OVERWRITE snapshot; None when they change nothing."""
    if not edits:
        return None
    removed = [t for t in edits.removed if t.num_rows]
    replaced = [(old, new) for old, new in edits.replaced if old.num_rows]
    inserted = [t for t in edits.inserted if t.num_rows]
    written: list[str] = []
    try:
        if ctx.options.deletion_vectors_enabled:
            changes = _mark_deleted(ctx, base, targets, [*removed, *(old for old, _ in replaced)], written)
            rewritten: list[tuple[ManifestEntry, CommitMessage]] = []
            inserted += [new for _, new in replaced]
        else:
            changes = []
            rewritten, moved = _rewrite_files(ctx, targets, removed, replaced, written)
            inserted += moved
    except BaseException:
        ctx.file_io.discard(written)
        raise
    return _land(ctx, rewritten, changes, inserted, written, commit_user)


def _land(ctx: TableContext, rewritten: list[tuple[ManifestEntry, CommitMessage]], changes: list[BucketVectors],
          inserted: list[pa.Table], written: list[str], commit_user: str) -> Snapshot:
    """Write the ``inserted`` rows as new files and land them with the ``rewritten`` files
    (the files replaced, and the messages of their copies) and the deletion-vector ``changes``
    (``written``: the files these wrote, deleted if it fails)."""
    with AppendWrite(ctx, commit_user) as writer:
        try:
            for rows in inserted:
                writer.write(rows)
            messages = [m for _, m in rewritten] + writer.prepare()
        except BaseException:
            ctx.file_io.discard(written)
            raise
        killpoints.reached(KillPoint.ROW_LEVEL_REWRITTEN)
        return overwrite.commit_rewrite(ctx, [entry for entry, _ in rewritten], messages, commit_user,
                                        vectors=changes)


def _rewrite_matching(ctx: TableContext, targets: list[TargetFile], row_filter: pc.Expression,
                      assignments: Mapping[str, Any] | None, commit_user: str) -> Snapshot | None:
    """Rewrite each of ``targets`` that holds a row ``row_filter`` matches, without those rows
    (``assignments`` None) or with the ``assignments`` set on them, each file read once; None
    when no row matches."""
    written: list[str] = []
    moved: list[pa.Table] = []

    def rewrite(target: TargetFile) -> tuple[ManifestEntry, CommitMessage] | None:
        stored, live = target.rows(ctx)
        matched = ds.dataset(stored).to_table(columns={"m": row_filter}).column("m").fill_null(fill_value=False)
        mask = np.asarray(matched.to_numpy(zero_copy_only=False), dtype=bool)
        positions = np.flatnonzero(mask if live is None else mask & live)
        if not len(positions):
            return None
        entry = target.entry
        if assignments is None:
            return _rewrite_file(ctx, entry, stored, positions, positions[:0], None, written)
        old = stored.take(positions)
        new = row_level.updated(ctx, old, assignments)
        stays = _stays(ctx, old, new, np.full(len(positions), entry.bucket), np.full(len(positions),
                                                                                     entry.total_buckets))
        moved.append(new.filter(~stays))
        return _rewrite_file(ctx, entry, stored, positions, positions[stays], new.filter(stays), written)

    try:
        done = [r for r in map_all(rewrite, targets) if r is not None]
    except BaseException:
        ctx.file_io.discard(written)
        raise
    if not done:
        return None
    return _land(ctx, done, [], moved, written, commit_user)


def _groups(files: np.ndarray) -> dict[int, np.ndarray]:
    """The indexes of ``files``' entries, by file."""
    if not len(files):
        return {}
    order = np.argsort(files, kind="stable")
    ordered = files[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(ordered)]
    return {int(ordered[s]): order[s:e] for s, e in zip(starts, ends, strict=True)}


def _by_file(rows: list[pa.Table]) -> dict[int, np.ndarray]:
    """The positions of indexed rows, by file."""
    if not rows:
        return {}
    both = pa.concat_tables([t.select([FILE_COLUMN, POSITION_COLUMN]) for t in rows])
    positions = both.column(POSITION_COLUMN).to_numpy()
    return {index: positions[at] for index, at in _groups(both.column(FILE_COLUMN).to_numpy()).items()}


def _mark_deleted(ctx: TableContext, base: Snapshot | None, targets: list[TargetFile], rows: list[pa.Table],
                  written: list[str]) -> list[BucketVectors]:
    """Write the index files that mark ``rows`` (indexed, read from ``base``) deleted, one
    change per bucket."""
    by_bucket: dict[tuple[bytes, int], dict[str, BitMap]] = defaultdict(dict)
    for index, positions in _by_file(rows).items():
        entry = targets[index].entry
        by_bucket[(entry.partition, entry.bucket)][entry.file.file_name] = deletion_vector.bitmap_of(positions)
    index_files = deletion_vectors.snapshot_vectors(ctx, base)
    changes = []
    for (partition, bucket_id), removed in sorted(by_bucket.items()):
        change = vectors.write_bucket(ctx, partition, bucket_id, index_files.get((partition, bucket_id), []), removed)
        if change.added is not None:
            written.append(ctx.paths.index(change.added.file_name))
        changes.append(change)
    return changes


def _rewrite_files(ctx: TableContext, targets: list[TargetFile], removed: list[pa.Table],
                   replaced: list[tuple[pa.Table, pa.Table]],
                   written: list[str]) -> tuple[list[tuple[ManifestEntry, CommitMessage]], list[pa.Table]]:
    """Rewrite each file holding a removed or replaced row (indexed rows): the files replaced
    with the messages of their rewritten copies, and the new values that belong to another
    partition or bucket than their file's (to be written as new rows)."""
    gone = _by_file(removed + [old for old, _ in replaced])
    old = pa.concat_tables([o for o, _ in replaced]) if replaced else None
    new = pa.concat_tables([n for _, n in replaced]) if replaced else None
    here: dict[int, np.ndarray] = {}
    moved = []
    if old is not None and new is not None:
        files = old.column(FILE_COLUMN).to_numpy()
        stays = _stays(ctx, old, new, np.array([t.entry.bucket for t in targets], dtype=np.int64)[files],
                       np.array([t.entry.total_buckets for t in targets], dtype=np.int64)[files])
        moved.append(new.filter(~stays))
        staying = np.flatnonzero(stays)
        here = {index: staying[at] for index, at in _groups(files[staying]).items()}

    def rewrite(index: int) -> tuple[ManifestEntry, CommitMessage]:
        stored, _ = targets[index].rows(ctx)
        if index in here and old is not None and new is not None:
            at = old.column(POSITION_COLUMN).to_numpy()[here[index]]
            return _rewrite_file(ctx, targets[index].entry, stored, gone[index], at, new.take(here[index]), written)
        return _rewrite_file(ctx, targets[index].entry, stored, gone[index], gone[index][:0], None, written)

    return map_all(rewrite, sorted(gone)), moved


def _rewrite_file(ctx: TableContext, entry: ManifestEntry, stored: pa.Table, gone: np.ndarray, at: np.ndarray,
                  new: pa.Table | None, written: list[str]) -> tuple[ManifestEntry, CommitMessage]:
    """A file's rows (``stored``) rewritten into its bucket without the rows at positions
    ``gone``, and with the ``new`` rows at positions ``at``, keeping the file's level and
    first sequence number: the file and the message of its copy."""
    keep = np.ones(stored.num_rows, dtype=bool)
    keep[gone] = False
    rows = stored.filter(keep)
    if new is not None and new.num_rows:
        # the new values take their old rows' places: sorted back into file order
        order = np.argsort(np.concatenate([np.flatnonzero(keep), at]), kind="stable")
        rows = pa.concat_tables([rows, new]).take(order)
    bucket_dir = ctx.bucket_dir(entry.partition, entry.bucket)
    files = data_file.write(ctx.file_io, bucket_dir, [rows] if rows.num_rows else [], ctx.file_settings,
                            entry.file.level, first_sequence=entry.file.min_sequence_number)
    written.extend(f"{bucket_dir}/{f.file_name}" for f in files)
    return entry, CommitMessage(entry.partition, entry.bucket, entry.total_buckets, new_files=tuple(files))


def _stays(ctx: TableContext, old: pa.Table, new: pa.Table, buckets: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Which ``new`` values still belong to the file of their ``old`` row (in bucket
    ``buckets`` of ``totals``): same partition, and in a fixed-bucket partition the same
    bucket (unaware partitions keep every row in bucket 0)."""
    stays = np.ones(new.num_rows, dtype=bool)
    for name in ctx.partition_keys:
        before, after = old.column(name), new.column(name)
        same = pc.or_(pc.equal(before, after).fill_null(fill_value=False), pc.and_(before.is_null(), after.is_null()))
        stays &= np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    if (totals <= 0).all():
        return stays
    now = bucket.buckets([new.column(k) for k in ctx.bucket_key], np.maximum(totals, 1))
    stays &= (totals <= 0) | (now == buckets)
    return stays
