"""Committing: manifests, manifest lists and an atomically created snapshot file.

A commit retries on a lost race (another committer created the snapshot id first): it
re-reads the latest snapshot, re-checks exactly-once and conflicts, and tries the next id.
"""

from __future__ import annotations

import functools
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from changelake.errors import CommitConflictError, CommitOutcomeUnknownError, SnapshotNotFoundError
from changelake.table import metadata
from changelake.table.append import vectors as append_vectors
from changelake.table.commit import hash_indexes, key_placement, last_commits, manifest_merge, renumber
from changelake.table.commit.conflicts import check_bucket_counts, check_files, check_view
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import binary_row, index_manifest, manifest, snapshot
from changelake.table.format.index_manifest import IndexManifestEntry
from changelake.table.format.manifest import FileKind, ManifestEntry, ManifestFileMeta, SimpleStats
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import deletion_vectors, live_files

_log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """Files written for one commit that must be removed if it does not land."""

    written: list[str] = field(default_factory=list)
    # renumbered copies of data files made by the latest retry
    copies: list[str] = field(default_factory=list)


def already_committed(ctx: TableContext, commit_user: str, identifier: int, latest: Snapshot | None) -> bool:
    """Whether ``commit_user`` already committed ``identifier`` (or a later one): the one
    exactly-once check, against the user's newest snapshot (Paimon's ``filterCommitted``) or,
    when expiry deleted all of them, the last commit it recorded for the user (which Paimon
    does not keep). Batch commits (``BATCH_COMMIT_IDENTIFIER``) always land."""
    if identifier == snapshot.BATCH_COMMIT_IDENTIFIER:
        return False
    mine = latest_of_user(ctx, commit_user, latest)
    if mine is not None:
        return mine.commit_identifier >= identifier
    # Expiry records a user's last commit before it deletes the snapshot: no snapshot found
    # means the record is on disk now.
    expired = last_commits.read(ctx, commit_user)
    return expired is not None and expired.commit_identifier >= identifier


def latest_of_user(ctx: TableContext, commit_user: str, latest: Snapshot | None) -> Snapshot | None:
    """The newest snapshot committed by ``commit_user``, scanning back from ``latest``."""
    if latest is None:
        return None
    earliest = snapshot.earliest_id(ctx.file_io, ctx.paths) or 1
    for snapshot_id in range(latest.id, earliest - 1, -1):
        try:
            candidate = latest if snapshot_id == latest.id else ctx.snapshot(snapshot_id)
        except SnapshotNotFoundError:  # expired concurrently: nothing older can be ours any more
            return None
        if candidate.commit_user == commit_user:
            return candidate
    return None


def _entries(messages: Iterable[CommitMessage], *, compact: bool) -> list[ManifestEntry]:
    out: list[ManifestEntry] = []
    for m in messages:
        if compact:
            out += [ManifestEntry(FileKind.DELETE, m.partition, m.bucket, m.total_buckets, f) for f in m.compact_before]
            out += [ManifestEntry(FileKind.ADD, m.partition, m.bucket, m.total_buckets, f) for f in m.compact_after]
        else:
            out += [ManifestEntry(FileKind.ADD, m.partition, m.bucket, m.total_buckets, f) for f in m.new_files]
    return out


def _changelog_entries(messages: Iterable[CommitMessage], *, compact: bool) -> list[ManifestEntry]:
    """ADD entries of the messages' changelog files (Paimon lists changelog files this way in
    a snapshot's changelog manifest list): those of new rows for the APPEND snapshot, those of
    compactions for the COMPACT snapshot."""
    return [ManifestEntry(FileKind.ADD, m.partition, m.bucket, m.total_buckets, f)
            for m in messages for f in (m.compact_changelog_files if compact else m.changelog_files)]


