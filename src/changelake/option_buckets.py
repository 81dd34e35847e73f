"""The options of a table's bucket mode (fixed, dynamic, postpone), declared as the rest of
:class:`~changelake.options.TableOptions` (which takes them as a base), kept here so that
module stays small."""

from __future__ import annotations

from dataclasses import dataclass

from changelake import option_values as values
from changelake.option_spec import declare
from changelake.option_values import POSTPONE_BUCKET


@dataclass(frozen=True)
class BucketOptions:
    """Bucket-mode options, parsed with Paimon's defaults."""

    bucket: int = declare(
        "bucket",
        values.bucket,
        "-1",
        "Number of buckets (>= 1); or -1: on a primary-key table dynamic bucket mode (each "
        "partition's HASH index says which bucket a key is in and new keys open buckets as they "
        "fill), on an append table unaware (files anywhere in the partition); or -2 on a "
        "primary-key table: postpone bucket mode (rows wait in `bucket-postpone/` until compaction).",
        supports=lambda v: v >= 1 or v in (-1, POSTPONE_BUCKET),
        unsupported="changelake writes a fixed number of buckets (>= 1), dynamic or unaware buckets (-1) "
        "and postpone buckets (-2)",
    )
    bucket_key: tuple[str, ...] = declare(
        "bucket-key",
        values.names,
        "",
        "Fixed buckets: columns hashed to pick the bucket (default: the primary key minus partition keys).",
    )
    postpone_default_bucket_num: int | None = declare(
        "postpone.default-bucket-num", values.positive_int, None,
        "Postpone-bucket tables: buckets of a partition that gets real buckets for the first time "
        "(by a compaction or a fixed-bucket batch write); unset, they are estimated from "
        "`postpone.target-row-num-per-bucket` or `postpone.target-size-per-bucket`.",
    )
    postpone_batch_write_fixed_bucket: bool = declare(
        "postpone.batch-write-fixed-bucket", values.parse_bool, "true",
        "Postpone-bucket tables: batch writes (`Table.write`, `streaming.write`) put rows straight into fixed buckets "
        "(a partition's existing number, else `postpone.default-bucket-num` or an estimate) instead "
        "of `bucket-postpone/`.",
    )
    postpone_batch_write_fixed_bucket_max_parallelism: int = declare(
        "postpone.batch-write-fixed-bucket.max-parallelism", values.positive_int, "2048",
        "Postpone-bucket tables: most buckets a fixed-bucket batch write infers for a new partition "
        "(rounded up to a power of two, then capped).",
    )
    postpone_target_row_num_per_bucket: int | None = declare(
        "postpone.target-row-num-per-bucket", values.positive_int, None,
        "Postpone-bucket tables: rows per bucket when estimating a new partition's buckets; takes "
        "precedence over `postpone.target-size-per-bucket`.",
    )
    postpone_target_size_per_bucket: int = declare(
        "postpone.target-size-per-bucket", values.parse_memory_size, "1 gb",
        "Postpone-bucket tables: bytes per bucket when estimating a new partition's buckets (of the "
        "partition's postpone files for a compaction, of the batch's rows for a batch write).",
    )
    dynamic_bucket_target_row_num: int = declare(
        "dynamic-bucket.target-row-num", values.positive_int, "2000000",
        "Dynamic bucket mode: keys a bucket takes before new keys go to another (or a new) bucket.",
    )
    dynamic_bucket_max_buckets: int = declare(
        "dynamic-bucket.max-buckets", values.dynamic_max_buckets, "-1",
        "Dynamic bucket mode: most buckets of a partition (-1: up to 32768); once all are full, a new "
        "key goes to one of them at random.",
    )
    dynamic_bucket_initial_buckets: int | None = declare(
        "dynamic-bucket.initial-buckets", values.positive_int, None,
        "Dynamic bucket mode: buckets a partition fills at once (Paimon's number of assigners: "
        "a key hash picks its assigner, each assigner fills its own buckets); default: "
        "`dynamic-bucket.assigner-parallelism`, else one.",
    )
    dynamic_bucket_assigner_parallelism: int | None = declare(
        "dynamic-bucket.assigner-parallelism", values.positive_int, None,
        "Dynamic bucket mode: assigners, when `dynamic-bucket.initial-buckets` is unset (with a "
        "cross-partition upsert: the larger of the two).",
    )
    cross_partition_upsert_index_ttl: int | None = declare(
        "cross-partition-upsert.index-ttl", values.parse_duration_ms, None,
        "Cross-partition upsert: how long a key stays in a writer's key index since it was last "
        "written (its bootstrap also skips buckets whose files are all older); a key past it is "
        "written as new, so it may then live in two partitions. Unset: keys never expire.",
    )
    cross_partition_upsert_bootstrap_parallelism: int = declare(
        "cross-partition-upsert.bootstrap-parallelism", values.positive_int, "10",
        "Cross-partition upsert: splits a writer reads at once when it bootstraps its key index "
        "from the table's live keys.",
    )
