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
The work is cut in per-file steps (:func:`rewrite_matching`, :func:`matching_edits`,
:func:`rewrite_edited`) and a last step for the whole (:func:`land_edits`: vectors per bucket,
new rows, the commit), so that Spark's tasks can run the first and its driver the last.

The operation reads the latest snapshot; a commit that rewrote or compacted one of its files
meanwhile, or changed the deletion vectors it extends, makes it fail with CommitConflictError
(run it again); appends of new files meanwhile are kept (they were not read, so they are not
matched: the later commit wins).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
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
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
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
    parts = [part for part in map_all(lambda i: indexed_file_rows(ctx, targets[i], i, row_filter), range(len(targets)))
             if part.num_rows]
    return pa.concat_tables(parts) if parts else indexed_schema(ctx).empty_table()


def indexed_schema(ctx: TableContext) -> pa.Schema:
    """The table's columns with ``__file`` and ``__position``."""
    return ctx.arrow_schema.append(pa.field(FILE_COLUMN, pa.int32())).append(pa.field(POSITION_COLUMN, pa.int64()))


def indexed_file_rows(ctx: TableContext, target: TargetFile, index: int, row_filter: pc.Expression | None) -> pa.Table:
    """The live rows of one target file (number ``index``) that ``row_filter`` passes, indexed
    as :func:`indexed_rows` indexes them."""
    stored, live = target.rows(ctx)
    positions = np.arange(stored.num_rows, dtype=np.int64)
    rows = stored.append_column(FILE_COLUMN, pa.array(np.full(stored.num_rows, index, dtype=np.int32))) \
        .append_column(POSITION_COLUMN, pa.array(positions))
    if live is not None:
        rows = rows.filter(live)
    return rows if row_filter is None else ds.dataset(rows).to_table(filter=row_filter)


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

    def extend(self, other: Edits) -> None:
        """Add ``other``'s edits (of the same targets) to these."""
        self.removed += [t for t in other.removed if t.num_rows]
        self.replaced += [(old, new) for old, new in other.replaced if old.num_rows]
        self.inserted += [t for t in other.inserted if t.num_rows]

    def by_file(self) -> dict[int, Edits]:
        """The removed and replaced rows, split by the file they are in (inserted rows are in none)."""
        out: dict[int, Edits] = defaultdict(Edits)
        for rows in self.removed:
            for index, at in _groups(rows.column(FILE_COLUMN).to_numpy()).items():
                out[index].removed.append(rows.take(pa.array(at)))
        for old, new in self.replaced:
            for index, at in _groups(old.column(FILE_COLUMN).to_numpy()).items():
                out[index].replaced.append((old.take(pa.array(at)), new.take(pa.array(at))))
        return dict(out)


@dataclass(frozen=True)
class Rewritten:
    """A file rewritten without some of its rows or with new values: the file replaced, the
    message of its copy, and the new values that belong to another partition or bucket (to be
    written as new rows)."""

    entry: ManifestEntry
    message: CommitMessage
    moved: pa.Table | None


def delete(ctx: TableContext, predicate: pc.Expression | str, commit_user: str) -> Snapshot | None:
    """Delete the rows ``predicate`` matches; None when it matches none."""
    return _change(ctx, predicate, None, commit_user)


def update(ctx: TableContext, predicate: pc.Expression | str, assignments: Mapping[str, Any],
           commit_user: str) -> Snapshot | None:
    """Set the ``assignments`` on the rows ``predicate`` matches; None when it matches none."""
    row_level.check_assignments(ctx, assignments)
    return _change(ctx, predicate, assignments, commit_user)


def _change(ctx: TableContext, predicate: pc.Expression | str, assignments: Mapping[str, Any] | None,
            commit_user: str) -> Snapshot | None:
    """Delete (``assignments`` None) or update the rows ``predicate`` matches."""
    row_filter = row_level.predicate_of(ctx, predicate)
    latest = ctx.latest_snapshot()
    if latest is None:
        return None
    targets = target_files(ctx, latest, row_filter)
    if not ctx.options.deletion_vectors_enabled:
        return _rewrite_matching(ctx, latest, targets, row_filter, assignments, commit_user)
    old = indexed_rows(ctx, targets, row_filter)
    if assignments is None:
        return commit_edits(ctx, latest, targets, Edits(removed=[old]), commit_user)
    new = row_level.updated(ctx, old.select(ctx.arrow_schema.names), assignments)
    return commit_edits(ctx, latest, targets, Edits(replaced=[(old, new)]), commit_user)


