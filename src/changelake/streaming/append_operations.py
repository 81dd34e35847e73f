"""DELETE, UPDATE and MERGE INTO of an append table on Spark (the driver's side; the tasks'
is :mod:`.append_operation_tasks`): the one-process operations of
:mod:`changelake.table.append.row_level` spread over a cluster, landing the same OVERWRITE
snapshot.

The driver plans the target files from the latest snapshot (pruned by the predicate), one row
of a small DataFrame each. Without deletion vectors, the tasks rewrite the files holding
touched rows and return their copies; with deletion vectors, they return the positions to
mark and the new values. A MERGE first routes its source rows and the files' rows by a hash of
the ``on`` columns, decides the clauses where a key's rows meet, and sends each file's edits
on to one task. The driver then does what is per bucket or whole: it writes the deletion
vectors' index files and, in a fixed-bucket table, the new rows (updated rows that move to
another partition or bucket, updated rows under deletion vectors, inserted rows; an unaware
table's tasks write their own), and commits one OVERWRITE snapshot
(:func:`row_level.land_edits`), as (commit user, identifier) so that a replayed batch lands
nothing. A commit that rewrote or compacted a target file meanwhile voids it
(CommitConflictError), and the files it wrote are deleted.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from changelake.streaming import append_operation_tasks as tasks
from changelake.streaming import sink
from changelake.streaming.append_operation_tasks import OUTCOME_DDL, Outcome
from changelake.streaming.maintenance import max_tasks
from changelake.streaming.operation_tasks import ROUTED_DDL
from changelake.table import snapshot_expiry
from changelake.table.append import row_level
from changelake.table.append.row_level import Edits, TargetFile
from changelake.table.context import TableContext
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.write import merge_rows
from changelake.table.write.merge_rows import Clause


def change_files(spark: SparkSession, ctx: TableContext, row_filter: pc.Expression,
                 assignments: Mapping[str, Any] | None, commit_user: str, identifier: int) -> Snapshot | None:
    """Delete (``assignments`` None) or update the rows ``row_filter`` matches in the latest
    snapshot, as one OVERWRITE committed as (``commit_user``, ``identifier``); None when no row
    matches (or that had landed)."""
    base = ctx.latest_snapshot()
    targets = [] if base is None else row_level.target_files(ctx, base, row_filter)
    if base is None or not targets:
        return None
    run = functools.partial(tasks.changed_files, ctx, commit_user, row_filter,
                            None if assignments is None else dict(assignments))
    changed = _targets_frame(spark, targets).mapInArrow(run, OUTCOME_DDL)
    return _land(ctx, base, targets, _collect(changed), commit_user, identifier)


def merge(source: DataFrame, ctx: TableContext, keys: Sequence[str], clauses: Sequence[Clause],
          source_schema: pa.Schema, commit_user: str, identifier: int) -> Snapshot | None:
    """Carry out ``clauses`` for the rows of ``source`` (checked: no two rows of one key)
    matched to the latest snapshot's rows on the columns ``keys``, as one OVERWRITE committed
    as (``commit_user``, ``identifier``); None when no row changes."""
    spark = source.sparkSession
    base = ctx.latest_snapshot()
    row_filter = None
    if not merge_rows.reads_unmatched(clauses):
        rows, row_filter = _key_ranges(ctx, source, keys)
        if not rows:
            return None  # no source row: nothing is decided
    targets = [] if base is None else row_level.target_files(ctx, base, row_filter)
    spread = max_tasks(spark)
    grouped = source.mapInArrow(functools.partial(tasks.source_groups, ctx, list(keys), spread), ROUTED_DDL)
    if targets:
        table_side = _targets_frame(spark, targets).mapInArrow(
            functools.partial(tasks.target_groups, ctx, list(keys), spread, row_filter), ROUTED_DDL)
        grouped = grouped.unionByName(table_side)
    decided = grouped.repartition(F.col("group")).mapInArrow(
        functools.partial(tasks.merge_groups, ctx, commit_user, list(keys), list(clauses), source_schema),
        OUTCOME_DDL)
    if not ctx.options.deletion_vectors_enabled:
        # A file's edits come from every task that decided one of its keys: one task rewrites it.
        decided = decided.repartition(F.col("file")).mapInArrow(
            functools.partial(tasks.rewrite_files, ctx, commit_user, targets), OUTCOME_DDL)
    return _land(ctx, base, targets, _collect(decided), commit_user, identifier)


def _key_ranges(ctx: TableContext, source: DataFrame, keys: Sequence[str]) -> tuple[int, pc.Expression | None]:
    """How many rows ``source`` has, and a filter every table row a key of it may match
    passes: each key column (of an integer, string or date type, and without nulls in the
    source) between the source's least and greatest value of it, which prunes files by their
    statistics (the one-process merge filters by the source's very keys, which only the tasks
    see here); None when no column bounds the keys."""
    ranged = [k for k in keys if _rangeable(ctx.arrow_schema.field(k).type)]
    columns = [F.count(F.lit(1)).alias("rows")]
    for i, k in enumerate(ranged):
        column = sink.column(k)
        columns += [F.min(column).alias(f"min{i}"), F.max(column).alias(f"max{i}"),
                    F.count(F.when(column.isNull(), 1)).alias(f"nulls{i}")]
    found = source.agg(*columns).collect()[0]
    terms = []
    for i, k in enumerate(ranged):
        if found[f"nulls{i}"]:
            continue
        kind = ctx.arrow_schema.field(k).type
        try:
            least, greatest = pc.scalar(found[f"min{i}"]).cast(kind), pc.scalar(found[f"max{i}"]).cast(kind)
        except pa.ArrowInvalid:
            continue  # a value the column cannot hold: the tasks refuse it, naming the column
        terms.append((pc.field(k) >= least) & (pc.field(k) <= greatest))
    if not terms:
        return int(found["rows"]), None
    expression = terms[0]
    for term in terms[1:]:
        expression = expression & term
    return int(found["rows"]), expression


def _rangeable(kind: pa.DataType) -> bool:
    """Whether Spark's least and greatest values of a column of the table's type ``kind`` come
    back as the same values (no time zone or precision in between)."""
    return bool(pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind) or
                pa.types.is_date32(kind))


def _targets_frame(spark: SparkSession, targets: Sequence[TargetFile]) -> DataFrame:
    """A DataFrame of the numbered, pickled ``targets``, spread over up to ``max_tasks`` tasks."""
    frame = spark.createDataFrame(tasks.targets_table(targets))
    return frame.repartition(max(1, min(max_tasks(spark), len(targets))))


def _collect(outcomes: DataFrame) -> list[Outcome]:
    """Run the job whose rows are the tasks' outcomes and collect them on the driver."""
    return [outcome for _, outcome in tasks.outcomes(iter(outcomes.toArrow().to_batches()))]


def _land(ctx: TableContext, base: Snapshot | None, targets: list[TargetFile], outcomes: list[Outcome],
          commit_user: str, identifier: int) -> Snapshot | None:
    """Commit the tasks' ``outcomes`` as one OVERWRITE snapshot; None when they change nothing
    (or the identifier had landed)."""
    rewritten = [r for o in outcomes for r in o.rewritten]
    messages = [m for o in outcomes for m in o.messages]
    edits = Edits()
    for outcome in outcomes:
        edits.extend(outcome.edits)
    killpoints.reached(KillPoint.SINK_WRITTEN)
    if not rewritten and not edits and not messages:
        return None
    landed = row_level.land_edits(ctx, base, targets, rewritten, edits, commit_user, identifier, messages=messages)
    if landed is not None:
        snapshot_expiry.expire_after_commit(ctx)
    return landed
