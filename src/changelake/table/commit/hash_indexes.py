"""Landing dynamic buckets' HASH index files: a commit's new HASH file of a bucket replaces the
bucket's previous one in the index manifest (Paimon's ``IndexManifestFileHandler`` combines
HASH entries by partition and bucket), and is void when its partition's HASH index changed
since the writer assigned the rows: another writer may have put one of its new keys in another
bucket, or replaced the very file this one extends."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from changelake.errors import CommitConflictError
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format.hash_index import HASH
from changelake.table.format.index_manifest import IndexManifestEntry
from changelake.table.format.manifest import FileKind


def replace(ctx: TableContext, entries: Sequence[IndexManifestEntry],
            messages: Sequence[CommitMessage]) -> list[IndexManifestEntry]:
    """The index files after the messages' HASH files replace those of their buckets (the last
    message of a bucket wins: a retried commit's newer file holds the older one's keys too);
    CommitConflictError when a partition's HASH files are no longer those the messages started from."""
    updates = {(m.partition, m.bucket): m for m in messages if m.hash_index is not None}
    if not updates:
        return list(entries)
    live: dict[bytes, list[str]] = defaultdict(list)
    for e in entries:
        if e.file.index_type == HASH:
            live[e.partition].append(e.file.file_name)
    for m in updates.values():
        if tuple(sorted(live[m.partition])) != m.hash_base:
            raise CommitConflictError(
                f"another commit changed the dynamic-bucket HASH index of {ctx.describe_partition(m.partition)} "
                "since this writer assigned its rows to buckets; this commit is void (write its rows again)",
                table=ctx.name)
    kept = [e for e in entries if e.file.index_type != HASH or (e.partition, e.bucket) not in updates]
    return kept + [IndexManifestEntry(FileKind.ADD, p, b, m.hash_index)
                   for (p, b), m in updates.items() if m.hash_index is not None]
