"""Writing rows: bucket, sort, merge within the batch, level-0 files, one commit."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from changelake.errors import CommitConflictError, CommitOutcomeUnknownError, CorruptMetadataError
from changelake.option_values import LookupCompactMode
from changelake.table.changelog_hook import ChangelogHook
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import compaction_executor, map_all
from changelake.table.format import data_file, kv
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.io import scratch
from changelake.table.lsm import compactor as compaction
from changelake.table.lsm import deletion_vectors, lookup_files
from changelake.table.lsm.levels import Levels
from changelake.table.read import deletion_vectors as read_vectors
from changelake.table.read import live_files
from changelake.table.write import assigners, landing, spill
from changelake.table.write import conform as rows
from changelake.table.write.bucket_state import BucketState, removed_meanwhile, stale_buckets
from changelake.table.write.bucketing import group_by_bucket, merge_flush, restored_files, sort_flush

if TYPE_CHECKING:
    from changelake.table.write.conform import WriteInput


@dataclass(frozen=True)
class _Checkpoint:
    """A writer's state before a write call, to return to if the call fails."""

    pending: tuple[tuple[pa.Table, np.ndarray], ...]
    pending_bytes: int
    # per bucket: levels, next sequence number, spilled runs, new files, changelog files
    buckets: dict[tuple[bytes, int], tuple[Levels, int, tuple[spill.SpilledRun, ...], int, int]]
    assigner: object


