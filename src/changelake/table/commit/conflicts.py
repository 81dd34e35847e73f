"""The conflict checks a commit makes against the snapshots that landed before it (Paimon's
``ConflictDetection``): files it deletes still live and levels still sorted runs, a partition's
number of buckets unchanged, and a compaction's lookups not overtaken by later compactions or
overwrites. Each raises CommitConflictError, which voids the commit."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

from changelake.errors import CommitConflictError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.context import TableContext
from changelake.table.format import manifest
from changelake.table.format.manifest import DataFileMeta, FileKind, ManifestEntry
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.read import live_files


def check_files(ctx: TableContext, latest: Snapshot | None, entries: Sequence[ManifestEntry]) -> None:
    """Files this commit deletes must still be live, and after it every level >= 1 of every
    touched bucket must still be one sorted run (no overlapping key ranges)."""
    if not any(e.kind == FileKind.DELETE or e.file.level > 0 for e in entries):
        return
    live = {e.identifier: e for e in live_files.live_entries(ctx, latest)} if latest is not None else {}
    gone = [e.file.file_name for e in entries if e.kind == FileKind.DELETE and e.identifier not in live]
    if gone:
        raise CommitConflictError(
            f"files {gone[:5]} were removed by a concurrent commit; this commit's compaction is void",
            table=ctx.name,
        )
    touched = {(e.partition, e.bucket) for e in entries if e.file.level > 0}
    after = manifest.merge_entries([*(e for e in live.values() if (e.partition, e.bucket) in touched), *entries])
    by_level: dict[tuple[bytes, int, int], list[DataFileMeta]] = defaultdict(list)
    for e in after.values():
        if e.file.level > 0:
            by_level[(e.partition, e.bucket, e.file.level)].append(e.file)
    for (_, bucket, level), files in by_level.items():
        files.sort(key=lambda f: ctx.key_of(f.min_key))
        for left, right in itertools.pairwise(files):
            if ctx.key_of(left.max_key) >= ctx.key_of(right.min_key):
                raise CommitConflictError(
                    f"bucket {bucket} level {level} would hold overlapping files "
                    f"{left.file_name} and {right.file_name} after this commit (a concurrent compaction "
                    "landed first); this commit's compaction is void",
                    table=ctx.name,
                )


def check_bucket_counts(ctx: TableContext, latest: Snapshot | None, entries: Sequence[ManifestEntry]) -> None:
    """The files this commit adds to a partition must have the number of buckets of the files
    there (Paimon's ``ConflictDetection``: total buckets of a partition change only with an
    overwrite); a writer that flushed before the table's ``bucket`` changed, or writers of two
    numbers racing into a new partition, would otherwise put a key in two buckets."""
    added: dict[bytes, int] = {}
    # A postpone-bucket table's partition holds its real buckets and bucket-postpone/ (whose
    # files say -2): only the real buckets' number is checked.
    entries = [e for e in entries if e.bucket != POSTPONE_BUCKET]
    for e in entries:
        if e.kind == FileKind.ADD and added.setdefault(e.partition, e.total_buckets) != e.total_buckets:
            raise CommitConflictError(f"this commit adds files of {added[e.partition]} and {e.total_buckets} "
                                      f"buckets to {ctx.describe_partition(e.partition)}", table=ctx.name)
    if not added or latest is None:
        return
    counts = set(added.values())
    if len(counts) == 1 and all(m.total_buckets in counts for m in live_files.data_manifests(ctx, latest)):
        return  # every manifest says its files have this commit's number: no need to read them
    for e in live_files.live_entries(ctx, latest):
        if e.bucket != POSTPONE_BUCKET and added.get(e.partition, e.total_buckets) != e.total_buckets:
            raise CommitConflictError(
                f"total buckets of {ctx.describe_partition(e.partition)} would change from {e.total_buckets} "
                f"to {added[e.partition]} without overwrite (the table's 'bucket' changed, or another writer wrote "
                "the partition with another number); this commit is void", table=ctx.name)


def check_view(ctx: TableContext, view: int, latest: Snapshot | None, entries: Sequence[ManifestEntry]) -> None:
    """A compaction that looked up the older levels of its buckets in snapshot ``view`` is void
    when a later compaction added files above level 0 to one of them, or a later overwrite
    (INSERT OVERWRITE, truncate, a partition drop or expiry) replaced or removed any of their
    files: it did not look there (a first-row key could then live in two levels or be dropped as
    a duplicate of a row that is gone, a deletion vector miss the row it replaces, a changelog
    its before-image)."""
    if latest is None or latest.id <= view:
        return
    touched = {(e.partition, e.bucket) for e in entries}
    for snapshot_id in range(view + 1, latest.id + 1):
        landed = ctx.snapshot(snapshot_id)
        if landed.commit_kind is CommitKind.APPEND:
            continue  # appends add level-0 files only
        overwrite = landed.commit_kind is CommitKind.OVERWRITE
        for meta in live_files.manifest_list(ctx, landed.delta_manifest_list):
            for e in live_files.manifest_entries(ctx, meta.file_name):
                if (overwrite or (e.kind == FileKind.ADD and e.file.level > 0)) and (e.partition, e.bucket) in touched:
                    raise CommitConflictError(
                        f"snapshot {snapshot_id} ({landed.commit_kind.value}) changed bucket {e.bucket} after this "
                        "compaction looked up its levels; this commit's compaction is void", table=ctx.name)
