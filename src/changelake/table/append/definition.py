"""What an append table's definition may hold, checked when it is created or its options change.

As Paimon's ``SchemaValidation``: an unaware table (``bucket = -1``) takes no ``bucket-key``
and no ``full-compaction.delta-commits``; a fixed-bucket one needs a ``bucket-key``; the bucket
count is -1 or at least 1; ``changelog-producer`` needs a primary key. changelake also refuses
every other option that means something only to primary-key tables (merge engines, sequence and
row-kind fields, lookup, ...), which Paimon would ignore silently, so that a user who forgot the
primary key learns it at once.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from changelake.errors import OptionError
from changelake.options import TableOptions
from changelake.table.format.schema import TableKind, TableSchema

UNAWARE_BUCKET = -1

# Options that only primary-key tables take (Paimon's merge engines, changelog producers,
# sequence and row-kind fields, lookup compaction, key-value file layout).
PRIMARY_KEY_ONLY = frozenset({
    "merge-engine", "changelog-producer", "changelog-producer.row-deduplicate",
    "changelog-producer.row-deduplicate-ignore-fields", "sequence.field", "sequence.field.sort-order",
    "rowkind.field", "ignore-delete", "partial-update.remove-record-on-delete",
    "partial-update.remove-record-on-sequence-group", "aggregation.remove-record-on-delete",
    "fields.default-aggregate-function", "lookup-wait", "lookup-compact", "lookup-compact.max-interval",
    "data-file.thin-mode", "num-sorted-run.compaction-trigger", "num-sorted-run.stop-trigger", "num-levels",
    "compaction.max-size-amplification-percent", "compaction.size-ratio", "record-level.expire-time",
    "streaming-read-overwrite",
})
_PRIMARY_KEY_FIELD_OPTION = re.compile(
    r"^fields\.[^.]+(?:,[^.]+)*\.(aggregate-function|sequence-group|ignore-retract|distinct|list-agg-delimiter)$")


def check(schema: TableSchema, options: TableOptions, *, keys: Collection[str] | None = None) -> None:
    """OptionError naming the table and the option when an append table's definition is not
    one Paimon (or changelake) takes; primary-key tables pass. ``keys``: only these options
    were set or changed (None: the whole definition is new)."""
    if schema.kind is not TableKind.APPEND:
        return
    table = options.table
    for key in sorted(options.raw if keys is None else keys):
        if key in options.raw and (key in PRIMARY_KEY_ONLY or _PRIMARY_KEY_FIELD_OPTION.match(key)):
            raise OptionError("applies only to tables with a primary key; this is an append table "
                              "(define primary keys to use it)", table=table, option=key)
    bucket = options.bucket
    if bucket == UNAWARE_BUCKET:
        if "bucket-key" in options.raw:
            raise OptionError("cannot be defined with bucket = -1; remove the 'bucket-key' setting or specify "
                              "a bucket number", table=table, option="bucket-key")
        if options.full_compaction_delta_commits is not None:
            raise OptionError("is not supported by append tables of unaware bucket (bucket = -1)", table=table,
                              option="full-compaction.delta-commits")
    elif bucket < 1:
        raise OptionError(f"is {bucket}; an append table has bucket = -1 (unaware) or a number of buckets "
                          "greater than 0", table=table, option="bucket")
    elif not options.bucket_key:
        raise OptionError(f"bucket = {bucket} needs a 'bucket-key' for a bucketed append table (the columns "
                          "hashed to pick each row's bucket)", table=table, option="bucket-key")
