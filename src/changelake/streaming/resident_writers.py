"""Table writers that outlive a Spark task in its Python worker, as Paimon's streaming writers
live across checkpoints.

Spark reuses a Python worker process for later tasks (a one-partition micro-batch's task lands
in the same worker batch after batch). When a table's lookup compactions may land with a later
commit than the rows they move up (``lookup-wait=false``), the sink keeps its writer there
between micro-batches: its compactions run in the background while Spark prepares the next
batch, and their results (with the ``lookup`` producer's changelog) go with the first later
batch whose task finds the writer, instead of every batch waiting for its own. Before it
writes, a writer forgets each bucket whose committed files are not those it prepared (that
batch did not land, or another task or writer committed there since), with the compaction
running there: what it commits is always on top of the table as it is. Results a writer never
hands over (its worker stops, it is evicted) are orphan files, as a Paimon job's when it is
cancelled.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from changelake.table.changelog_hook import ChangelogHook
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.io.paths import TablePaths
from changelake.table.lsm import compactor as compaction
from changelake.table.write.writer import TableWrite


def lives_on(ctx: TableContext, changelog: ChangelogHook) -> bool:
    """Whether a streaming write's writer stays in its worker between micro-batches: a
    fixed-bucket primary-key table that moves level 0 up with lookups (the ``lookup`` producer,
    deletion vectors, first-row) and whose commits do not wait for that (``lookup-wait=false``);
    not write-only, and no full compaction every N commits (that counts the table's commits,
    not one worker's). Any other table's micro-batch waits for its compactions, as Paimon's
    Spark writers do, and leaves nothing running when its query stops."""
    options = ctx.options
    return (ctx.kind is TableKind.PRIMARY_KEY and options.bucket > 0 and not options.write_only
            and not options.lookup_wait and compaction.forces_level0_up(ctx, changelog)
            and options.full_compaction_delta_commits is None and changelog.full_compaction_delta_commits is None)


class ResidentWriters:
    """The writers kept in this process, per (table, commit user); at most ``capacity``, the
    least recently used closed beyond it (its uncommitted compactions dropped)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._writers: OrderedDict[tuple[TablePaths, str], TableWrite] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, ctx: TableContext, commit_user: str) -> TableWrite | None:
        """The writer kept for the table and user (now the caller's until :meth:`keep`), if it
        writes the same schema and options; None otherwise."""
        with self._lock:
            write = self._writers.pop((ctx.paths, commit_user), None)
        if write is not None and not _same_table(write.ctx, ctx):
            write.close()
            return None
        return write

    def keep(self, write: TableWrite) -> None:
        """Keep ``write`` for the next task of its table and user."""
        with self._lock:
            self._writers[(write.ctx.paths, write.commit_user)] = write
            evicted = [self._writers.popitem(last=False)[1] for _ in range(len(self._writers) - self.capacity)]
        for old in evicted:
            old.close()

    def clear(self) -> None:
        """Close every writer kept (their uncommitted work dropped)."""
        with self._lock:
            writers, self._writers = list(self._writers.values()), OrderedDict()
        for write in writers:
            write.close()

    def __len__(self) -> int:
        return len(self._writers)


def _same_table(kept: TableContext, ctx: TableContext) -> bool:
    """Whether a writer of ``kept`` writes ``ctx`` as it is now: same schema (options included)
    and store."""
    return kept.schema == ctx.schema and kept.file_io.protocol == ctx.file_io.protocol \
        and kept.file_io.storage_options == ctx.file_io.storage_options


RESIDENT_WRITERS = ResidentWriters(capacity=8)
