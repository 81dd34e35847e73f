"""Row-level DELETE and UPDATE of append tables, as Paimon runs them without deletion vectors:
each file holding a row the predicate matches is rewritten into its bucket, without those rows
or with their new values, its rows keeping their order and sequence numbers; the files are
replaced in one OVERWRITE snapshot (Paimon commits a delta that deletes files as OVERWRITE).

The rewrite reads the latest snapshot; a commit that rewrote or compacted one of its files
meanwhile makes it fail with CommitConflictError (run it again), and appends of new files
meanwhile are kept (they were not read, so they are not matched: the later commit wins).
Tables with deletion vectors are refused: their rewrite would have to apply and drop them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from changelake.errors import OptionError
from changelake.table.commit import overwrite
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file
from changelake.table.format.manifest import ManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.read import live_files
from changelake.table.write import row_level

# A file's rows and which of them match, to the rows that replace them.
_Change = Callable[[pa.Table, pa.ChunkedArray], pa.Table]


def delete(ctx: TableContext, predicate: pc.Expression | str, commit_user: str) -> Snapshot | None:
    """Delete the rows ``predicate`` matches; None when it matches none."""
    return _rewrite(ctx, predicate, lambda rows, matched: rows.filter(pc.invert(matched)), commit_user)


def update(ctx: TableContext, predicate: pc.Expression | str, assignments: Mapping[str, Any],
           commit_user: str) -> Snapshot | None:
    """Set the ``assignments`` on the rows ``predicate`` matches; None when it matches none."""
    row_level.check_assignments(ctx, assignments)
    return _rewrite(ctx, predicate, lambda rows, matched: row_level.updated(ctx, rows, assignments, matched),
                    commit_user)


def _rewrite(ctx: TableContext, predicate: pc.Expression | str, change: _Change,
             commit_user: str) -> Snapshot | None:
    if ctx.options.deletion_vectors_enabled:
        raise OptionError("changelake does not yet delete or update rows of append tables with deletion vectors",
                          table=ctx.name, option="deletion-vectors.enabled")
    row_filter = row_level.predicate_of(ctx, predicate)
    latest = ctx.latest_snapshot()
    if latest is None:
        return None
    written: list[str] = []

    def rewrite(entry: ManifestEntry) -> tuple[ManifestEntry, CommitMessage] | None:
        bucket_dir = ctx.bucket_dir(entry.partition, entry.bucket)
        rows = ctx.read_file(bucket_dir, entry.file)
        matched = ds.dataset(rows).to_table(columns={"m": row_filter}).column("m").fill_null(fill_value=False)
        if not pc.any(matched).as_py():
            return None
        kept = change(rows, matched)
        files = data_file.write(ctx.file_io, bucket_dir, [kept] if kept.num_rows else [], ctx.file_settings,
                                entry.file.level, first_sequence=entry.file.min_sequence_number)
        written.extend(f"{bucket_dir}/{f.file_name}" for f in files)
        return entry, CommitMessage(entry.partition, entry.bucket, entry.total_buckets, new_files=tuple(files))

    try:
        done = [r for r in map_all(rewrite, live_files.live_entries(ctx, latest)) if r is not None]
    except BaseException:
        ctx.file_io.discard(written)
        raise
    if not done:
        return None
    return overwrite.commit_rewrite(ctx, [entry for entry, _ in done], [m for _, m in done], commit_user)
