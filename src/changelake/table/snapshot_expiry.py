"""Snapshot expiry: which snapshots a table lets go (Paimon's ``snapshot.num-retained.min`` /
``.max``, ``snapshot.time-retained``, ``snapshot.expire.limit``, held back by consumers), and
deleting what only they needed: their data files, changelog files, manifests and manifest lists.

Semantics follow Paimon's ``ExpireSnapshotsImpl`` and ``SnapshotDeletion``: the snapshots
``[earliest, end)`` expire, where ``end`` (the first retained one) is never past the latest.
A data file is deleted when a DELETE entry in the delta of a snapshot in ``(earliest, end]``
removed it (it was live in an expired snapshot and is not in the first retained one), never
because it merely looks unreferenced: files of commits still in flight are referenced by no
snapshot, and are left alone. Files live in the first retained snapshot or in a tagged
snapshot are kept, and so are the manifests those snapshots list.

The order differs from Paimon's, to make a crash harmless: the last commit of each commit user
of the expired snapshots is recorded first (``last_commits``: exactly-once outlives the
snapshots), then the expired snapshot files go (oldest first, so the snapshots left stay
contiguous), then ``EARLIEST``, and only then the files they alone referenced. A crash leaves
unreferenced files (orphans, which orphan cleanup removes), never a snapshot that names a
deleted file.

Unlike Paimon's expiry, nothing a branch (``branch/branch-<name>``, which shares the table's
manifests and data files) names is deleted: its snapshots, tags and changelogs keep their files
as the table's own tags do.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from changelake.errors import CorruptMetadataError, SnapshotNotFoundError
from changelake.table import decoupled_changelog, metadata, partition_expiry
from changelake.table.commit import last_commits
from changelake.table.context import TableContext
from changelake.table.format import consumer
from changelake.table.format import snapshot as snapshots
from changelake.table.format.manifest import FileKind, FileSource, ManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.maintenance import references
from changelake.table.read import deletion_vectors, live_files

_log = logging.getLogger(__name__)

# Deletes a list of files; the default deletes them in this process, one after another
# (``changelake.streaming.expire_snapshots`` spreads them over Spark's executors).
FileDeleter = Callable[[Sequence[str]], None]


@dataclass(frozen=True)
class ExpireResult:
    """What one expiry run removed."""

    snapshots: tuple[int, ...] = ()  # ids of the expired snapshots, ascending
    data_files: int = 0
    changelog_files: int = 0
    manifests: int = 0  # manifests and manifest lists
    consumers: tuple[str, ...] = ()  # consumers dropped by ``consumer.expiration-time``
    changelogs: tuple[int, ...] = ()  # decoupled changelogs (``changelog/changelog-N``) removed


@dataclass(frozen=True)
class Retention:
    """The bounds of one run: keep at least ``retain_min`` snapshots and at most
    ``retain_max``; between them, expire snapshots committed before ``older_than_ms``;
    expire at most ``max_deletes`` snapshots."""

    retain_min: int
    retain_max: int
    older_than_ms: int
    max_deletes: int

    @staticmethod
    def of(ctx: TableContext, *, older_than_ms: int | None = None, retain_min: int | None = None,
           retain_max: int | None = None, max_deletes: int | None = None) -> Retention:
        """The table's options, with the given arguments over them."""
        options = ctx.options
        return Retention(
            retain_min=max(1, options.snapshot_num_retained_min if retain_min is None else retain_min),
            retain_max=options.snapshot_num_retained_max if retain_max is None else retain_max,
            older_than_ms=(int(time.time() * 1000) - options.snapshot_time_retained
                           if older_than_ms is None else older_than_ms),
            max_deletes=options.snapshot_expire_limit if max_deletes is None else max_deletes,
        )


