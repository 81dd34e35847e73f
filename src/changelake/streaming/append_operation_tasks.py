"""What Spark's DELETE, UPDATE and MERGE INTO of an append table run in their tasks, on
executors (the driver's side is :mod:`.append_operations`). Nothing here talks to Spark: the
functions take and yield Arrow record batches, as ``mapInArrow`` hands them over.

The work is the one-process operation's (:mod:`changelake.table.append.row_level`), cut per
file: a task gets target files (each with its number among the operation's targets) and
returns, per file, an :class:`Outcome`: the file's rewritten copy (without deletion vectors),
or the edits the driver carries out per bucket (with deletion vectors: the positions to mark).
New rows (inserted, updated under deletion vectors, or moved to another partition or bucket)
are written by the tasks in an unaware table, where any writer may add files to a partition
(as the sink's tasks do); a fixed-bucket table's go to the driver, so that each bucket's new
rows are numbered by one writer.

A MERGE routes its source rows and the target files' rows by a hash of the ``on`` columns, so
the rows of a key meet in one task, which decides the clauses for them; its edits go on by
file (a file's rows may meet in many tasks), to the task that rewrites the file, and its
inserted rows to the driver.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from changelake.streaming import operation_tasks, write_tasks
from changelake.streaming.operation_tasks import SOURCE_SIDE, TABLE_SIDE
from changelake.table.append import merge as append_merge
from changelake.table.append import row_level
from changelake.table.append.row_level import FILE_COLUMN, POSITION_COLUMN, Edits, Rewritten, TargetFile
from changelake.table.append.writer import AppendWrite
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.write import merge_rows
from changelake.table.write.merge_rows import Clause

OUTCOME_DDL = "file int, outcome binary"
_OUTCOME_SCHEMA = pa.schema([pa.field("file", pa.int32()), pa.field("outcome", pa.binary())])
_TARGETS_SCHEMA = pa.schema([pa.field("file", pa.int32()), pa.field("target", pa.binary())])
# The file number a merge's inserted rows travel under: they belong to no target file.
INSERTED = -1


@dataclass(frozen=True)
class Outcome:
    """What a task did to, or plans for, one target file (or a merge's inserted rows): its
    rewritten copy, the edits left for the driver, and the messages of new rows it wrote."""

    rewritten: tuple[Rewritten, ...]
    edits: Edits
    messages: tuple[CommitMessage, ...] = ()


def targets_table(targets: Sequence[TargetFile]) -> pa.Table:
    """The rows a job over ``targets`` starts from: each file's number and the pickled file."""
    return pa.table({"file": pa.array(range(len(targets)), pa.int32()),
                     "target": pa.array([pickle.dumps(t) for t in targets], pa.binary())}, schema=_TARGETS_SCHEMA)


def _targets(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, TargetFile]]:
    for batch in batches:
        for index, blob in zip(batch.column("file").to_pylist(), batch.column("target").to_pylist(), strict=True):
            yield index, write_tasks.unpickled(blob, TargetFile)


def _outcome_batch(index: int, outcome: Outcome) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"file": index, "outcome": pickle.dumps(outcome)}], schema=_OUTCOME_SCHEMA)


def outcomes(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Outcome]]:
    """The file numbers and outcomes of rows ``file, outcome``."""
    for batch in batches:
        for index, blob in zip(batch.column("file").to_pylist(), batch.column("outcome").to_pylist(), strict=True):
            yield index, write_tasks.unpickled(blob, Outcome)


def _with_new_rows_written(ctx: TableContext, commit_user: str,
                           outcomes: Iterator[tuple[int, Outcome]]) -> Iterator[pa.RecordBatch]:
    """The ``outcomes`` as rows ``file, outcome``, their removed and replaced rows cut to their
    files and positions (only deletion vectors leave them to the driver, which marks them); in
    an unaware table, their new rows written here first (one more outcome, of file
    ``INSERTED``, holds the messages)."""
    if write_tasks.needs_shuffle(ctx):
        for index, outcome in outcomes:
            edits = outcome.edits
            marks = Edits([_positions(t) for t in edits.removed], [(_positions(o), n) for o, n in edits.replaced],
                          edits.inserted)
            yield _outcome_batch(index, Outcome(outcome.rewritten, marks, outcome.messages))
        return
    with AppendWrite(ctx, commit_user) as writer:
        for index, outcome in outcomes:
            edits = outcome.edits
            new = [*edits.inserted, *(n for _, n in edits.replaced),
                   *(r.moved for r in outcome.rewritten if r.moved is not None)]
            for rows in new:
                if rows.num_rows:
                    writer.write(rows)
            # With deletion vectors a replaced row is a marked one and a new one.
            left = Edits(removed=[_positions(t) for t in [*edits.removed, *(old for old, _ in edits.replaced)]])
            rewritten = tuple(dataclasses.replace(r, moved=None) for r in outcome.rewritten)
            if rewritten or left or outcome.messages:
                yield _outcome_batch(index, Outcome(rewritten, left, outcome.messages))
        # prepare() hands the files over to the messages: closing the writer deletes none of them.
        messages = tuple(writer.prepare())
    if messages:
        yield _outcome_batch(INSERTED, Outcome((), Edits(), messages))