@dataclass
class Delta:
    """One snapshot's delta: its entries and changelog entries, written as manifests."""

    entries: list[ManifestEntry]
    manifest: ManifestFileMeta
    changelog: list[ManifestEntry]
    changelog_manifest: ManifestFileMeta | None

    @staticmethod
    def write(ctx: TableContext, kind: CommitKind, messages: Sequence[CommitMessage], attempt: Attempt) -> Delta:
        compact = kind is CommitKind.COMPACT
        entries = _entries(messages, compact=compact)
        changelog = _changelog_entries(messages, compact=compact)
        return Delta(entries, write_manifest(ctx, entries, attempt), changelog,
                      write_manifest(ctx, changelog, attempt) if changelog else None)


def _partition_stats(ctx: TableContext, partitions: Sequence[bytes]) -> SimpleStats:
    types = ctx.partition_types
    arity = len(types)
    if arity == 0:
        empty = binary_row.serialize(binary_row.to_bytes([], []), 0)
        return SimpleStats(empty, empty, ())
    rows = [ctx.partition_values(p) for p in set(partitions)]
    mins, maxs, nulls = [], [], []
    for i in range(arity):
        present = [r[i] for r in rows if r[i] is not None]
        mins.append(min(present) if present else None)
        maxs.append(max(present) if present else None)
        nulls.append(sum(1 for r in rows if r[i] is None))
    return SimpleStats(
        binary_row.serialize(binary_row.to_bytes(mins, types), arity),
        binary_row.serialize(binary_row.to_bytes(maxs, types), arity),
        tuple(nulls),
    )


def write_manifest(ctx: TableContext, entries: Sequence[ManifestEntry], attempt: Attempt) -> ManifestFileMeta:
    ctx.check_manifests_writable()
    name = f"manifest-{uuid.uuid4()}-0"
    data = manifest.encode_avro(
        manifest.ENTRY_SCHEMA, [e.to_avro() for e in entries], ctx.options.manifest_compression
    )
    ctx.file_io.write_bytes(ctx.paths.manifest(name), data, kill_point=KillPoint.MANIFEST)
    attempt.written.append(ctx.paths.manifest(name))
    live_files.remember(ctx, name, list(entries))
    min_bucket, max_bucket = manifest.bounds([e.bucket for e in entries])
    min_level, max_level = manifest.bounds([e.file.level for e in entries])
    return ManifestFileMeta(
        file_name=name,
        file_size=len(data),
        num_added_files=sum(1 for e in entries if e.kind == FileKind.ADD),
        num_deleted_files=sum(1 for e in entries if e.kind == FileKind.DELETE),
        partition_stats=_partition_stats(ctx, [e.partition for e in entries]),
        schema_id=ctx.schema.id,
        min_bucket=min_bucket,
        max_bucket=max_bucket,
        min_level=min_level,
        max_level=max_level,
        total_buckets=_common_total_buckets(entries),
    )


def _common_total_buckets(entries: Sequence[ManifestEntry]) -> int | None:
    """The number of buckets every entry shares, for a manifest's ``_TOTAL_BUCKETS``; None when
    they differ (partitions of a table Paimon rescaled): readers prune manifests by a key's
    bucket under that number (pypaimon does), which must hold for every entry."""
    counts = {e.total_buckets for e in entries}
    return counts.pop() if len(counts) == 1 else None


def _write_manifest_list(ctx: TableContext, metas: Sequence[ManifestFileMeta], attempt: Attempt) -> tuple[str, int]:
    name = f"manifest-list-{uuid.uuid4()}-0"
    data = manifest.encode_avro(
        manifest.MANIFEST_FILE_SCHEMA, [m.to_avro() for m in metas], ctx.options.manifest_compression
    )
    ctx.file_io.write_bytes(ctx.paths.manifest(name), data, kill_point=KillPoint.MANIFEST_LIST)
    attempt.written.append(ctx.paths.manifest(name))
    live_files.remember(ctx, name, list(metas))
    return name, len(data)


