"""Bucket assigners: which bucket each written row goes to, one implementation per bucket mode
(:class:`FixedBuckets` hashes the bucket key, :class:`DynamicBuckets` follows each partition's
HASH index, :class:`CrossPartitionBuckets` follows the key index of a table whose primary key
lacks a partition column, :class:`PostponeBuckets` leaves every row in ``bucket-postpone/``),
chosen once per writer by :func:`for_table`."""

from __future__ import annotations

from changelake.errors import OptionError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.context import TableContext
from changelake.table.write.assigners.base import BucketAssigner, IndexUpdate, with_index
from changelake.table.write.assigners.cross_partition import CrossPartitionBuckets
from changelake.table.write.assigners.dynamic import DynamicBuckets
from changelake.table.write.assigners.fixed import FixedBuckets
from changelake.table.write.assigners.postpone import PostponeBuckets

__all__ = ["BucketAssigner", "CrossPartitionBuckets", "DynamicBuckets", "FixedBuckets", "IndexUpdate",
           "PostponeBuckets", "for_table", "with_index"]


def for_table(ctx: TableContext) -> BucketAssigner:
    """The assigner of the table's bucket mode: fixed (``bucket`` >= 1), dynamic (``bucket = -1``;
    cross-partition when the primary key lacks a partition column) or postpone (``bucket = -2``)."""
    num_buckets = ctx.options.bucket
    if num_buckets >= 1:
        return FixedBuckets(ctx)
    if num_buckets == -1:
        return CrossPartitionBuckets(ctx) if ctx.cross_partition else DynamicBuckets(ctx)
    if num_buckets == POSTPONE_BUCKET:
        return PostponeBuckets()
    raise OptionError(f"bucket={num_buckets} is not supported for writing", table=ctx.name, option="bucket")
