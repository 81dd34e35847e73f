"""Paimon's table operations on Spark: ``DELETE``, ``UPDATE``, ``MERGE INTO`` and
``INSERT OVERWRITE`` of a table, the reads and writes on the executors and one commit on the
driver, as :meth:`Table.delete`, :meth:`Table.update`, :meth:`Table.merge` and
:meth:`Table.overwrite` do in one process (same rules, same snapshots).

DELETE and UPDATE plan the latest snapshot's splits (pruned by the predicate) on the driver;
each task reads its splits' merged rows, keeps those the predicate matches and turns them into
-D (or -U/+U) rows; a shuffle by write group (see :mod:`.operation_tasks`) hands each bucket's
rows to one task, which writes them as a micro-batch of the sink is written. MERGE routes the
source DataFrame's rows and the table's rows by the same groups, so each task joins the rows
of its keys and writes the outcome. INSERT OVERWRITE writes each bucket's rows, merged among
themselves, at the top level, and the driver commits one OVERWRITE snapshot.

On an append table, DELETE, UPDATE and MERGE (``on=[...]``) rewrite the files holding
touched rows, or mark them in deletion vectors, on the executors and land one OVERWRITE
snapshot, as the one-process operations do: see :mod:`.append_operations`.

Exactly once inside ``foreachBatch``: given ``batch_id``, an operation commits as (the
streaming query's id, or ``commit_user``; the batch id), as the sink does, so a batch Spark
replays after a crash lands once. One table takes one such operation (or sink write) per batch
and commit user: a second one with the same pair is taken for a replay and skipped. Without
``batch_id`` an operation is a batch commit of its own. Everything works over Spark Connect
(give ``checkpoint_location`` there, as to the sink, or ``commit_user``).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from changelake.api.merge import Merge
from changelake.api.table import Table
from changelake.changelog import producers
from changelake.errors import DataError, OptionError, StreamingError
from changelake.streaming import append_operations, operation_tasks, write_tasks
from changelake.streaming.arrow_batches import collected
from changelake.streaming.maintenance import max_tasks
from changelake.streaming.operation_tasks import ROUTED_DDL
from changelake.streaming.sink import (
    as_table,
    as_table_timestamps,
    column,
    fixed_bucket_plan,
    in_planned_buckets,
    land_written,
    query_id,
)
from changelake.streaming.spark_schema import arrow_schema
from changelake.streaming.write_tasks import BUCKET_COLUMN, MESSAGE_COLUMN
from changelake.table import snapshot_expiry
from changelake.table.append import merge as append_merge
from changelake.table.append import row_level as append_rows
from changelake.table.commit import overwrite as overwrite_commit
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import planner
from changelake.table.read.planner import Split
from changelake.table.write import conform, landing, merge_rows, overwrite_rows, postpone, row_level
from changelake.table.write.merge_rows import Clause

_ROWS_OF_KEY = "_changelake_rows"


@dataclass(frozen=True)
class _Committer:
    """Who an operation commits as: (commit user, identifier)."""

    batch_id: int | None
    commit_user: str | None
    checkpoint_location: str | None

    def identity(self, session: SparkSession, table: Table) -> tuple[str, int]:
        if self.batch_id is None:
            return self.commit_user or str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER
        if self.batch_id < 0:
            raise StreamingError(f"batch_id must be a micro-batch's id (0 or more), not {self.batch_id}",
                                 table=table.name)
        return self.commit_user or query_id(session, table, self.checkpoint_location), self.batch_id


def delete(spark: SparkSession, table: Table | str, predicate: pc.Expression | str, *,
           batch_id: int | None = None, commit_user: str | None = None,
           checkpoint_location: str | None = None) -> Snapshot | None:
    """Delete the rows of ``table`` that ``predicate`` matches (a ``pyarrow.compute``
    expression or SQL-like text), on Spark's executors, as one commit (of -D rows; on an append
    table an OVERWRITE): :meth:`Table.delete` spread over a cluster. ``batch_id`` (and
    ``commit_user`` or ``checkpoint_location``) make it land once per micro-batch inside
    ``foreachBatch`` (see the module's docstring). None when nothing matches (or the batch had landed)."""
    target = as_table(table)
    ctx = target.context
    if ctx.kind is not TableKind.APPEND:
        row_level.check_engine(ctx, "delete")
    row_filter = row_level.predicate_of(ctx, predicate)
    who = _Committer(batch_id, commit_user, checkpoint_location)
    if ctx.kind is TableKind.APPEND:
        return _change_files(spark, target, row_filter, None, who)
    return _change_rows(spark, target, row_filter, row_level.delete_rows, who)


def update(spark: SparkSession, table: Table | str, predicate: pc.Expression | str, *, set: Mapping[str, Any],
           batch_id: int | None = None, commit_user: str | None = None,
           checkpoint_location: str | None = None) -> Snapshot | None:
    """Set columns of the rows of ``table`` that ``predicate`` matches, on Spark's executors,
    as one commit (of -U/+U rows; on an append table an OVERWRITE): :meth:`Table.update` spread
    over a cluster (``set`` maps a column to a value or a ``pyarrow.compute`` expression over
    the old row).
    ``batch_id`` as for :func:`delete`. None when nothing matches (or the batch had landed)."""
    target = as_table(table)
    ctx = target.context
    if ctx.kind is not TableKind.APPEND:
        row_level.check_engine(ctx, "update")
    row_level.check_assignments(ctx, set)
    row_filter = row_level.predicate_of(ctx, predicate)
    # The new values are checked on the driver, on no rows, before any task runs.
    row_level.updated(ctx, ctx.arrow_schema.empty_table(), set)
    who = _Committer(batch_id, commit_user, checkpoint_location)
    if ctx.kind is TableKind.APPEND:
        return _change_files(spark, target, row_filter, set, who)
    change = functools.partial(row_level.update_rows, ctx, assignments=dict(set))
    return _change_rows(spark, target, row_filter, change, who)


def _change_rows(spark: SparkSession, table: Table, row_filter: pc.Expression,
                 change: Callable[[pa.Table], pa.Table], who: _Committer) -> Snapshot | None:
    ctx = table.context
    commit_user, identifier = who.identity(spark, table)
    if landing.replayed(ctx, producers.for_table(ctx), commit_user, identifier):
        return None
    snapshot = ctx.latest_snapshot()
    splits = [] if snapshot is None else planner.plan(ctx, snapshot, row_filter, planner.batch_levels(ctx))
    if not splits:
        return None
    spread = max_tasks(spark)
    changes = _splits_frame(spark, splits, spread).mapInArrow(
        functools.partial(operation_tasks.changed_rows, ctx, row_filter, change, spread), ROUTED_DDL)
    return _write_routed(ctx, changes, commit_user, identifier)


def _change_files(spark: SparkSession, table: Table, row_filter: pc.Expression, assignments: Mapping[str, Any] | None,
                  who: _Committer) -> Snapshot | None:
    ctx = table.context
    commit_user, identifier = who.identity(spark, table)
    if landing.replayed(ctx, producers.for_table(ctx), commit_user, identifier):
        return None
    return append_operations.change_files(spark, ctx, row_filter, assignments, commit_user, identifier)


def _splits_frame(spark: SparkSession, splits: list[Split], spread: int) -> DataFrame:
    """A DataFrame of the pickled ``splits``, spread over up to ``spread`` tasks."""
    frame = spark.createDataFrame(operation_tasks.splits_table(splits))
    return frame.repartition(max(1, min(spread, len(splits))))


def _write_routed(ctx: TableContext, routed: DataFrame, commit_user: str, identifier: int) -> Snapshot | None:
    """Write routed rows (each group in one task) and commit them as one."""
    grouped = routed.repartition(F.col("partition"), F.col("group"))
    written = grouped.mapInArrow(functools.partial(operation_tasks.write_routed, ctx, commit_user),
                                 f"{MESSAGE_COLUMN} binary")
    landed = land_written(ctx, producers.for_table(ctx), written, commit_user, identifier)
    return landed[0] if landed else None


def merge(df: DataFrame, table: Table | str, *, on: Sequence[str] | None = None, batch_id: int | None = None,
          commit_user: str | None = None, checkpoint_location: str | None = None) -> Merge:
    """MERGE INTO ``table`` from the rows of ``df``, matched by the primary key (an append
    table's by the columns ``on`` names), on Spark's executors: the clauses of
    :meth:`Table.merge`
    (``streaming.merge(df, table).when_matched_update().when_not_matched_insert().execute()``),
    carried out as one commit (an append table's as one OVERWRITE). A source with two rows of
    one key is a DataError, found before anything is written. ``on``, if given, must name a
    primary-key table's primary key. ``batch_id`` as for
    :func:`delete` (a ``foreachBatch`` upsert)."""
    target = as_table(table)
    ctx = target.context
    keys = merge_rows.merge_keys(ctx, on)
    who = _Committer(batch_id, commit_user, checkpoint_location)
    return Merge(functools.partial(_merge, df, target, keys, who))


def _merge(df: DataFrame, table: Table, keys: list[str], who: _Committer,
           clauses: tuple[Clause, ...]) -> Snapshot | None:
    ctx = table.context
    merge_rows.check(ctx, df.columns, clauses, keys)
    source = as_table_timestamps(df, ctx)
    source_schema = arrow_schema(source.schema)
    # Conditions and new values are checked on the driver, on no rows, before any task runs.
    if ctx.kind is TableKind.APPEND:
        append_merge.edits_of(ctx, source_schema.empty_table(), append_rows.indexed_schema(ctx).empty_table(),
                              clauses, keys)
    else:
        merge_rows.changes(ctx, source_schema.empty_table(), ctx.arrow_schema.empty_table(), clauses)
    commit_user, identifier = who.identity(df.sparkSession, table)
    if landing.replayed(ctx, producers.for_table(ctx), commit_user, identifier):
        return None
    # The source is read by several jobs (its duplicate keys, its partitions or key ranges, the
    # merge): kept after the first, not computed again (a micro-batch from its source each time).
    source.persist()
    try:
        _check_unique(ctx, source, keys)
        if ctx.kind is TableKind.APPEND:
            return append_operations.merge(source, ctx, keys, clauses, source_schema, commit_user, identifier)
        return _merge_by_key(source, ctx, clauses, source_schema, commit_user, identifier)
    finally:
        source.unpersist()


def _merge_by_key(source: DataFrame, ctx: TableContext, clauses: tuple[Clause, ...], source_schema: pa.Schema,
                  commit_user: str, identifier: int) -> Snapshot | None:
    """A primary-key table's merge, its source checked: see the module's docstring."""
    snapshot = ctx.latest_snapshot()
    splits = [] if snapshot is None else planner.plan(ctx, snapshot, None, planner.batch_levels(ctx))
    if splits and not merge_rows.reads_unmatched(clauses) and ctx.partition_keys and not ctx.cross_partition:
        # Only the source's keys can match, and a key lives in its own partition.
        wanted = _partitions_of(ctx, source)
        splits = [s for s in splits if s.partition in wanted]
    spread = max_tasks(source.sparkSession)
    routed = source.mapInArrow(functools.partial(operation_tasks.source_rows, ctx, spread), ROUTED_DDL)
    if splits:
        table_side = _splits_frame(source.sparkSession, splits, spread).mapInArrow(
            functools.partial(operation_tasks.table_rows, ctx, spread), ROUTED_DDL)
        routed = routed.unionByName(table_side)
    grouped = routed.repartition(F.col("partition"), F.col("group"))
    written = grouped.mapInArrow(
        functools.partial(operation_tasks.merge_groups, ctx, commit_user, clauses, source_schema),
        f"{MESSAGE_COLUMN} binary")
    landed = land_written(ctx, producers.for_table(ctx), written, commit_user, identifier)
    return landed[0] if landed else None


def _check_unique(ctx: TableContext, source: DataFrame, keys: Sequence[str]) -> None:
    """DataError, before any task writes, for a source with two rows of one key (``keys``)."""
    counted = source.groupBy(*[column(k) for k in keys]).agg(F.count(F.lit(1)).alias(_ROWS_OF_KEY))
    duplicated = counted.where(F.col(_ROWS_OF_KEY) > 1)
    found = duplicated.agg(F.count(F.lit(1)).alias("keys"), F.first(F.struct(*[column(k) for k in keys]))
                           .alias("first")).collect()[0]
    if found["keys"]:
        raise merge_rows.duplicate_keys(ctx, int(found["keys"]), found["first"].asDict())


def _partitions_of(ctx: TableContext, source: DataFrame) -> set[bytes]:
    """The partitions (serialized) the rows of ``source`` are in."""
    sizes = source.mapInArrow(functools.partial(write_tasks.partition_sizes, ctx),
                              "partition binary, rows long, bytes long")
    return {bytes(row["partition"]) for row in sizes.select("partition").distinct().collect()}


def overwrite(df: DataFrame, table: Table | str, *, partitions: Mapping[str, Any] | None = None,
              batch_id: int | None = None, commit_user: str | None = None,
              checkpoint_location: str | None = None) -> Snapshot | None:
    """Replace rows of ``table`` with the rows of ``df`` as one OVERWRITE snapshot (Paimon's
    ``INSERT OVERWRITE``), written on Spark's executors: the partitions :meth:`Table.overwrite`
    replaces (``partitions``, a static partition; else the partitions ``df`` is in under
    ``dynamic-partition-overwrite``; else the whole table). Rows outside a static partition are
    a DataError, with nothing committed. ``batch_id`` as for :func:`delete`. None when there was
    nothing to replace (or the batch had landed)."""
    target = as_table(table)
    ctx = target.context
    overwrite_rows.check(ctx, partitions)
    if ctx.cross_partition and (partitions is not None or ctx.options.dynamic_partition_overwrite):
        # A key lives in one partition: replacing some would need every kept partition's keys.
        raise OptionError("on Spark a cross-partition table is overwritten whole (dynamic-partition-overwrite "
                          "false, no partitions); table.overwrite() replaces some of its partitions",
                          table=ctx.name, option="dynamic-partition-overwrite")
    conform.check_columns(ctx, df.columns)
    if partitions is not None:
        ctx.partition_of(partitions)  # a ScanError for keys or values that are not the table's
    commit_user, identifier = _Committer(batch_id, commit_user, checkpoint_location).identity(df.sparkSession, target)
    if landing.replayed(ctx, producers.for_table(ctx), commit_user, identifier):
        return None
    rows = as_table_timestamps(df, ctx)
    plan = None
    if postpone.is_postpone(ctx):  # real buckets, planned from the rows' sizes, whole in one task each
        plan = fixed_bucket_plan(rows, ctx)
        rows = in_planned_buckets(rows, ctx, plan)
    elif write_tasks.needs_shuffle(ctx):
        bucketed_schema = StructType([*rows.schema.fields, StructField(BUCKET_COLUMN, IntegerType(), nullable=False)])
        bucketed = rows.mapInArrow(functools.partial(write_tasks.add_bucket, ctx), bucketed_schema)
        # A cross-partition key's rows of every partition meet in its assigner's task, which
        # keeps the key in one partition.
        by = [] if ctx.cross_partition else [column(k) for k in ctx.partition_keys]
        rows = bucketed.repartition(*by, F.col(BUCKET_COLUMN))
    write_groups = functools.partial(operation_tasks.overwrite_groups, ctx, plan)
    results = [operation_tasks.overwrite_result(row[MESSAGE_COLUMN])
               for row in collected(rows.mapInArrow(write_groups, f"{MESSAGE_COLUMN} binary"))]
    killpoints.reached(KillPoint.SINK_WRITTEN)
    messages = [m for r in results for m in r.messages]
    try:
        chosen, rule = overwrite_rows.targets(ctx, {p for r in results for p in r.partitions}, partitions)
    except DataError:
        ctx.file_io.discard([path for m in messages for path in m.written(ctx)])
        raise
    if not chosen:
        return None
    landed = overwrite_commit.commit_overwrite(ctx, rule, messages, commit_user, identifier, base=None)
    if landed is not None:
        snapshot_expiry.expire_after_commit(ctx)
    return landed
