"""Which bucket an overwrite's rows go to, in every bucket mode. The partitions an overwrite
replaces start empty, so their keys are placed as in a new table:

* fixed buckets: Paimon's hash of the bucket key;
* dynamic buckets: a fresh HASH index per partition, filled as Paimon's assigner fills a new
  partition (``dynamic-bucket.target-row-num`` keys a bucket, lowest ids first), whose files the
  OVERWRITE snapshot lists in place of the partition's old ones;
* cross-partition tables: the same fill, without HASH files (Paimon keeps none: the key index is
  bootstrapped from the data, and the OVERWRITE snapshot makes writers bootstrap it again), each
  key in one partition: rows of a key in several partitions move, stay or are dropped by the
  merge engine as a write's into an empty table;
* postpone-bucket tables: real buckets, as a fixed-bucket batch write places them (the number a
  partition has, else one for its size), so that readers see the rows at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import bucket
from changelake.table.write import postpone
from changelake.table.write.assigners import BucketAssigner, CrossPartitionBuckets, DynamicBuckets, FixedBuckets
from changelake.table.write.assigners.base import Stateless
from changelake.table.write.partitions import partition_groups


@dataclass(frozen=True)
class PlannedBuckets(Stateless):
    """A postpone-bucket table's rows in real buckets: each partition's number in ``plan``."""

    ctx: TableContext
    plan: dict[bytes, int]

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        counts = np.array([self.plan[p] for p in partitions], dtype=np.int64)[partition_of_row]
        return bucket.buckets([data.column(k) for k in self.ctx.bucket_key], counts).astype(np.int64)


@dataclass
class Placement:
    """How an overwrite places its rows: the assigner, each partition's number of buckets as
    its files record it, and what the messages need once the files are written."""

    ctx: TableContext
    assigner: BucketAssigner | PlannedBuckets

    @staticmethod
    def of(ctx: TableContext, rows: pa.Table, *, plan: Mapping[bytes, int] | None = None) -> Placement:
        """The placement of ``rows`` (conformed) in the table's bucket mode; a postpone-bucket
        table's in the real buckets ``plan`` gives each partition (default: planned from
        ``rows``)."""
        if ctx.options.bucket >= 1:
            return Placement(ctx, FixedBuckets(ctx))
        if postpone.is_postpone(ctx):
            if plan is None:
                sizes = postpone.partition_sizes(rows, partition_groups(ctx, rows.select(ctx.partition_keys)))
                plan = postpone.fixed_bucket_plan(ctx, sizes)
            return Placement(ctx, PlannedBuckets(ctx, dict(plan)))
        if ctx.cross_partition:
            return Placement(ctx, CrossPartitionBuckets(ctx, fresh=True))
        return Placement(ctx, DynamicBuckets(ctx, fresh=True))

    def total_buckets(self, partition: bytes) -> int:
        """The number of buckets the files of ``partition`` record (``bucket``; a postpone
        table's partition: its real buckets)."""
        if isinstance(self.assigner, PlannedBuckets):
            return self.assigner.plan[partition]
        return self.ctx.options.bucket

    def finish(self, messages: list[CommitMessage]) -> list[CommitMessage]:
        """The messages with the new HASH index files of a dynamic-bucket table (none on a
        cross-partition table)."""
        if not isinstance(self.assigner, DynamicBuckets):
            return messages  # Paimon keeps no HASH files for a cross-partition table
        return self.assigner.prepare(messages)

    def abandon(self) -> None:
        """Delete what the placement wrote for messages that will not land."""
        if isinstance(self.assigner, DynamicBuckets):
            self.assigner.forget()