def _positions(rows: pa.Table) -> pa.Table:
    """Which indexed rows ``rows`` are (all the driver needs to mark them deleted)."""
    return rows.select([FILE_COLUMN, POSITION_COLUMN])


def changed_files(ctx: TableContext, commit_user: str, row_filter: pc.Expression,
                  assignments: Mapping[str, Any] | None,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A DELETE's (``assignments`` None) or an UPDATE's work on the target files a task got
    (rows ``file, target``): per file holding a row ``row_filter`` matches, its rewritten
    copy, or with deletion vectors its edits."""
    written: list[str] = []

    def changed() -> Iterator[tuple[int, Outcome]]:
        for index, target in _targets(batches):
            if ctx.options.deletion_vectors_enabled:
                edits = row_level.matching_edits(ctx, target, index, row_filter, assignments)
                if edits:
                    yield index, Outcome((), edits)
                continue
            rewritten = row_level.rewrite_matching(ctx, target, row_filter, assignments, written)
            if rewritten is not None:
                yield index, Outcome((rewritten,), Edits())

    try:
        yield from _with_new_rows_written(ctx, commit_user, changed())
    except BaseException:
        ctx.file_io.discard(written)
        raise


def _grouped(ctx: TableContext, keys: Sequence[str], spread: int, side: int,
             rows: pa.Table) -> Iterator[pa.RecordBatch]:
    """``rows`` cut by a hash of their ``keys`` (in the table's types) into ``spread`` groups,
    as routed blobs (:func:`operation_tasks.blobs`)."""
    if rows.num_rows:
        groups = operation_tasks.hashed_groups(ctx, rows.combine_chunks().to_batches()[0], keys, spread)
        yield from operation_tasks.blobs(rows, side, groups)


def source_groups(ctx: TableContext, keys: Sequence[str], spread: int,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A merge's source rows, grouped by their ``keys`` as the target rows are."""
    for batch in batches:
        yield from _grouped(ctx, keys, spread, SOURCE_SIDE, pa.Table.from_batches([batch]))


def target_groups(ctx: TableContext, keys: Sequence[str], spread: int, row_filter: pc.Expression | None,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The live rows of the target files a task got (rows ``file, target``) that ``row_filter``
    passes, each with its file and position, grouped by their ``keys`` (a merge's table side)."""
    for index, target in _targets(batches):
        rows = row_level.indexed_file_rows(ctx, target, index, row_filter)
        yield from _grouped(ctx, keys, spread, TABLE_SIDE, rows)


def merge_groups(ctx: TableContext, commit_user: str, keys: Sequence[str], clauses: Sequence[Clause],
                 source_schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The clauses decided for the source and target rows a task got (every row of each of
    their groups): the edits per target file, and the inserted rows (file ``INSERTED``)."""
    sources, targets = operation_tasks.sides(batches)
    if not sources and not merge_rows.reads_unmatched(clauses):
        return
    source = pa.concat_tables(sources) if sources else source_schema.empty_table()
    # The driver checked the source; one that changed since (a source read anew) is caught here.
    merge_rows.check_unique(ctx, source, keys)
    target = pa.concat_tables(targets) if targets else row_level.indexed_schema(ctx).empty_table()
    edits = append_merge.edits_of(ctx, source, target, clauses, keys)
    decided = [(index, Outcome((), file_edits)) for index, file_edits in sorted(edits.by_file().items())]
    new_rows = [t for t in edits.inserted if t.num_rows]
    inserted = [(INSERTED, Outcome((), Edits(inserted=new_rows)))] if new_rows else []
    if ctx.options.deletion_vectors_enabled:
        yield from _with_new_rows_written(ctx, commit_user, iter(decided + inserted))
        return
    # The files' rewrites place the new values (rewrite_files); a replaced row's old values tell
    # them whether its new one stays in the file.
    for index, outcome in decided:
        yield _outcome_batch(index, Outcome((), Edits([_positions(t) for t in outcome.edits.removed],
                                                      outcome.edits.replaced)))
    yield from _with_new_rows_written(ctx, commit_user, iter(inserted))


def rewrite_files(ctx: TableContext, commit_user: str, targets: Sequence[TargetFile],
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Carry out a merge's edits of the files a task got (every edit of each, from rows
    ``file, outcome``): each file rewritten; inserted rows (or the messages of their files)
    passed on."""
    by_file: dict[int, Edits] = defaultdict(Edits)
    messages: list[CommitMessage] = []  # of the inserted rows merge_groups wrote
    for index, outcome in outcomes(batches):
        by_file[index].extend(outcome.edits)
        messages += outcome.messages
    written: list[str] = []

    def rewritten() -> Iterator[tuple[int, Outcome]]:
        for index, edits in sorted(by_file.items()):
            if index == INSERTED:
                yield index, Outcome((), edits, tuple(messages))
            else:
                yield index, Outcome((row_level.rewrite_edited(ctx, targets[index], edits, written),), Edits())

    try:
        yield from _with_new_rows_written(ctx, commit_user, rewritten())
    except BaseException:
        ctx.file_io.discard(written)
        raise
