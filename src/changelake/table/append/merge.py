"""``MERGE INTO`` an append table (Paimon's ``MergeIntoPaimonTable`` on a table without a
primary key): source rows are matched to the table's rows by the columns ``on`` names, the
clauses decide each row as on a primary-key table (:mod:`changelake.table.write.merge_rows`),
and the outcome lands as one OVERWRITE snapshot: matched rows deleted or updated where they
are (their files rewritten, or marked in deletion vectors with the updated rows written anew),
inserted rows written as new files (:mod:`changelake.table.append.row_level`)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from changelake.table.append import row_level
from changelake.table.append.row_level import FILE_COLUMN, POSITION_COLUMN, Edits
from changelake.table.context import TableContext
from changelake.table.format.snapshot import Snapshot
from changelake.table.write import merge_rows
from changelake.table.write.merge_rows import SOURCE, TARGET, Clause, MergeAction


def merge(ctx: TableContext, source: pa.Table, clauses: Sequence[Clause], on: Sequence[str] | None,
          commit_user: str) -> Snapshot | None:
    """Carry out ``clauses`` for ``source`` matched on the columns ``on``; None when no row
    changes."""
    keys = merge_rows.merge_keys(ctx, on)
    merge_rows.check(ctx, source.column_names, clauses, keys)
    merge_rows.check_unique(ctx, source, keys)
    latest = ctx.latest_snapshot()
    row_filter = merge_rows.key_filter(ctx, source, clauses, keys)
    targets = [] if latest is None else row_level.target_files(ctx, latest, row_filter)
    target = row_level.indexed_rows(ctx, targets, row_filter)
    return row_level.commit_edits(ctx, latest, targets, edits_of(ctx, source, target, clauses, keys), commit_user)


def edits_of(ctx: TableContext, source: pa.Table, target: pa.Table, clauses: Sequence[Clause],
             keys: Sequence[str]) -> Edits:
    """What ``clauses`` do to the indexed ``target`` rows (every row a key of ``source`` or a
    clause on unmatched rows may touch) and the ``source`` rows matched on ``keys``."""
    edits = Edits()
    for clause, rows in merge_rows.decide(ctx, source, target, clauses, keys):
        if clause.action is MergeAction.INSERT:
            edits.inserted.append(merge_rows.new_rows(ctx, rows, clause.values, SOURCE, source.column_names,
                                                      fallback=None))
            continue
        old = merge_rows.old_rows(ctx, rows).append_column(FILE_COLUMN, rows.column(f"{TARGET}.{FILE_COLUMN}")) \
            .append_column(POSITION_COLUMN, rows.column(f"{TARGET}.{POSITION_COLUMN}"))
        if clause.action is MergeAction.DELETE:
            edits.removed.append(old)
        else:
            base = TARGET if clause.values is not None else SOURCE
            edits.replaced.append((old, merge_rows.new_rows(ctx, rows, clause.values, base, source.column_names,
                                                            fallback=TARGET)))
    return edits
