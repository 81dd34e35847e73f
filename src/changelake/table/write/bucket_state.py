"""A writer's state of one (partition, bucket), and what becomes of it when a compaction of the
bucket finds an input file gone: another writer's commit removed it (its compaction) and that
commit's expiry deleted it, while this writer's view of the bucket still named it.

Such a compaction is void, as one whose inputs a concurrent commit removed is when it commits
(Paimon's ``FileStoreCommitImpl`` conflict check): its outputs are deleted, the bucket's levels
are rebased on the files committed now, and the commit lands the new rows without it. A file the
latest snapshot still names, or one this writer is about to commit, being missing is not a race
but a lost file: that error stands.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

from changelake.options import TableOptions
from changelake.table.context import TableContext
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm import compactor as compaction
from changelake.table.lsm import deletion_vectors
from changelake.table.lsm.levels import Levels
from changelake.table.write import spill


@dataclass
class BucketState:
    """A writer's view of one (partition, bucket): its LSM levels (committed files plus this
    writer's uncommitted ones), the next sequence number, and work not yet committed."""

    partition: bytes
    bucket: int
    levels: Levels
    next_sequence: int
    spilled: list[spill.SpilledRun] = field(default_factory=list)
    new_files: list[DataFileMeta] = field(default_factory=list)
    changelog: list[DataFileMeta] = field(default_factory=list)
    compacted: compaction.CompactResult = field(default_factory=compaction.CompactResult)
    running: Future[compaction.CompactResult] | None = None
    # deletion vectors: the bucket's index files a commit's compaction replaced, and what they held
    index_added: tuple[IndexFileMeta, ...] = ()
    index_deleted: tuple[IndexFileMeta, ...] = ()
    # lookup-compact gentle: this writer's commits in a row in which universal compaction picked
    # nothing (Paimon's lookup compaction trigger count)
    idle_commits: int = 0
    # deletion vectors: the committed index files (and their vectors) that the compactions in
    # ``compacted`` started from, and those the running background compaction started from
    compacted_base: deletion_vectors.IndexBase | None = None
    running_base: deletion_vectors.IndexBase | None = None
    # deletion vectors: the index files the last prepared commit leaves the bucket with, and
    # their vectors; the next commit starts from them while they are the committed ones,
    # rather than parsing every vector again (Paimon's writer keeps a bucket's vectors too)
    prepared_base: deletion_vectors.IndexBase | None = None

    def drop_running(self, ctx: TableContext) -> None:
        """Drop the bucket's running compaction without waiting for it: not started, it never
        runs; running, its files are deleted when it ends. For a bucket whose state is dropped
        between commits (nothing else of it uncommitted)."""
        running, self.running = self.running, None
        if running is None or running.cancel():
            return
        bucket_dir = ctx.bucket_dir(self.partition, self.bucket)

        def discard(done: Future[compaction.CompactResult]) -> None:
            if done.exception() is None:  # a dropped compaction's failure is moot
                ctx.file_io.discard(ctx.file_paths(bucket_dir, done.result().written()))

        running.add_done_callback(discard)

    def interval_reached(self, options: TableOptions) -> bool:
        """``lookup-compact`` gentle: a commit in which universal compaction picks nothing
        counts, and every ``lookup-compact.max-interval``-th one forces level 0 up (at least
        every ``num-sorted-run.compaction-trigger``-th, as Paimon bounds it)."""
        self.idle_commits += 1
        if self.idle_commits < max(options.compaction_trigger, options.lookup_compact_max_interval):
            return False
        self.idle_commits = 0
        return True

    def void_compactions(self, ctx: TableContext, committed: Collection[DataFileMeta]) -> None:
        """Drop the compactions not yet committed (deleting the files they wrote) and rebase the
        levels on ``committed``, the bucket's files committed now, plus the new files; the new
        files and their changelog stay, to be committed. No compaction may be running."""
        bucket_dir = ctx.bucket_dir(self.partition, self.bucket)
        ctx.file_io.discard(ctx.file_paths(bucket_dir, self.compacted.written()))
        ctx.file_io.discard(ctx.paths.index(f.file_name) for f in self.index_added)
        self.compacted = compaction.CompactResult()
        self.compacted_base = self.running_base = None
        self.index_added = self.index_deleted = ()
        self.levels = Levels(tuple(committed) + tuple(self.new_files), self.levels.num_levels)


def removed_meanwhile(ctx: TableContext, state: BucketState, error: Exception,
                      to_commit: Collection[str]) -> list[DataFileMeta] | None:
    """When ``error``, raised by a compaction of the bucket, is an input file that another
    commit removed and expiry deleted meanwhile (:func:`compactor.removed_meanwhile`): the
    bucket's files committed now, to rebase on. None when the file is lost instead, among them
    the bucket's new files and ``to_commit`` (names of data files this writer has yet to commit)."""
    ours = {*to_commit, *(f.file_name for f in state.new_files)}
    gone = compaction.removed_meanwhile(ctx, error, (state.partition, state.bucket), ours=ours)
    return None if gone is None else gone[1]


def stale_buckets(states: Mapping[tuple[bytes, int], BucketState],
                  committed: Mapping[tuple[bytes, int], Collection[DataFileMeta]]) -> list[tuple[bytes, int]]:
    """The buckets whose ``committed`` files are not their levels' files, as the writer's last
    prepared commit left them (nothing written since): that commit did not land as prepared, or
    another writer committed there since."""
    return [key for key, state in states.items()
            if {(f.file_name, f.level) for f in state.levels.files}
            != {(f.file_name, f.level) for f in committed.get(key, ())}]