def _index_manifest(ctx: TableContext, latest: Snapshot | None, messages: Sequence[CommitMessage], kind: CommitKind,
                    attempt: Attempt) -> str | None:
    """The index manifest of the new snapshot: the latest one's, or when the messages replace
    index files (deletion vectors in a COMPACT snapshot, dynamic buckets' HASH files in an APPEND
    one), a new one listing every index file after them (Paimon's IndexManifestFileHandler: all
    ADD entries). A replaced deletion-vector file that is gone already means a concurrent
    compaction of the bucket landed first: the compaction is void."""
    previous = latest.index_manifest if latest is not None else None
    compact = kind is CommitKind.COMPACT
    # An append table's compaction left out the rows deleted when it read its files: rows
    # marked since are in its output.
    compacted = {(m.partition, m.bucket, f.file_name) for m in messages for f in m.compact_before} \
        if compact and ctx.kind is TableKind.APPEND else set()
    if not any(m.index_added or m.index_deleted if compact else m.hash_index for m in messages):
        if compacted and latest is not None:
            append_vectors.check_compacted(ctx, deletion_vectors.index_entries(ctx, latest), compacted)
        return previous
    entries = deletion_vectors.index_entries(ctx, latest) if latest is not None else []
    live = {(e.partition, e.bucket, e.file.file_name) for e in entries}
    deleted = {(m.partition, m.bucket, f.file_name) for m in messages for f in m.index_deleted} if compact else set()
    if deleted - live:
        raise CommitConflictError("deletion vectors of a bucket were replaced by a concurrent commit; "
                                  "this commit's compaction is void", table=ctx.name)
    after = [e for e in entries if (e.partition, e.bucket, e.file.file_name) not in deleted]
    after += [IndexManifestEntry(FileKind.ADD, m.partition, m.bucket, f)
              for m in messages if compact for f in m.index_added]
    after = after if compact else hash_indexes.replace(ctx, after, messages)
    append_vectors.check_compacted(ctx, after, compacted)
    if not after:
        return None
    name = index_manifest.write(ctx.file_io, ctx.paths.manifest_dir, after, ctx.options.manifest_compression)
    attempt.written.append(ctx.paths.manifest(name))
    return name


def back_off(ctx: TableContext, attempt_number: int) -> None:
    """Wait before retry ``attempt_number`` (1, 2, ...) after a lost race: doubling from
    ``commit.min-retry-wait`` up to ``commit.max-retry-wait``, with jitter, so that contending
    committers spread out instead of racing again at once."""
    options = ctx.options
    wait_ms = min(options.commit_max_retry_wait, options.commit_min_retry_wait << (attempt_number - 1))
    time.sleep(wait_ms * random.uniform(0.5, 1.0) / 1000)


