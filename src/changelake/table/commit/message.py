"""Commit messages: what one writer task produced for one (partition, bucket), small enough
to send from Spark executors to the driver that commits."""

from __future__ import annotations

from dataclasses import dataclass

from changelake.table.context import TableContext
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta


@dataclass(frozen=True)
class CommitMessage:
    """What one writer task produced for one (partition, bucket)."""

    partition: bytes
    bucket: int
    total_buckets: int
    new_files: tuple[DataFileMeta, ...] = ()
    compact_before: tuple[DataFileMeta, ...] = ()
    compact_after: tuple[DataFileMeta, ...] = ()
    # Changelog files of the new rows (Paimon's newFilesIncrement.changelogFiles), listed in
    # the APPEND snapshot's changelog manifest list.
    changelog_files: tuple[DataFileMeta, ...] = ()
    # Changelog files a compaction produced (Paimon's compactIncrement.changelogFiles), listed
    # in the COMPACT snapshot's changelog manifest list.
    compact_changelog_files: tuple[DataFileMeta, ...] = ()
    # Deletion-vector index files of the bucket a compaction wrote and replaced (Paimon's
    # compactIncrement.newIndexFiles / deletedIndexFiles), landed with the COMPACT snapshot.
    index_added: tuple[IndexFileMeta, ...] = ()
    index_deleted: tuple[IndexFileMeta, ...] = ()
    # Dynamic bucket mode: the bucket's new HASH index file when it got new keys (Paimon's
    # newFilesIncrement.newIndexFiles), landed with the APPEND snapshot in place of the bucket's
    # previous one; and the names of the partition's HASH index files the assignment started
    # from: the commit is void when they changed meanwhile (a key could land in two buckets).
    hash_index: IndexFileMeta | None = None
    hash_base: tuple[str, ...] = ()
    # Cross-partition upsert: the snapshot whose keys the writer's key index held when it
    # placed the rows; the commit is void when another writer's rows landed since (a key of
    # theirs could land in a second partition).
    key_base: int | None = None

    def bucket_dir(self, ctx: TableContext) -> str:
        return ctx.bucket_dir(self.partition, self.bucket)

    def written(self, ctx: TableContext, *, compaction_only: bool = False) -> list[str]:
        """Paths of the files this message's writer created: the new data and changelog files,
        the compaction outputs that are not upgrades (an upgrade only moved an existing file)
        and the compaction's changelog files."""
        moved = {f.file_name for f in self.compact_before}
        outputs = [f for f in self.compact_after if f.file_name not in moved]
        compaction = [*outputs, *self.compact_changelog_files]
        files = compaction if compaction_only else [*self.new_files, *self.changelog_files, *compaction]
        bucket_dir = self.bucket_dir(ctx)
        hash_index = [] if compaction_only or self.hash_index is None else [self.hash_index]
        return ctx.file_paths(bucket_dir, files) + \
            [ctx.paths.index(f.file_name) for f in [*self.index_added, *hash_index]]