def matching_edits(ctx: TableContext, target: TargetFile, index: int, row_filter: pc.Expression,
                   assignments: Mapping[str, Any] | None) -> Edits:
    """A delete's (``assignments`` None) or an update's edits of the rows of one target file
    (number ``index``) that ``row_filter`` matches, as deletion vectors carry them out."""
    old = indexed_file_rows(ctx, target, index, row_filter)
    if assignments is None:
        return Edits(removed=[old])
    return Edits(replaced=[(old, row_level.updated(ctx, old.select(ctx.arrow_schema.names), assignments))])


def commit_edits(ctx: TableContext, base: Snapshot | None, targets: list[TargetFile], edits: Edits,
                 commit_user: str) -> Snapshot | None:
    """Carry out ``edits`` on ``targets`` (the files of snapshot ``base`` their rows were read
    from) as one OVERWRITE snapshot; None when they change nothing."""
    if not edits:
        return None
    if ctx.options.deletion_vectors_enabled:
        return land_edits(ctx, base, targets, [], edits, commit_user)
    per_file = edits.by_file()
    written: list[str] = []
    try:
        rewritten = map_all(lambda index: rewrite_edited(ctx, targets[index], per_file[index], written),
                            sorted(per_file))
    except BaseException:
        ctx.file_io.discard(written)
        raise
    return land_edits(ctx, base, targets, rewritten, Edits(inserted=edits.inserted), commit_user)


def land_edits(ctx: TableContext, base: Snapshot | None, targets: list[TargetFile], rewritten: list[Rewritten],
               edits: Edits, commit_user: str, identifier: int = BATCH_COMMIT_IDENTIFIER, *,
               messages: Sequence[CommitMessage] = ()) -> Snapshot | None:
    """Land the ``rewritten`` files and the ``edits`` left (with deletion vectors, the removed
    and replaced rows are marked in their files' vectors and the new values written as new
    rows; inserted rows, and the rows rewrites ``moved``, are written as new files) with the
    new files of ``messages`` (new rows written already) as one OVERWRITE snapshot, committed
    as (``commit_user``, ``identifier``): None when that had landed. The files of rewritten
    copies and ``messages`` are deleted if it fails."""
    written = [path for r in rewritten for path in r.message.written(ctx)] + \
        [path for m in messages for path in m.written(ctx)]
    inserted = [t for t in edits.inserted if t.num_rows] + [r.moved for r in rewritten
                                                            if r.moved is not None and r.moved.num_rows]
    try:
        changes: list[BucketVectors] = []
        if edits.removed or edits.replaced:
            if not ctx.options.deletion_vectors_enabled:
                raise ValueError(f"table {ctx.name}: edits to land without deletion vectors must be rewritten first")
            changes = _mark_deleted(ctx, base, targets, [*edits.removed, *(old for old, _ in edits.replaced)],
                                    written)
            inserted += [new for _, new in edits.replaced]
    except BaseException:
        ctx.file_io.discard(written)
        raise
    return _land(ctx, [(r.entry, r.message) for r in rewritten], changes, inserted, written, commit_user, identifier,
                 messages)


def _land(ctx: TableContext, rewritten: list[tuple[ManifestEntry, CommitMessage]], changes: list[BucketVectors],
          inserted: list[pa.Table], written: list[str], commit_user: str, identifier: int,
          added: Sequence[CommitMessage]) -> Snapshot | None:
    """Write the ``inserted`` rows as new files and land them with the ``rewritten`` files
    (the files replaced, and the messages of their copies), the files ``added`` and the
    deletion-vector ``changes`` (``written``: the files these wrote, deleted if it fails)."""
    with AppendWrite(ctx, commit_user) as writer:
        try:
            for rows in inserted:
                writer.write(rows)
            messages = [m for _, m in rewritten] + list(added) + writer.prepare()
        except BaseException:
            ctx.file_io.discard(written)
            raise
        killpoints.reached(KillPoint.ROW_LEVEL_REWRITTEN)
        return overwrite.commit_rewrite(ctx, [entry for entry, _ in rewritten], messages, commit_user,
                                        vectors=changes, identifier=identifier)