def commit(
    ctx: TableContext,
    messages: Sequence[CommitMessage],
    commit_user: str,
    identifier: int,
    *,
    compact_conflicts_fatal: bool = True,
    on_renumber: Callable[[], None] | None = None,
    view: int | None = None,
    conflicts: Callable[[Snapshot | None], None] | None = None,
) -> list[Snapshot]:
    """Commit the messages as an APPEND snapshot (new files) and then a COMPACT snapshot
    (compaction changes), skipping everything if ``commit_user`` already committed
    ``identifier``. Returns the new snapshots ([] when skipped or empty).

    When another commit landed rows in the same buckets meanwhile, the new rows are renumbered
    above them first (``on_renumber`` is told), so this commit, landing later, wins. ``view``
    is the snapshot whose files the compactions looked up (first-row, lookup and
    full-compaction changelog): a compaction another commit landed in the same bucket since is
    a conflict, since its files were not looked up. ``conflicts`` checks every attempt against
    the latest snapshot too (raising CommitConflictError).

    A compaction whose input files another commit removed meanwhile (or that would overlap
    files within a level) is void: its output files are deleted, and CommitConflictError is
    raised unless ``compact_conflicts_fatal`` is False and nothing but the compaction was
    lost (then the snapshots that did land are returned).

    Once the APPEND snapshot landed the commit is never reported as failed: a COMPACT snapshot
    that fails to land for any other reason (an I/O error) is void too, logged, and the
    APPEND returned. When the store never says whether a snapshot was created
    (CommitOutcomeUnknownError), nothing it may name is deleted."""
    originals = {path for m in messages for path in m.written(ctx)}
    current = list(messages)
    done: list[Snapshot] = []
    try:
        for kind in (CommitKind.APPEND, CommitKind.COMPACT):
            compact = kind is CommitKind.COMPACT
            if not _entries(current, compact=compact) and not _changelog_entries(current, compact=compact):
                continue
            if compact and done:
                killpoints.reached(KillPoint.BEFORE_COMPACT_SNAPSHOT)
            landed, current = _commit_one(ctx, kind, current, commit_user, identifier, first=not done,
                                          on_renumber=on_renumber, view=view, conflicts=conflicts)
            if landed is None:
                _remove(ctx, originals | _written(ctx, current))
                return done
            done.append(landed)
            _remove(ctx, originals - _written(ctx, current))  # replaced by renumbered copies
    except CommitConflictError:
        if done:  # the APPEND landed; only the compaction is void
            _remove(ctx, (path for m in current for path in m.written(ctx, compaction_only=True)))
            if not compact_conflicts_fatal:
                return done
        else:
            _remove(ctx, originals | _written(ctx, current))
            if not compact_conflicts_fatal and not any(m.new_files or m.changelog_files for m in current):
                return done  # there were only compaction results, and they are void
        raise
    except CommitOutcomeUnknownError:
        # The snapshot may have landed: nothing it may name is deleted.
        if done:
            _log.warning("table %s: snapshot %d landed; whether its compaction landed is unknown", ctx.name,
                         done[-1].id, exc_info=True)
            return done
        raise
    except Exception:
        if done:
            # The APPEND landed, so the commit did; its compaction did not (an I/O error before
            # its snapshot was created): the compaction is void, as after a crash between the two.
            _remove(ctx, (path for m in current for path in m.written(ctx, compaction_only=True)))
            _log.warning("table %s: snapshot %d landed; its compaction did not", ctx.name, done[-1].id,
                         exc_info=True)
            return done
        _remove(ctx, _written(ctx, current) - originals)  # the writer may retry with the originals
        raise
    return done


def _written(ctx: TableContext, messages: Iterable[CommitMessage]) -> set[str]:
    return {path for m in messages for path in m.written(ctx)}


def _commit_one(
    ctx: TableContext,
    kind: CommitKind,
    messages: list[CommitMessage],
    commit_user: str,
    identifier: int,
    *,
    first: bool,
    on_renumber: Callable[[], None] | None,
    view: int | None,
    conflicts: Callable[[Snapshot | None], None] | None,
) -> tuple[Snapshot | None, list[CommitMessage]]:
    """Land one snapshot of ``kind`` for the messages, retrying lost races; returns it (None:
    already committed) and the messages as landed (renumbered copies, for an APPEND)."""
    attempt = Attempt()
    try:
        return _land(ctx, kind, messages, commit_user, identifier, attempt, first=first, on_renumber=on_renumber,
                     view=view, conflicts=conflicts)
    except CommitOutcomeUnknownError:
        raise  # the snapshot may name the copies
    except BaseException:
        _remove(ctx, attempt.copies)
        raise