def expire_after_commit(ctx: TableContext, *, partitions: bool = True) -> ExpireResult:
    """The expiry every writer runs after a commit lands (Paimon's synchronous
    ``snapshot.expire.execution-mode``): partitions past ``partition.expiration-time`` when a
    check is due (unless not ``partitions``), then snapshots. ``write-only`` writers skip
    it, as in Paimon. It must not turn the landed commit into an error: a failure is logged,
    and the next commit's expiry (or ``expire_snapshots``) carries on where it stopped."""
    if ctx.options.write_only:
        return ExpireResult()
    try:
        if partitions:
            partition_expiry.expire_after_commit(ctx, str(uuid.uuid4()))
        return expire_alongside_others(ctx, Retention.of(ctx))
    except Exception:
        _log.warning("expiry after a commit to table %s failed; the next commit's expiry retries it", ctx.name,
                     exc_info=True)
        return ExpireResult()


def expire_alongside_others(ctx: TableContext, retention: Retention, *,
                            progress: Callable[[int, int], None] | None = None,
                            delete: FileDeleter | None = None) -> ExpireResult:
    """:func:`expire` where other writers may expire the same snapshots at the same time: a
    run that finds what it reads gone because another run expired it meanwhile (the earliest
    snapshot moved) stops there; what it was about to delete is the other run's to delete.
    ``progress`` gets (files deleted, files to delete) of the expired snapshots; ``delete``
    deletes the files the expired snapshots alone named (default: one by one, here)."""
    earliest = snapshots.earliest_id(ctx.file_io, ctx.paths)
    try:
        return expire(ctx, retention, progress=progress, delete=delete)
    except (SnapshotNotFoundError, CorruptMetadataError, FileNotFoundError):
        if snapshots.earliest_id(ctx.file_io, ctx.paths) == earliest:
            raise
        return ExpireResult()


def expire(ctx: TableContext, retention: Retention, *,
           progress: Callable[[int, int], None] | None = None, delete: FileDeleter | None = None) -> ExpireResult:
    """Drop stale consumers, then expire the snapshots ``retention`` lets go."""
    dropped = expire_consumers(ctx)
    latest = snapshots.latest_id(ctx.file_io, ctx.paths)
    earliest = snapshots.earliest_id(ctx.file_io, ctx.paths)
    if latest is None or earliest is None:
        return ExpireResult(consumers=dropped)
    end = _end(ctx, retention, earliest, latest)
    result = (ExpireResult(consumers=dropped) if end <= earliest
              else _expire_until(ctx, earliest, end, dropped, progress, delete))
    return _expire_changelogs(ctx, result, delete)


def _expire_changelogs(ctx: TableContext, result: ExpireResult, delete: FileDeleter | None) -> ExpireResult:
    """Remove the decoupled changelogs past the changelog retention: the ``changelog-N`` file
    first, then its changelog files and manifests; for changelogs that kept their data
    manifests (no producer), also the files their deltas removed and those manifests, except
    what the earliest snapshot and the tags still need (Paimon's ``ChangelogDeletion``)."""
    gone = decoupled_changelog.expired(ctx, min_next_snapshot(ctx))
    if not gone:
        return result
    files = {p for c in gone for e in _entries(ctx, c.changelog_manifest_list) for p in ctx.entry_paths(e)}
    manifests = {n for c in gone if c.changelog_manifest_list is not None
                 for n in (c.changelog_manifest_list,
                           *(m.file_name for m in live_files.manifest_list(ctx, c.changelog_manifest_list)))}
    with_data = [c for c in gone if ctx.file_io.exists(ctx.paths.manifest(c.delta_manifest_list))]
    earliest_id = snapshots.earliest_id(ctx.file_io, ctx.paths)  # changelogs expire only below it
    if with_data and earliest_id is not None:
        # Whatever a later snapshot or changelog needs, the earliest snapshot or a later delta names.
        earliest = ctx.snapshot(earliest_id)
        kept_paths, kept_manifests = _kept(ctx, earliest, [t for t in metadata.tags(ctx).values()
                                                           if t.id < earliest.id])
        files |= _removed(ctx, with_data) - kept_paths
        manifests |= {n for c in with_data for n in _manifest_names(ctx, c)} - kept_manifests
    branched = references.files_of_branches(ctx)
    files -= branched
    manifest_paths = sorted({ctx.paths.manifest(name) for name in manifests} - branched)
    decoupled_changelog.drop(ctx, gone)
    _delete(ctx, sorted(files), delete=delete)
    _delete(ctx, manifest_paths, delete=delete)
    return dataclasses.replace(result, changelogs=tuple(c.id for c in gone),
                               changelog_files=result.changelog_files + len(files),
                               manifests=result.manifests + len(manifest_paths))