class TableWrite:
    """Buffers rows and commits them; with a stable ``commit_user``, each commit identifier
    lands at most once (a replayed identifier is skipped).

    Rows are buffered up to ``write-buffer-size``; past it they are sorted and either spilled
    to a local temp directory (``write-buffer-spillable``, merged at commit) or flushed as
    level-0 files. Each bucket is an LSM tree: after a flush, universal compaction runs in a
    background thread and its result lands with a later commit as a COMPACT snapshot, except
    that a commit waits for compaction when the bucket has more sorted runs than
    ``num-sorted-run.stop-trigger``, with ``commit.force-compact``, for a full compaction
    (``full-compaction.delta-commits``), and for one-shot writers (``Table.write``).
    ``write-only`` disables compaction. ``changelog`` is the table's changelog producer (see
    :mod:`changelake.changelog.producers`): each flush hands it the raw input of every bucket
    and each compaction the bucket's levels before and after, and the changelog files it writes
    are committed with the data files (the APPEND snapshot) and with the compaction (the COMPACT
    snapshot); with ``lookup-wait`` every commit compacts level 0 up. Call :meth:`close`
    (or use ``with``) when done.
    """

    def __init__(self, ctx: TableContext, commit_user: str, *, changelog: ChangelogHook,
                 wait_compaction: bool = False) -> None:
        self.ctx = ctx
        self.commit_user = commit_user
        self.changelog = changelog
        self.wait_compaction = wait_compaction
        self._pending: list[tuple[pa.Table, np.ndarray]] = []
        self._pending_bytes = 0
        self._buckets: dict[tuple[bytes, int], BucketState] = {}
        self._spill_dir: str | None = None
        # Compactions run in the background unless the writer waits for them (one-shot writes).
        # Tables with deletion vectors compact level 0 up in every commit, from the vectors of
        # the latest snapshot, unless lookup-wait is off.
        self._background = not (wait_compaction or ctx.options.write_only or (
            ctx.options.deletion_vectors_enabled and ctx.options.lookup_wait))
        self._index_files: Mapping[tuple[bytes, int], list[IndexFileMeta]] = {}
        self._assigner = assigners.for_table(ctx)
        self._commits = 0
        # The snapshot whose files the last compactions that look up older levels (first-row,
        # lookup and full-compaction changelog) saw; None when no compaction looks up.
        self.view: int | None = None
        # Messages of a commit that failed for a reason other than a conflict (an I/O error,
        # say): committing again, with the same identifier, retries exactly these. Whether that
        # commit may have landed all the same (the store never answered its snapshot's put).
        self._unlanded: list[CommitMessage] = []
        self._unlanded_unknown = False

    def __enter__(self) -> TableWrite:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def write(self, data: WriteInput) -> None:
        """Validate and buffer rows (an optional ``rowkind`` column gives +I/-U/+U/-D). A call
        that raises leaves the writer exactly as it was before the call."""
        checkpoint = self._checkpoint()
        try:
            for part in rows.input_tables(data, self.ctx.name):
                self._buffer(part)
        except BaseException:
            self._restore(checkpoint)
            raise

    def _checkpoint(self) -> _Checkpoint:
        return _Checkpoint(
            tuple(self._pending), self._pending_bytes,
            {key: (s.levels, s.next_sequence, tuple(s.spilled), len(s.new_files), len(s.changelog))
             for key, s in self._buckets.items()},
            self._assigner.checkpoint(),
        )

    def _restore(self, checkpoint: _Checkpoint) -> None:
        """Undo a failed write call or final flush: its rows leave the buffer, the spill runs,
        level-0 files and changelog files that flushes wrote meanwhile are deleted, and rows
        buffered or spilled before, which those flushes also took, are buffered or spilled again."""
        self._pending = list(checkpoint.pending)
        self._pending_bytes = checkpoint.pending_bytes
        self._assigner.restore(checkpoint.assigner)
        for key, state in list(self._buckets.items()):
            levels, next_sequence, spilled, new_files, changelog = checkpoint.buckets.get(
                key, (state.levels, 0, (), 0, 0))
            for run in state.spilled:
                if run not in spilled:
                    os.unlink(run.path)
            bucket_dir = self.ctx.bucket_dir(state.partition, state.bucket)
            self.ctx.file_io.discard(self.ctx.file_paths(bucket_dir, [*state.new_files[new_files:],
                                                                      *state.changelog[changelog:]]))
            if key not in checkpoint.buckets:
                del self._buckets[key]
                continue
            state.spilled = list(spilled)
            del state.new_files[new_files:]
            del state.changelog[changelog:]
            state.levels, state.next_sequence = levels, next_sequence

    def _buffer(self, arrow: pa.Table) -> None:
        limit = self.ctx.options.write_buffer_size
        per_row = max(1, arrow.nbytes // max(1, arrow.num_rows))
        step = max(1, limit // (2 * per_row))
        for start in range(0, max(1, arrow.num_rows), step):
            conformed, kinds = rows.conform(self.ctx, arrow.slice(start, step))
            if conformed.num_rows:
                self._pending.append((conformed, kinds))
                self._pending_bytes += conformed.nbytes
            if self._pending_bytes > limit:
                self._flush(final=False)

    def abort(self) -> None:
        """Drop everything not committed: buffered rows, spill files, data and changelog files
        written since the last commit, compaction results not yet committed, and the files of
        a commit that failed (left to orphan cleanup when that commit may have landed)."""
        unlanded, self._unlanded = self._unlanded, []
        if not self._unlanded_unknown:
            self.ctx.file_io.discard(path for m in unlanded for path in m.written(self.ctx))
        self._pending.clear()
        self._pending_bytes = 0
        self._forget_buckets()
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None

    def close(self) -> None:
        """Abort what is not committed, waiting for background compactions to finish."""
        self.abort()

    def _discard(self, state: BucketState) -> None:
        bucket_dir = self.ctx.bucket_dir(state.partition, state.bucket)
        running, state.running = state.running, None
        if running is not None and not running.cancel():  # a compaction not yet started never runs
            try:
                result = running.result()
            except Exception:  # a discarded compaction's failure is moot
                result = compaction.CompactResult()
            self.ctx.file_io.discard(self.ctx.file_paths(bucket_dir, state.compacted.merge(result)))
        # The new files are this writer's, not yet committed, also when a compaction took them in.
        self.ctx.file_io.discard(
            self.ctx.file_paths(bucket_dir, [*state.new_files, *state.changelog, *state.compacted.written()]))
        self.ctx.file_io.discard(self.ctx.paths.index(index_file.file_name) for index_file in state.index_added)

    def _flush(self, *, final: bool) -> None:
        """Sort and merge the buffer per bucket; spill it, or write it as level-0 files."""
        if not self._pending:
            return
        data = pa.concat_tables([t for t, _ in self._pending])
        kinds = np.concatenate([k for _, k in self._pending])
        data, kinds = self._assigner.relocate(data, kinds)
        groups = group_by_bucket(self.ctx, data, self._assigner)
        keys = list(zip(groups.partitions, groups.buckets, strict=True))
        # Every flush numbers its rows above all that is committed in their buckets now, so a
        # commit that lands later wins over commits that landed before this flush. (A refused
        # flush, rows to a partition of another bucket number, leaves the buffer as it was.)
        committed = restored_files(self.ctx, groups)
        self._pending.clear()
        self._pending_bytes = 0
        for key in keys:
            files = committed[key]
            first = max((f.max_sequence_number + 1 for f in files), default=0)
            if key not in self._buckets:
                levels = Levels(tuple(files), self.ctx.options.num_levels)
                self._buckets[key] = BucketState(key[0], key[1], levels, first)
            else:
                self._buckets[key].next_sequence = max(self._buckets[key].next_sequence, first)
        states = [self._buckets[key] for key in keys]
        firsts = np.array([s.next_sequence for s in states], dtype=np.int64)
        spill = not final and self.ctx.options.write_buffer_spillable
        # Spilled runs hold unmerged rows: the final flush merges every row of a key in one
        # pass, as Paimon's spillable write buffer does. Merging runs first and then their
        # results is not the same: a partial-update merge that starts with a retraction
        # initialises the record from the retraction's values.
        spilling = spill or any(s.spilled for s in states)
        flush = sort_flush(self.ctx, data, kinds, groups, firsts)
        for state in states:
            # Sequences are the group's first number plus the row's position in this flush.
            state.next_sequence += data.num_rows
        if spill:
            for group, state in enumerate(states):
                state.spilled.append(self._spill(flush.raw(group)))
        elif spilling:  # merged one at a time, to keep memory near one buffer
            for group, state in enumerate(states):
                self._write_level0(state, flush.raw(group))
        else:
            merged = merge_flush(self.ctx, flush)
            map_all(lambda group: self._write_level0(states[group], merged.group(group), raw=flush.raw_if_read(group)),
                    range(len(states)))

    def _spill(self, part: pa.Table) -> spill.SpilledRun:
        if self._spill_dir is None:
            self._spill_dir = scratch.make("spill")
        return spill.SpilledRun.write(os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.arrow"), part,
                                kv.key_column(self.ctx.key_names[0]))

    def _write_level0(self, state: BucketState, part: pa.Table, *, raw: Iterable[pa.Table] | None = None) -> None:
        """Write ``part`` and the bucket's spilled runs as level-0 files, and hand their raw
        rows to the changelog producer. ``part`` is sorted by key, and merged when ``raw`` (its
        rows unmerged) is given, else not merged."""
        ctx = self.ctx
        chunks: Iterable[pa.Table]
        if state.spilled:
            chunks = spill.merge_runs(ctx, state.spilled, part)
            raw = spill.sorted_runs(ctx, state.spilled, part)
        elif raw is not None:
            chunks = [part]
        else:
            chunks, raw = [ctx.merge_rows(part, drop_deletes=False)], [part]
        bucket_dir = ctx.bucket_dir(state.partition, state.bucket)
        state.changelog += self.changelog.on_flush(ctx, bucket_dir, raw)
        # The next compactions read these files (tables with deletion vectors compact them up
        # before the commit): keep their rows, so that they are not decoded again.
        store = lookup_files.store_for(ctx)
        on_file = None if store is None else partial(store.put_file, bucket_dir)
        files = data_file.write(ctx.file_io, bucket_dir, chunks, ctx.file_settings, level=0, on_file=on_file)
        state.new_files += files
        state.levels = state.levels.replace((), files)
        state.spilled = []  # their files go with the spill directory once the final flush is done

    def _collect(self, state: BucketState) -> None:
        """Take in a background compaction's result (waiting for it if still running)."""
        running, state.running = state.running, None
        if running is None:
            return
        result = running.result()
        state.levels = state.levels.replace(result.before, result.after)
        bucket_dir = self.ctx.bucket_dir(state.partition, state.bucket)
        self.ctx.file_io.discard(self.ctx.file_paths(bucket_dir, state.compacted.merge(result)))
        # The compactions in ``compacted`` start from the index files committed before this
        # commit: a background one from those the commit that started it left.
        state.compacted_base = state.compacted_base or state.running_base
        state.running_base = None

    def _compact(self, state: BucketState, *, full: bool,
                 committed: dict[tuple[bytes, int], list[DataFileMeta]] | None) -> None:
        """Compact the bucket as it needs, or start its background compaction. A compaction
        (collected, or run here) whose input another writer's commit removed and its expiry
        deleted is void: the bucket is rebased on what is committed and commits no compaction."""
        try:
            self._compact_or_start(state, full=full, committed=committed)
        except (CorruptMetadataError, FileNotFoundError) as error:
            unlanded = {f.file_name for m in self._unlanded for f in m.new_files}
            now = removed_meanwhile(self.ctx, state, error, unlanded)
            if now is None:
                raise
            state.void_compactions(self.ctx, now)

    def _compact_or_start(self, state: BucketState, *, full: bool,
                          committed: dict[tuple[bytes, int], list[DataFileMeta]] | None) -> None:
        ctx = self.ctx
        options = ctx.options
        if options.write_only:
            return
        if state.running is not None and state.running.done():
            self._collect(state)
        bucket_dir = ctx.bucket_dir(state.partition, state.bucket)
        runs = len(state.levels.sorted_runs(ctx.key_of))
        force_level0 = compaction.forces_level0_up(ctx, self.changelog)
        waits = landing.waits_for_lookup(ctx, self.changelog)
        gentle_due = False
        if force_level0 and options.lookup_compact is LookupCompactMode.GENTLE and not full:
            # Paimon's trigger picks nothing while a compaction runs, and counts only when
            # universal compaction picks nothing.
            idle = state.running is None
            usual = compaction.picker(ctx).pick(state.levels.num_levels, state.levels.sorted_runs(ctx.key_of)) \
                if idle else None
            force_level0 = idle and usual is None and state.interval_reached(options)
            # A waiting writer waits for whatever is picked, as Paimon's prepareCommit does.
            gentle_due = waits and (usual is not None or force_level0)
        # Paimon's readers skip level 0 of first-row tables, and lookup-wait commits carry the
        # changelog of their rows: level 0 is compacted up before such commits.
        level0_up = waits and force_level0 and bool(state.levels.level0())
        sync = full or self.wait_compaction or options.commit_force_compact or runs > options.stop_trigger \
            or level0_up or gentle_due
        if sync:
            if state.running is not None and state.running.cancel():
                # Still queued behind other buckets' compactions on the one background thread:
                # compacted here instead, from the levels as they are now, rather than waited for.
                state.running = None
            self._collect(state)
            if committed is not None:
                self._refresh(state, committed.get((state.partition, state.bucket), []))
            vectors = None
            if options.deletion_vectors_enabled:
                state.compacted_base = state.compacted_base or self._committed_vectors(state)
                vectors = state.compacted.vectors if state.compacted.vectors is not None \
                    else state.compacted_base.vectors
            state.levels, result = compaction.compact_bucket(ctx, bucket_dir, state.levels, full=full,
                                                             changelog=self.changelog, force_level0=force_level0,
                                                             vectors=vectors)
            ctx.file_io.discard(ctx.file_paths(bucket_dir, state.compacted.merge(result)))
        if state.compacted.vectors is not None and state.compacted_base is not None:
            state.index_added, state.index_deleted = deletion_vectors.index_changes(
                ctx, state.compacted_base.files, state.compacted_base.vectors, state.compacted.vectors,
                state.levels.files)
        if not sync and state.running is None and self._background:
            if committed is not None:  # (as above: it may drop retractions, or look keys up)
                self._refresh(state, committed.get((state.partition, state.bucket), []))
            choose = compaction.picker(ctx)
            pick = choose.pick_level0 if force_level0 else choose.pick
            unit = pick(state.levels.num_levels, state.levels.sorted_runs(ctx.key_of))
            if unit is not None:
                vectors = None
                if options.deletion_vectors_enabled:
                    state.running_base = self._vectors_after_commit(state)
                    vectors = state.running_base.vectors
                state.running = compaction_executor().submit(compaction.compact, ctx, bucket_dir, state.levels, unit,
                                                             self.changelog, vectors)

    def _committed_vectors(self, state: BucketState) -> deletion_vectors.IndexBase:
        files = tuple(self._index_files.get((state.partition, state.bucket), []))
        kept = state.prepared_base
        if kept is not None and {f.file_name for f in kept.files} == {f.file_name for f in files}:
            return deletion_vectors.IndexBase(files, kept.vectors)  # index files are never rewritten
        return deletion_vectors.IndexBase(files, read_vectors.bucket_vectors(self.ctx, files))

    def _vectors_after_commit(self, state: BucketState) -> deletion_vectors.IndexBase:
        """The bucket's index files and vectors once this commit lands: the committed ones, or
        those its collected compactions leave (the index files it adds replace those it
        deletes). A background compaction starts from them and lands with a later commit."""
        if state.compacted.vectors is None or state.compacted_base is None:
            return self._committed_vectors(state)
        return state.compacted_base.after(state.compacted.vectors, state.index_added, state.index_deleted,
                                          state.levels.files)

    def _refresh(self, state: BucketState, files: list[DataFileMeta]) -> None:
        """Rebase the bucket's levels on ``files``, its files committed now: other writers may
        have committed in it since this writer looked, and a compaction must see their files (one
        to the bottom level drops retractions of their rows; lookups must find their keys). Kept
        as is when a compaction not yet committed lost its inputs meanwhile (its commit is void
        anyway)."""
        committed = {(f.file_name, f.level): f for f in files}
        new = {f.file_name for f in state.new_files}
        if any((f.file_name, f.level) not in committed for f in state.compacted.before if f.file_name not in new):
            return
        levels = Levels(tuple(committed.values()) + tuple(state.new_files), state.levels.num_levels)
        state.levels = levels.replace(state.compacted.before, state.compacted.after)

    def prepare(self, *, full_compaction: bool = False) -> list[CommitMessage]:
        """Flush everything as level-0 files and compact as the buckets need: the messages a
        committer lands (compactions finished since the last commit included). A flush that
        fails (the store failed a file) leaves the rows buffered and spilled as before, so
        that preparing again writes them; a compaction that fails leaves the flushed files."""
        checkpoint = self._checkpoint()
        try:
            self._flush(final=True)
            leftover = [s for s in self._buckets.values() if s.spilled]
            if leftover:
                empty = kv.file_schema(self.ctx.arrow_schema, self.ctx.key_names).empty_table()
                for state in leftover:
                    self._write_level0(state, empty)
        except BaseException:
            self._restore(checkpoint)
            raise
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None
        states = list(self._buckets.values())
        # Compactions rebase their bucket on what is committed now (cached since the flush read
        # it): another writer's files landed since would otherwise miss the retractions a compaction
        # drops, and lookups must see them too (a write-only writer does not compact).
        latest = self.ctx.latest_snapshot()
        committed = None if latest is None or self.ctx.options.write_only else \
            live_files.files_by_bucket(live_files.live_entries(self.ctx, latest))
        if compaction.forces_level0_up(self.ctx, self.changelog) or \
                self.changelog.full_compaction_delta_commits is not None:
            self.view = latest.id if latest is not None else 0
            self._index_files = read_vectors.snapshot_vectors(self.ctx, latest)
        map_all(lambda s: self._compact(s, full=full_compaction, committed=committed), states)
        messages = []
        for state in states:
            if state.new_files or state.changelog or state.compacted.before or state.compacted.after:
                messages.append(CommitMessage(
                    state.partition, state.bucket, self.ctx.options.bucket, new_files=tuple(state.new_files),
                    compact_before=tuple(state.compacted.before), compact_after=tuple(state.compacted.after),
                    changelog_files=tuple(state.changelog),
                    compact_changelog_files=tuple(state.compacted.changelog),
                    index_added=state.index_added, index_deleted=state.index_deleted,
                ))
            state.new_files = []
            state.changelog = []
            if state.compacted_base is not None:
                state.prepared_base = self._vectors_after_commit(state)
            state.compacted = compaction.CompactResult()
            state.compacted_base = None
            state.index_added = state.index_deleted = ()
        return self._assigner.prepare(messages)

    def forget_stale(self) -> int | None:
        """Forget the buckets whose committed files are not those the last :meth:`prepare`
        left them with (its messages did not land as prepared, or another writer committed
        there since), dropping their compactions; for a writer whose messages are landed
        elsewhere (a Spark driver), called before it writes again. The snapshot looked at
        (None: the table has none)."""
        latest = self.ctx.latest_snapshot()
        committed = {} if latest is None else live_files.files_by_bucket(live_files.live_entries(self.ctx, latest))
        for key in stale_buckets(self._buckets, committed):
            self._buckets.pop(key).drop_running(self.ctx)
        return None if latest is None else latest.id

    def commit(self, identifier: int) -> list[Snapshot]:
        """Flush and commit as ``identifier``; [] if this user already committed it.

        If the commit fails (an I/O error), calling ``commit`` again retries it. A conflict
        that voids the commit raises CommitConflictError and the writer starts afresh."""
        if landing.replayed(self.ctx, self.changelog, self.commit_user, identifier):
            self._unlanded = []  # landed after all: in the table, not to be deleted
            self.abort()
            return []
        delta_commits = self.ctx.options.full_compaction_delta_commits or self.changelog.full_compaction_delta_commits
        self._commits += 1
        full = delta_commits is not None and self._commits % delta_commits == 0
        messages = [*self._unlanded, *self.prepare(full_compaction=full)]
        self._unlanded = []
        if not messages:
            return []
        renumbered = False

        def on_renumber() -> None:
            nonlocal renumbered
            renumbered = True

        try:
            landed = landing.land(self.ctx, self.changelog, messages, self.commit_user, identifier,
                                  view=self.view, on_renumber=on_renumber)
        except CommitConflictError:
            self._forget_buckets()
            raise
        except Exception as exc:
            self._unlanded = messages
            self._unlanded_unknown = isinstance(exc, CommitOutcomeUnknownError)
            raise
        compacted = any(m.compact_before or m.compact_after for m in messages)
        lost_compaction = compacted and bool(landed) and landed[-1].commit_kind != CommitKind.COMPACT
        if landed:
            self._assigner.landed(landed[0])
        if renumbered or not landed or lost_compaction:
            # Skipped, renumbered after another commit, or our compaction lost to another
            # committer: this writer's view of the buckets is stale, so it is restored from the
            # table at the next flush.
            self._forget_buckets()
        return landed

    def _forget_buckets(self) -> None:
        for state in self._buckets.values():
            self._discard(state)
        self._buckets.clear()
        self._assigner.forget()