def _land(
    ctx: TableContext,
    kind: CommitKind,
    messages: list[CommitMessage],
    commit_user: str,
    identifier: int,
    attempt: Attempt,
    *,
    first: bool,
    on_renumber: Callable[[], None] | None,
    view: int | None,
    conflicts: Callable[[Snapshot | None], None] | None,
) -> tuple[Snapshot | None, list[CommitMessage]]:
    delta = Delta.write(ctx, kind, messages, attempt)
    options = ctx.options
    retries = options.commit_max_retries
    for attempt_number in range(retries + 1):
        if attempt_number:
            back_off(ctx, attempt_number)
        latest = ctx.latest_snapshot()
        if first and already_committed(ctx, commit_user, identifier, latest):
            _remove(ctx, attempt.written)
            return None, messages
        shifted = renumber.renumber(ctx, messages, latest) if kind is CommitKind.APPEND else None
        if shifted is not None:
            # Copies made by an earlier retry that this one copied again are not needed.
            still = set(attempt.copies) & _written(ctx, shifted)
            _remove(ctx, set(attempt.copies) - still)
            attempt.copies = sorted(still | (_written(ctx, shifted) - _written(ctx, messages)))
            messages = shifted
            if on_renumber is not None:
                on_renumber()
            _remove(ctx, attempt.written)
            attempt.written.clear()
            delta = Delta.write(ctx, kind, messages, attempt)
        entries = delta.entries
        lists = Attempt()
        try:
            check_bucket_counts(ctx, latest, entries)
            check_files(ctx, latest, entries)
            if view is not None and kind is CommitKind.COMPACT:
                check_view(ctx, view, latest, entries)
            if kind is CommitKind.APPEND:
                key_placement.check(ctx, messages, commit_user, latest)
            if conflicts is not None:
                conflicts(latest)
            index_name = _index_manifest(ctx, latest, messages, kind, lists)
            new = snapshot_after(ctx, kind, latest, delta, index_name, commit_user, identifier, lists)
        except Exception:
            # a conflict, or an error before the snapshot is created (an I/O error, the table
            # dropped): its manifests and manifest lists are no one's
            _remove(ctx, [*attempt.written, *lists.written])
            raise
        if land_snapshot(ctx, new, lists):
            attempt.copies = []  # they are part of the table now
            return new, messages
    _remove(ctx, attempt.written)
    raise CommitConflictError(f"commit gave up after {retries} lost races", table=ctx.name)


def snapshot_after(ctx: TableContext, kind: CommitKind, latest: Snapshot | None, delta: Delta, index_name: str | None,
                   commit_user: str, identifier: int, lists: Attempt) -> Snapshot:
    """The snapshot after ``latest`` holding ``delta``, its manifest lists written (into
    ``lists``); :func:`land_snapshot` creates it."""
    entries = delta.entries
    previous = live_files.data_manifests(ctx, latest) if latest is not None else []
    base = manifest_merge.merge(ctx, previous, functools.partial(write_manifest, ctx, attempt=lists))
    base_name, base_size = _write_manifest_list(ctx, base, lists)
    delta_name, delta_size = _write_manifest_list(ctx, [delta.manifest], lists)
    changelog_name, changelog_size = (None, None) if delta.changelog_manifest is None else (
        _write_manifest_list(ctx, [delta.changelog_manifest], lists))
    delta_count = sum(e.file.row_count if e.kind == FileKind.ADD else -e.file.row_count for e in entries)
    return Snapshot(
        id=(latest.id + 1) if latest is not None else 1,
        # Paimon's FileStoreCommitImpl stamps the table's newest schema, also when the
        # writer works on an older one (its files carry their own schema id)
        schemaId=metadata.latest_schema_id(ctx.file_io, ctx.paths, ctx.name),
        baseManifestList=base_name,
        baseManifestListSize=base_size,
        deltaManifestList=delta_name,
        deltaManifestListSize=delta_size,
        changelogManifestList=changelog_name,
        changelogManifestListSize=changelog_size,
        indexManifest=index_name,
        commitUser=commit_user,
        commitIdentifier=identifier,
        commitKind=kind,
        timeMillis=int(time.time() * 1000),
        logOffsets={},
        totalRecordCount=((latest.total_record_count or 0) if latest is not None else 0) + delta_count,
        deltaRecordCount=delta_count,
        # as Paimon: null without changelog files
        changelogRecordCount=sum(e.file.row_count for e in delta.changelog) if delta.changelog else None,
    )


def land_snapshot(ctx: TableContext, new: Snapshot, lists: Attempt) -> bool:
    """Create the snapshot file of ``new``: False, its manifest lists (``lists``) removed, when
    another commit took its id first (the caller re-checks and retries)."""
    if snapshot.try_commit(ctx.file_io, ctx.paths, new):
        return True
    _remove(ctx, lists.written)
    return False


def _remove(ctx: TableContext, paths: Iterable[str]) -> None:
    ctx.file_io.discard(paths)