def _end(ctx: TableContext, retention: Retention, earliest: int, latest: int) -> int:
    """The first snapshot to retain (Paimon's ``ExpireSnapshotsImpl.expire``): snapshots past
    ``retain_max`` go whatever their age, the others only when older than the threshold; never
    one that ``retain_min``, a consumer or ``max_deletes`` holds back."""
    max_exclusive = latest - retention.retain_min + 1
    protected = min_next_snapshot(ctx)
    if protected is not None:
        max_exclusive = min(max_exclusive, protected)
    max_exclusive = min(max_exclusive, earliest + retention.max_deletes)
    first_in_time = max(latest - retention.retain_max + 1, earliest)
    for snapshot_id in range(first_in_time, max_exclusive):
        try:
            young = ctx.snapshot(snapshot_id).time_millis >= retention.older_than_ms
        except SnapshotNotFoundError:
            continue
        if young:
            return snapshot_id
    return max_exclusive


def _entries(ctx: TableContext, manifest_list: str | None) -> list[ManifestEntry]:
    if manifest_list is None:
        return []
    return [e for meta in live_files.manifest_list(ctx, manifest_list)
            for e in live_files.manifest_entries(ctx, meta.file_name)]


def _manifest_names(ctx: TableContext, snapshot: Snapshot) -> set[str]:
    """The snapshot's data manifest lists and the manifests they name."""
    lists = (snapshot.base_manifest_list, snapshot.delta_manifest_list)
    return {*lists, *(meta.file_name for name in lists for meta in live_files.manifest_list(ctx, name))}


def _removed(ctx: TableContext, deltas: Iterable[Snapshot], *, keep_appended: bool = False) -> set[str]:
    """Files the deltas of these snapshots (in order) removed and did not add back: a DELETE
    entry removes a file, a later ADD of the same file (a compaction that only moved it to
    another level) keeps it (Paimon's ``SnapshotDeletion.cleanUnusedDataFiles``).
    ``keep_appended`` leaves out appended files (an unknown source counts as appended, as in
    Paimon): a decoupled changelog without producer still needs them."""
    removed: set[str] = set()
    for s in deltas:
        for e in _entries(ctx, s.delta_manifest_list):
            if e.kind == FileKind.DELETE:
                if not (keep_appended and e.file.file_source in (FileSource.APPEND, None)):
                    removed.update(ctx.entry_paths(e))  # with its index beside it
            else:
                removed.difference_update(ctx.entry_paths(e))
    return removed


def _kept(ctx: TableContext, retained: Snapshot, tagged: Iterable[Snapshot]) -> tuple[set[str], set[str]]:
    """Data file paths and manifest names still needed: the live files of the tagged snapshots
    (a tag protects its snapshot's files, as in Paimon), the manifests of those and of the
    first retained snapshot. (The retained snapshot's own live files need no listing: no
    delta up to it removed them.)"""
    tags = list(tagged)
    paths = {p for s in tags for e in live_files.live_entries(ctx, s) for p in ctx.entry_paths(e)}
    names = {n for s in [retained, *tags] for n in _manifest_names(ctx, s)}
    return paths, names