def _rewrite_matching(ctx: TableContext, base: Snapshot, targets: list[TargetFile], row_filter: pc.Expression,
                      assignments: Mapping[str, Any] | None, commit_user: str) -> Snapshot | None:
    """Rewrite each of ``targets`` that holds a row ``row_filter`` matches, without those rows
    (``assignments`` None) or with the ``assignments`` set on them, each file read once; None
    when no row matches."""
    written: list[str] = []
    try:
        done = [r for r in map_all(lambda t: rewrite_matching(ctx, t, row_filter, assignments, written), targets)
                if r is not None]
    except BaseException:
        ctx.file_io.discard(written)
        raise
    if not done:
        return None
    return land_edits(ctx, base, targets, done, Edits(), commit_user)


def rewrite_matching(ctx: TableContext, target: TargetFile, row_filter: pc.Expression,
                     assignments: Mapping[str, Any] | None, written: list[str]) -> Rewritten | None:
    """One target file rewritten without the rows ``row_filter`` matches (``assignments``
    None) or with the ``assignments`` set on them, the file read once (``written``: the files
    it wrote); None when no row of it matches."""
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
    stays = _stays(ctx, old, new, entry)
    return _rewrite_file(ctx, entry, stored, positions, positions[stays], new.filter(stays), written,
                         moved=new.filter(~stays))


def rewrite_edited(ctx: TableContext, target: TargetFile, edits: Edits, written: list[str]) -> Rewritten:
    """One target file rewritten without its ``edits``' removed rows and with their replaced
    rows' new values in place (those that stay in its partition and bucket; ``written``: the
    files it wrote)."""
    gone = np.concatenate([t.column(POSITION_COLUMN).to_numpy() for t in edits.removed] +
                          [old.column(POSITION_COLUMN).to_numpy() for old, _ in edits.replaced] +
                          [np.zeros(0, dtype=np.int64)])
    stored, _ = target.rows(ctx)
    if not edits.replaced:
        return _rewrite_file(ctx, target.entry, stored, gone, gone[:0], None, written)
    old = pa.concat_tables([o for o, _ in edits.replaced])
    new = pa.concat_tables([n for _, n in edits.replaced])
    stays = _stays(ctx, old, new, target.entry)
    at = old.column(POSITION_COLUMN).to_numpy()[stays]
    return _rewrite_file(ctx, target.entry, stored, gone, at, new.filter(stays), written, moved=new.filter(~stays))


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


def _rewrite_file(ctx: TableContext, entry: ManifestEntry, stored: pa.Table, gone: np.ndarray, at: np.ndarray,
                  new: pa.Table | None, written: list[str], *, moved: pa.Table | None = None) -> Rewritten:
    """A file's rows (``stored``) rewritten into its bucket without the rows at positions
    ``gone``, and with the ``new`` rows at positions ``at``, keeping the file's level and
    first sequence number (``moved``: the new values that go elsewhere)."""
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
    written.extend(ctx.file_paths(bucket_dir, files))
    return Rewritten(entry, CommitMessage(entry.partition, entry.bucket, entry.total_buckets, new_files=tuple(files)),
                     moved)


def _stays(ctx: TableContext, old: pa.Table, new: pa.Table, entry: ManifestEntry) -> np.ndarray:
    """Which ``new`` values still belong to ``entry``'s file, that of their ``old`` rows: same
    partition, and in a fixed-bucket partition the same bucket (unaware partitions keep every
    row in bucket 0)."""
    stays = np.ones(new.num_rows, dtype=bool)
    for name in ctx.partition_keys:
        before, after = old.column(name), new.column(name)
        same = pc.or_(pc.equal(before, after).fill_null(fill_value=False), pc.and_(before.is_null(), after.is_null()))
        stays &= np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    if entry.total_buckets <= 0:
        return stays
    now = bucket.buckets([new.column(k) for k in ctx.bucket_key], entry.total_buckets)
    stays &= now == entry.bucket
    return stays
