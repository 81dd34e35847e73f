"""Overwrite commits: replace every file of some partitions with new ones as one OVERWRITE
snapshot (Paimon's ``FileStoreCommitImpl.overwritePartition``), for table operations that
rewrite partitions (a rescale; an INSERT OVERWRITE); and replace some files with rewritten
copies (:func:`commit_rewrite`: an append table's row-level delete, update or merge, which
Paimon commits as OVERWRITE because its delta deletes files or changes deletion vectors).

The snapshot deletes every data file the partitions hold at the snapshot it lands on (and
their deletion-vector index files) and adds the new files. The rows of the new files were
planned from a ``base`` snapshot: a commit after it that changed the partitions' rows (an
APPEND or OVERWRITE that touched one of them) makes the overwrite void (CommitConflictError),
as Paimon's ``commit.strict-mode.last-safe-snapshot`` does, so a concurrent writer's rows are
never dropped unseen. COMPACT snapshots since ``base`` rewrite rows without changing them, so
the overwrite deletes their outputs instead and still lands.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from changelake.errors import CommitConflictError, CommitOutcomeUnknownError, SnapshotNotFoundError
from changelake.table.append import vectors as append_vectors
from changelake.table.append.vectors import BucketVectors
from changelake.table.commit import committer
from changelake.table.commit.committer import Attempt, Delta
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import index_manifest
from changelake.table.format.index_manifest import IndexManifestEntry
from changelake.table.format.manifest import FileKind, ManifestEntry
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, CommitKind, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import deletion_vectors, live_files

# Picks the serialized partitions an overwrite replaces.
PartitionRule = Callable[[bytes], bool]


def commit_overwrite(
    ctx: TableContext,
    partitions: Collection[bytes] | PartitionRule,
    messages: Sequence[CommitMessage],
    commit_user: str,
    identifier: int,
    *,
    base: Snapshot | None,
) -> Snapshot | None:
    """Land one OVERWRITE snapshot that replaces the files of ``partitions`` (serialized
    partition rows, or a rule that picks them among those the table holds when the snapshot
    lands, as Paimon's partition filter: a partition another commit made meanwhile goes too if
    it matches) with the ``new_files`` of ``messages`` (which must lie in those partitions);
    None when ``commit_user`` already committed ``identifier``. ``base`` is the snapshot the new
    rows were read from (None: the overwrite does not depend on what is there). Lost races are
    retried on the new latest snapshot; the messages' files are deleted when the commit fails,
    unless its outcome is unknown (CommitOutcomeUnknownError)."""
    targets = partitions if callable(partitions) else frozenset(partitions).__contains__
    _check_messages(ctx, targets, messages)

    def removed(latest: Snapshot | None, lists: Attempt) -> tuple[list[ManifestEntry], str | None]:
        if base is not None:
            _check_unchanged(ctx, base, latest, targets)
        entries = [] if latest is None else [
            ManifestEntry(FileKind.DELETE, e.partition, e.bucket, e.total_buckets, e.file)
            for e in live_files.live_entries(ctx, latest) if targets(e.partition)]
        return entries, _index_manifest(ctx, latest, targets, lists, added_index)

    # A dynamic-bucket table's new HASH index files replace the partitions' old ones.
    added_index = [IndexManifestEntry(FileKind.ADD, m.partition, m.bucket, m.hash_index)
                   for m in messages if m.hash_index is not None]
    return _land(ctx, messages, commit_user, identifier, removed, "overwrite")


_Removed = Callable[[Snapshot | None, Attempt], tuple[list[ManifestEntry], str | None]]


def _land(ctx: TableContext, messages: Sequence[CommitMessage], commit_user: str, identifier: int,
          removed: _Removed, what: str) -> Snapshot | None:
    """Land one OVERWRITE snapshot of the messages' new files and the entries ``removed`` gives
    for the latest snapshot (with the index manifest to list; it raises CommitConflictError to
    void the commit), retrying lost races; None when ``commit_user`` already committed
    ``identifier``. The messages' files are deleted when it fails, unless its outcome is
    unknown."""
    added = [ManifestEntry(FileKind.ADD, m.partition, m.bucket, m.total_buckets, f)
             for m in messages for f in m.new_files]
    new_files = [path for m in messages for path in m.written(ctx)]
    lists = Attempt()
    try:
        for attempt_number in range(ctx.options.commit_max_retries + 1):
            if attempt_number:
                committer.back_off(ctx, attempt_number)
            latest = ctx.latest_snapshot()
            if committer.already_committed(ctx, commit_user, identifier, latest):
                ctx.file_io.discard(new_files)
                return None
            lists = Attempt()
            deleted, index_name = removed(latest, lists)
            entries = [*deleted, *added]
            delta = Delta(entries, committer.write_manifest(ctx, entries, lists), [], None)
            killpoints.reached(KillPoint.OVERWRITE)
            new = committer.snapshot_after(ctx, CommitKind.OVERWRITE, latest, delta, index_name, commit_user,
                                           identifier, lists)
            if committer.land_snapshot(ctx, new, lists):
                return new
        raise CommitConflictError(f"{what} gave up after {ctx.options.commit_max_retries} lost races",
                                  table=ctx.name)
    except CommitOutcomeUnknownError:
        raise  # the snapshot may have landed: nothing it may name is deleted
    except Exception:
        ctx.file_io.discard([*lists.written, *new_files])
        raise


def _check_messages(ctx: TableContext, targets: PartitionRule, messages: Sequence[CommitMessage]) -> None:
    """The new files lie in the overwritten partitions, each partition's at one number of
    buckets (a key must live in one bucket of its partition)."""
    totals: dict[bytes, int] = {}
    for m in messages:
        if not targets(m.partition):
            raise ValueError(f"table {ctx.name}: an overwrite adds files to {ctx.describe_partition(m.partition)}, "
                             "which it does not overwrite")
        if totals.setdefault(m.partition, m.total_buckets) != m.total_buckets:
            raise ValueError(f"table {ctx.name}: an overwrite adds files of {totals[m.partition]} and "
                             f"{m.total_buckets} buckets to {ctx.describe_partition(m.partition)}")


def _check_unchanged(ctx: TableContext, base: Snapshot, latest: Snapshot | None,
                     targets: PartitionRule) -> None:
    """CommitConflictError when a snapshot after ``base`` added or removed rows of a target
    partition (an APPEND or OVERWRITE naming one in its delta), when one of them expired before
    this check could read it, or when a rollback took ``base`` away (the rows read from it may
    hold commits the rollback dropped)."""
    if latest is None or latest.id < base.id or (latest.id == base.id and latest != base) or \
            (latest.id > base.id and _rolled_back(ctx, base)):
        raise CommitConflictError(f"snapshot {base.id}, which the overwrite read, was rolled back; the overwrite "
                                  "is void (run it again)", table=ctx.name)
    for snapshot_id in range(base.id + 1, latest.id + 1):
        try:
            landed = latest if snapshot_id == latest.id else ctx.snapshot(snapshot_id)
        except SnapshotNotFoundError:
            raise CommitConflictError(
                f"snapshot {snapshot_id}, committed after the overwrite read snapshot {base.id}, expired before "
                "the overwrite could check it; the overwrite is void (run it again)", table=ctx.name) from None
        if landed.commit_kind is CommitKind.COMPACT:
            continue  # rewrites rows without changing them: the overwrite replaces its outputs too
        for meta in live_files.manifest_list(ctx, landed.delta_manifest_list):
            for e in live_files.manifest_entries(ctx, meta.file_name):
                if targets(e.partition):
                    raise CommitConflictError(
                        f"snapshot {snapshot_id} ({landed.commit_kind.value} by {landed.commit_user}) changed "
                        f"{ctx.describe_partition(e.partition)} after the overwrite read it at snapshot {base.id}; "
                        "the overwrite is void (run it again)", table=ctx.name)


def _rolled_back(ctx: TableContext, base: Snapshot) -> bool:
    """Whether snapshot ``base.id`` is no longer ``base`` (a rollback removed it and another
    commit took its id); an expired one is not rolled back."""
    try:
        return ctx.snapshot(base.id) != base
    except SnapshotNotFoundError:
        return False


def _index_manifest(ctx: TableContext, latest: Snapshot | None, targets: PartitionRule, lists: Attempt,
                    added: Sequence[IndexManifestEntry] = ()) -> str | None:
    """The new snapshot's index manifest: the latest one's without the index files of the
    overwritten partitions (their data files are all gone), with the ``added`` ones."""
    previous = latest.index_manifest if latest is not None else None
    entries = [] if latest is None or previous is None else deletion_vectors.index_entries(ctx, latest)
    kept = [e for e in entries if not targets(e.partition)]
    if len(kept) == len(entries) and not added:
        return previous
    if not kept and not added:
        return None
    name = index_manifest.write(ctx.file_io, ctx.paths.manifest_dir, [*kept, *added], ctx.options.manifest_compression)
    lists.written.append(ctx.paths.manifest(name))
    return name


def commit_rewrite(ctx: TableContext, replaced: Sequence[ManifestEntry], messages: Sequence[CommitMessage],
                   commit_user: str, *, vectors: Sequence[BucketVectors] = (),
                   identifier: int = BATCH_COMMIT_IDENTIFIER) -> Snapshot | None:
    """Land one OVERWRITE snapshot that deletes the ``replaced`` files, adds the ``new_files``
    of ``messages`` (their rewritten rows, and new rows) and lands the deletion-vector changes
    ``vectors`` (their index files written already). CommitConflictError, with the new files
    deleted, when another commit removed one of the replaced files or of the files whose vectors
    change first (a concurrent rewrite or compaction read the same rows), or changed the same
    vectors: run it again. Lost races are retried. Committed as (``commit_user``,
    ``identifier``): None, with the new files deleted, when that had landed (a replayed batch)."""
    def removed(latest: Snapshot | None, lists: Attempt) -> tuple[list[ManifestEntry], str | None]:
        live = {(e.partition, e.bucket, e.file.file_name)
                for e in (live_files.live_entries(ctx, latest) if latest is not None else [])}
        gone = [e.file.file_name for e in replaced if (e.partition, e.bucket, e.file.file_name) not in live]
        if gone:
            raise CommitConflictError(f"files {gone[:3]} were rewritten by another commit first; run the "
                                      "operation again", table=ctx.name)
        entries = [ManifestEntry(FileKind.DELETE, e.partition, e.bucket, e.total_buckets, e.file) for e in replaced]
        previous = latest.index_manifest if latest is not None else None
        if not vectors:
            return entries, previous
        index_entries = deletion_vectors.index_entries(ctx, latest) if latest is not None else []
        after = append_vectors.apply(ctx, index_entries, vectors, live)
        if not after:
            return entries, None
        name = index_manifest.write(ctx.file_io, ctx.paths.manifest_dir, after, ctx.options.manifest_compression)
        lists.written.append(ctx.paths.manifest(name))
        return entries, name

    index_files = [ctx.paths.index(c.added.file_name) for c in vectors if c.added is not None]
    try:
        landed = _land(ctx, messages, commit_user, identifier, removed, "rewrite")
    except CommitOutcomeUnknownError:
        raise  # the snapshot may name them
    except BaseException:
        ctx.file_io.discard(index_files)
        raise
    if landed is None:
        ctx.file_io.discard(index_files)
    return landed