def _unused_index(ctx: TableContext, gone: Iterable[Snapshot], kept: Iterable[Snapshot]) -> list[str]:
    """Paths of the index manifests and index files the ``gone`` snapshots name and none of the
    ``kept`` ones does (Paimon's ``cleanUnusedIndexManifests``)."""
    kept_names: set[str] = set()
    kept_files: set[str] = set()
    for s in kept:
        names, files = deletion_vectors.index_files_of(ctx, s)
        kept_names |= names
        kept_files |= files
    names, files = set(), set()
    for s in gone:
        if s.index_manifest is None or s.index_manifest in kept_names:
            continue
        more_names, more_files = deletion_vectors.index_files_of(ctx, s)
        names |= more_names
        files |= more_files
    return sorted(files - kept_files) + [ctx.paths.manifest(name) for name in sorted(names)]


def _expire_until(ctx: TableContext, earliest: int, end: int, dropped: tuple[str, ...],
                  progress: Callable[[int, int], None] | None, delete: FileDeleter | None) -> ExpireResult:
    expired = [s for s in (_present(ctx, i) for i in range(earliest, end)) if s is not None]
    retained = ctx.snapshot(end)
    # Only tags of expiring snapshots matter: whatever a later snapshot lists, the first
    # retained one lists too (files are never added back once removed).
    kept_paths, kept_manifests = _kept(ctx, retained, [t for t in metadata.tags(ctx).values() if t.id < end])
    # A decoupled changelog keeps the changelog files and manifests of the expiring snapshots;
    # without a producer, their appended files and data manifests (the changes a stream reads).
    keep_changelog = decoupled_changelog.decoupled(ctx)
    keep_deltas = decoupled_changelog.keeps_deltas(ctx)
    branched = references.files_of_branches(ctx)
    data_files = sorted(_removed(ctx, [*expired[1:], retained], keep_appended=keep_deltas) - kept_paths - branched)
    changelog_files = [] if keep_changelog else sorted(
        {p for s in expired for e in _entries(ctx, s.changelog_manifest_list) for p in ctx.entry_paths(e)}
        - kept_paths - branched)
    manifests: set[str] = set()
    for s in expired:
        if not keep_deltas:
            manifests |= _manifest_names(ctx, s)
        if s.changelog_manifest_list is not None and not keep_changelog:
            manifests.add(s.changelog_manifest_list)
            manifests.update(m.file_name for m in live_files.manifest_list(ctx, s.changelog_manifest_list))
    manifest_paths = sorted({ctx.paths.manifest(name) for name in manifests - kept_manifests} - branched)
    index = [p for p in _unused_index(ctx, expired, [retained, *(t for t in metadata.tags(ctx).values() if t.id < end)])
             if p not in branched]

    if keep_changelog:
        decoupled_changelog.keep(ctx, expired)
    # A replay of a commit must not land again once its snapshot is gone: its user's last
    # commit is on disk before any snapshot file goes.
    last_commits.record(ctx, expired)
    killpoints.reached(KillPoint.EXPIRE_RECORDED)
    # Metadata first: once the snapshot files are gone, nothing names the files below.
    for position, s in enumerate(expired):
        ctx.file_io.delete(ctx.paths.snapshot(s.id))
        if position == 0:
            killpoints.reached(KillPoint.EXPIRE_SNAPSHOTS)
    snapshots.commit_hint(ctx.file_io, ctx.paths, snapshots.EARLIEST, end)
    files = [*data_files, *changelog_files]
    total = len(files) + len(manifest_paths) + len(index)
    _delete(ctx, files, progress, done=0, total=total, delete=delete)
    _delete(ctx, manifest_paths, progress, done=len(files), total=total, delete=delete)
    _delete(ctx, index, progress, done=len(files) + len(manifest_paths), total=total, delete=delete)
    return ExpireResult(tuple(s.id for s in expired), len(data_files), len(changelog_files), len(manifest_paths),
                        dropped)


def _present(ctx: TableContext, snapshot_id: int) -> Snapshot | None:
    """The snapshot, or None when a concurrent expiry removed it first."""
    try:
        return ctx.snapshot(snapshot_id)
    except SnapshotNotFoundError:
        return None


def _delete(ctx: TableContext, paths: Sequence[str], progress: Callable[[int, int], None] | None = None, *,
            done: int = 0, total: int = 0, delete: FileDeleter | None = None) -> None:
    """Delete ``paths`` (with ``delete``, when given, all at once); ``progress`` gets
    (``done`` + deleted so far, ``total``)."""
    if delete is not None:
        if paths:
            delete(paths)
            if progress is not None:
                progress(done + len(paths), total)
        return
    delete_files(ctx, paths, progress, done=done, total=total)


def delete_files(ctx: TableContext, paths: Iterable[str], progress: Callable[[int, int], None] | None = None, *,
                 done: int = 0, total: int = 0) -> None:
    """Delete files an expiry let go, one by one; ``progress`` gets (``done`` + deleted so far,
    ``total``)."""
    for position, path in enumerate(paths):
        ctx.file_io.delete(path)
        if position == 0:
            killpoints.reached(KillPoint.EXPIRE_FILES)
        if progress is not None:
            progress(done + position + 1, total)


# -- consumers --------------------------------------------------------------------------------


def min_next_snapshot(ctx: TableContext) -> int | None:
    """The oldest snapshot a consumer still has to read (Paimon's
    ``ConsumerManager.minNextSnapshot``), or None without consumers. A consumer file that
    cannot be read protects everything: expiry must not guess."""
    found: int | None = None
    for consumer_id in consumer.ids(ctx.file_io, ctx.paths):
        try:
            value = consumer.read(ctx.file_io, ctx.paths, consumer_id, ctx.name)
        except CorruptMetadataError:
            return 0
        if value is not None:  # else dropped meanwhile
            found = value if found is None else min(found, value)
    return found


def expire_consumers(ctx: TableContext) -> tuple[str, ...]:
    """Delete the consumers not updated for ``consumer.expiration-time`` (Paimon's
    ``ConsumerManager.expire``, by the file's modification time); their ids."""
    expiration = ctx.options.consumer_expiration_time
    if expiration is None:
        return ()
    threshold = time.time() * 1000 - expiration
    dropped = []
    for consumer_id in consumer.ids(ctx.file_io, ctx.paths):
        path = ctx.paths.consumer(consumer_id)
        try:
            stale = ctx.file_io.modified_ms(path) < threshold
        except FileNotFoundError:
            continue
        if stale:
            ctx.file_io.delete(path)
            dropped.append(consumer_id)
    return tuple(dropped)


# -- tags -------------------------------------------------------------------------------------


def release_tag(ctx: TableContext, tagged: Snapshot) -> ExpireResult:
    """After a tag was deleted: when its snapshot has expired, delete the data files and
    manifests only it still held (Paimon's ``TagManager.deleteTag`` with ``TagDeletion``),
    keeping those of the earliest snapshot, of the other tags and of the branches."""
    earliest_id = snapshots.earliest_id(ctx.file_io, ctx.paths)
    if earliest_id is None or tagged.id >= earliest_id:
        return ExpireResult()  # the snapshot is still there: its own expiry deletes its files
    earliest = ctx.snapshot(earliest_id)
    kept_paths, kept_manifests = _kept(ctx, earliest, metadata.tags(ctx).values())
    kept_paths |= {p for e in live_files.live_entries(ctx, earliest) for p in ctx.entry_paths(e)}
    branched = references.files_of_branches(ctx)
    data_files = sorted({p for e in live_files.live_entries(ctx, tagged) for p in ctx.entry_paths(e)}
                        - kept_paths - branched)
    manifests = sorted({ctx.paths.manifest(name) for name in _manifest_names(ctx, tagged) - kept_manifests} - branched)
    _delete(ctx, data_files)
    _delete(ctx, manifests)
    _delete(ctx, [p for p in _unused_index(ctx, [tagged], [earliest, *metadata.tags(ctx).values()])
                  if p not in branched])
    return ExpireResult(data_files=len(data_files), manifests=len(manifests))
