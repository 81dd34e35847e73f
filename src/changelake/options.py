"""Table options: every option changelake knows, declared once (Paimon's key, the value's type,
Paimon's default, the parser, a line of doc) and parsed once into a frozen :class:`TableOptions`.

Unknown keys are rejected when a table is created (with a did-you-mean); opening a table that
another Paimon writer created tolerates keys changelake does not know.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from changelake import option_values as values
from changelake.errors import OptionError
from changelake.option_buckets import BucketOptions
from changelake.option_files import FileOptions
from changelake.option_operations import OperationOptions
from changelake.option_spec import OptionEffect, OptionSpec, declare
from changelake.option_values import (
    ChangelogProducer,
    LookupCompactMode,
    MergeEngineKind,
    ScanMode,
    SortOrder,
    TimeTravelSchema,
)

# options changelake validates and keeps for the other Paimon engines without acting on them
_STORED = OptionEffect.STORES
# ``fields.<names>.<setting>`` options (merge engines) and prefixed families accepted as they are.
_FIELD_OPTION = re.compile(
    r"^fields\.[^.]+(?:,[^.]+)*\.(aggregate-function|sequence-group|ignore-retract|distinct|list-agg-delimiter|stats-mode)$"
)
# Paimon's per-field settings changelake does not implement: refused on new tables.
_UNSUPPORTED_FIELD_OPTION = re.compile(r"^fields\.[^.]+(?:,[^.]+)*\.(default-value|nested-key|count-limit)$")
_PREFIXED_OPTION = re.compile(r"^(format-table\.|fs\.|s3\.)")
# a file index's per-column settings (their columns are checked against the schema)
_FILE_INDEX_OPTION = re.compile(r"^file-index\.bloom-filter\.[^.]+\.(fpp|items)$")


@dataclass(frozen=True)
class TableOptions(BucketOptions, FileOptions, OperationOptions):
    """A table's options parsed with Paimon's defaults (``raw`` keeps them as stored)."""

    raw: Mapping[str, str] = dataclasses.field(default_factory=dict)
    table: str = ""

    # layout (bucket options: option_buckets.BucketOptions; data files and manifests:
    # option_files.FileOptions; partition expiration: option_operations.OperationOptions)
    path: str | None = declare("path", values.text_value, None, "The table's location (set by catalogs).")
    partition_default_name: str = declare(
        "partition.default-name",
        values.text_value,
        "__DEFAULT_PARTITION__",
        "Directory name of null or blank partition values.",
    )
    partition_legacy_name: bool = declare(
        "partition.legacy-name", values.parse_bool, "true", "Legacy partition directory names (dates as day numbers)."
    )
    # write buffer
    write_buffer_size: int = declare(
        "write-buffer-size",
        values.parse_memory_size,
        "256 mb",
        "Rows buffered in memory before they are sorted and flushed.",
    )
    write_buffer_spillable: bool = declare(
        "write-buffer-spillable", values.parse_bool, "true", "Spill full buffers to local disk (merged at commit)."
    )
    write_buffer_spill_max_disk_size: int | None = declare(
        "write-buffer-spill.max-disk-size", values.parse_memory_size, None, "Bound on spilled bytes.", effect=_STORED)
    local_sort_max_file_handles: int = declare(
        "local-sort.max-num-file-handles", values.positive_int, "128", "Spill files merged at once.", effect=_STORED)
    sort_spill_threshold: int | None = declare(
        "sort-spill-threshold", values.positive_int, None, "Sorted runs that force a spill merge.", effect=_STORED)
    spill_compression: str = declare(
        "spill-compression", values.text_value, "zstd", "Compression of spill files.", effect=_STORED)
    # compaction
    write_only: bool = declare("write-only", values.parse_bool, "false", "Writers never compact nor expire snapshots.",
                               fallback_keys=("write.compaction-skip",))
    compaction_trigger: int = declare(
        "num-sorted-run.compaction-trigger", values.positive_int, "5", "Sorted runs that trigger a compaction."
    )
    stop_trigger: int = declare(
        "num-sorted-run.stop-trigger",
        values.positive_int,
        None,
        "Sorted runs past which writes wait for compaction (default: compaction-trigger + 3).",
        derive=lambda o: o["compaction_trigger"] + 3,
    )
    num_levels: int = declare(
        "num-levels",
        values.positive_int,
        None,
        "LSM levels per bucket (default: compaction-trigger + 1).",
        derive=lambda o: o["compaction_trigger"] + 1,
    )
    max_size_amplification_percent: int = declare(
        "compaction.max-size-amplification-percent",
        values.percent,
        "200",
        "Size amplification that triggers a full compaction of a bucket.",
    )
    size_ratio: int = declare(
        "compaction.size-ratio",
        values.percent,
        "1",
        "Size ratio (percent) under which sorted runs are compacted together.",
    )
    compaction_optimization_interval: int | None = declare(
        "compaction.optimization-interval", values.parse_duration_ms, None, "Interval of optimizing full compactions.",
        effect=_STORED,
    )
    compaction_min_file_num: int = declare(
        "compaction.min.file-num", values.positive_int, "5",
        "Append tables: the fewest files whose sizes sum to `target-file-size` that a compaction takes.",
    )
    compaction_max_file_num: int | None = declare(
        "compaction.max.file-num", values.positive_int, None,
        "Append tables: this many small files are compacted even below `target-file-size` "
        "(default 50; 5 with fixed buckets).",
        fallback_keys=("compaction.early-max.file-num",),
    )
    full_compaction_delta_commits: int | None = declare(
        "full-compaction.delta-commits", values.positive_int, None,
        "A writer fully compacts every this many commits (1 when unset with `changelog-producer` `full-compaction`)."
    )
    commit_force_compact: bool = declare(
        "commit.force-compact", values.parse_bool, "false", "Every commit waits for its compaction."
    )
    # commits
    commit_max_retries: int = declare(
        "commit.max-retries", values.positive_int, "10", "Lost commit races retried before giving up."
    )
    commit_min_retry_wait: int = declare(
        "commit.min-retry-wait",
        values.parse_duration_ms,
        "10 ms",
        "Wait after a first lost commit race (then doubling).",
    )
    commit_max_retry_wait: int = declare(
        "commit.max-retry-wait", values.parse_duration_ms, "10 s", "Longest wait between commit retries."
    )
    commit_timeout: int | None = declare(
        "commit.timeout", values.parse_duration_ms, None, "Bound on a commit's retries.", effect=_STORED)
    commit_user_prefix: str | None = declare(
        "commit.user-prefix", values.text_value, None, "Prefix of generated commit users.", effect=_STORED)
    commit_user: str | None = declare("commit-user", values.text_value, None, "The commit user of streaming writers.")
    # merging
    merge_engine: MergeEngineKind = declare(
        "merge-engine", values.member(MergeEngineKind), "deduplicate", "How rows of one key merge."
    )
    sequence_field: tuple[str, ...] = declare(
        "sequence.field", values.names, "", "Columns that order the rows of a key (instead of commit order)."
    )
    sequence_sort_order: SortOrder = declare(
        "sequence.field.sort-order", values.member(SortOrder), "ascending", "Order of sequence.field values."
    )
    ignore_delete: bool = declare("ignore-delete", values.parse_bool, "false", "Drop -U/-D input rows.",
                                  fallback_keys=("first-row.ignore-delete", "deduplicate.ignore-delete",
                                                 "partial-update.ignore-delete"))
    partial_update_remove_record_on_delete: bool = declare(
        "partial-update.remove-record-on-delete", values.parse_bool, "false",
        "partial-update: a -D removes the record; later adds start it anew, from the -D's NOT NULL values only.",
    )
    aggregation_remove_record_on_delete: bool = declare(
        "aggregation.remove-record-on-delete", values.parse_bool, "false",
        "aggregation: a -D removes the record; later adds start it anew, from the -D's NOT NULL values only.",
    )
    partial_update_remove_record_on_sequence_group: tuple[str, ...] = declare(
        "partial-update.remove-record-on-sequence-group",
        values.names,
        "",
        "partial-update: a -D newer in this sequence group removes the record.",
    )
    default_aggregate_function: str | None = declare(
        "fields.default-aggregate-function",
        values.text_value,
        None,
        "aggregation: the function of columns without their own.",
    )
    rowkind_field: str | None = declare(
        "rowkind.field", values.text_value, None, "A stored string column giving each input row's kind (+I/-U/+U/-D)."
    )
    record_level_expire_time: int | None = declare(
        "record-level.expire-time",
        values.parse_duration_ms,
        None,
        "Records older than this expire.",
        supports=lambda v: v is None,
        unsupported="record-level expiry is not implemented",
    )
    # changelog
    changelog_producer: ChangelogProducer = declare(
        "changelog-producer",
        values.member(ChangelogProducer),
        "none",
        "Where the table's changelog comes from: `none`; `input` (writes also store their raw input "
        "as changelog files); `lookup` (compactions of level 0 look up each key's previous value); "
        "`full-compaction` (full compactions diff the new top level against the previous one).",
    )
    changelog_row_deduplicate: bool = declare(
        "changelog-producer.row-deduplicate", values.parse_bool, "false", "Suppress -U/+U pairs with equal values."
    )
    changelog_row_deduplicate_ignore_fields: tuple[str, ...] = declare(
        "changelog-producer.row-deduplicate-ignore-fields", values.names, "", "Columns ignored by row-deduplicate."
    )
    lookup_wait: bool = declare("lookup-wait", values.parse_bool, "true",
                                "Commits of tables that look keys up wait for the lookup compaction (its changelog "
                                "and rows land with them); `false`: it runs in the background and lands later.",
                                fallback_keys=("changelog-producer.lookup-wait",))
    lookup_compact: LookupCompactMode = declare(
        "lookup-compact", values.member(LookupCompactMode), "radical",
        "How writers of tables that look keys up (deletion vectors, first-row, the `lookup` producer) "
        "compact level 0: `radical` forces it up in every commit; `gentle` compacts as universal "
        "compaction picks, forcing level 0 up only every `lookup-compact.max-interval` commits of a "
        "writer (less work, but readers that skip level 0 see rows later).",
    )
    lookup_compact_max_interval: int = declare(
        "lookup-compact.max-interval", values.positive_int, None,
        "With `lookup-compact` gentle: a writer's commits (of a bucket) in which nothing is picked "
        "before level 0 is forced up (default: twice `num-sorted-run.compaction-trigger`; at least it).",
        derive=lambda o: 2 * o["compaction_trigger"],
    )
    lookup_cache_max_memory_size: int = declare(
        "lookup.cache-max-memory-size", values.parse_memory_size, "256 mb",
        "Memory of the lookup cache of higher-level files (beyond it, files spill to local disk).",
    )
    lookup_cache_file_retention: int = declare(
        "lookup.cache-file-retention", values.parse_duration_ms, "1 h",
        "Local lookup files unused this long are deleted (read from the table again when needed).",
    )
    lookup_cache_max_disk_size: int = declare(
        "lookup.cache-max-disk-size", values.parse_memory_size, "9223372036854775807 bytes",
        "Max local disk size of the lookup cache's spilled files (beyond it, the least recently used "
        "are deleted and read from the table again when needed); unlimited by default.",
    )
    deletion_vectors_enabled: bool = declare(
        "deletion-vectors.enabled",
        values.parse_bool,
        "false",
        "Deletion vectors instead of merge-on-read: writers compact level 0 up before each commit, "
        "marking the replaced rows of older files deleted; readers read each file once, without a merge.",
    )
    # reads
    split_target_size: int = declare(
        "source.split.target-size", values.parse_memory_size, "128 mb", "Splits are packed up to this size."
    )
    split_open_file_cost: int = declare(
        "source.split.open-file-cost", values.parse_memory_size, "4 mb", "Least weight of a file when packing splits."
    )
    scan_mode: ScanMode = declare("scan.mode", values.member(ScanMode), "default", "Where a streaming read starts.",
                                  fallback_keys=("log.scan",))
    scan_snapshot_id: int | None = declare("scan.snapshot-id", values.int_value, None, "Snapshot a scan starts from.")
    scan_tag_name: str | None = declare("scan.tag-name", values.text_value, None, "Tag a scan reads.")
    scan_timestamp_millis: int | None = declare(
        "scan.timestamp-millis", values.int_value, None, "Time a scan starts from.",
        fallback_keys=("log.scan.timestamp-millis",))
    scan_timestamp: str | None = declare("scan.timestamp", values.text_value, None, "Time a scan starts from, as text.")
    scan_time_travel_schema: TimeTravelSchema = declare(
        "scan.time-travel.schema", values.member(TimeTravelSchema), "snapshot",
        "changelake's own option (Paimon has none): `snapshot` reads a snapshot chosen by `scan.snapshot-id`, "
        "`scan.tag-name` or a time in the schema it was committed with, as Paimon does; `latest` reads it in "
        "the table's newest schema (old files mapped by field id: renamed columns under their new names, "
        "dropped ones left out).",
    )
    scan_plan_sort_partition: bool = declare(
        "scan.plan-sort-partition", values.parse_bool, "false", "Order splits by partition.", effect=_STORED)
    consumer_id: str | None = declare(
        "consumer-id", values.text_value, None, "Records a stream's progress under this id."
    )
    consumer_expiration_time: int | None = declare(
        "consumer.expiration-time", values.parse_duration_ms, None, "Consumers idle this long are dropped."
    )
    consumer_ignore_progress: bool = declare(
        "consumer.ignore-progress", values.parse_bool, "false",
        "A new stream with `consumer-id` starts by `scan.mode`, not where the consumer left off.",
    )
    streaming_read_overwrite: bool = declare(
        "streaming-read-overwrite", values.parse_bool, "false",
        "Primary-key tables: streams read OVERWRITE commits too (the replaced files' merged rows as -D, "
        "the new files' as +I); not with changelog-producer lookup or full-compaction.",
    )
    streaming_read_append_overwrite: bool = declare(
        "streaming-read-append-overwrite", values.parse_bool, "false",
        "Append tables: streams read the new files of OVERWRITE commits too (as +I).",
    )
    # Spark streaming reads (Paimon's Spark connector options)
    read_changelog: bool = declare(
        "read.changelog", values.parse_bool, "false",
        "Spark reads: a `rowkind` column (+I, -U, +U, -D) first and every change row; without it, streams "
        "carry the upserted rows (+I, +U) only.",
    )
    read_commit_metadata: bool = declare(
        "read.commit-metadata", values.parse_bool, "false",
        "Spark reads: `_commit_snapshot` and `_commit_timestamp` columns last, the snapshot each change was "
        "committed in and its commit time (a batch read's: the snapshot read), as Delta's change feed carries.",
    )
    read_stream_max_files: int | None = declare(
        "read.stream.maxFilesPerTrigger", values.positive_int, None,
        "Spark streaming reads: files a micro-batch reads at most.",
    )
    read_stream_max_rows: int | None = declare(
        "read.stream.maxRowsPerTrigger", values.positive_int, None,
        "Spark streaming reads: rows (as stored, before merging or filtering) a micro-batch reads at most.",
    )
    read_stream_min_rows: int | None = declare(
        "read.stream.minRowsPerTrigger", values.positive_int, None,
        "Spark streaming reads: a micro-batch waits for this many rows, at most "
        "`read.stream.maxTriggerDelayMs` after the previous one (give both).",
    )
    read_stream_max_trigger_delay: int | None = declare(
        "read.stream.maxTriggerDelayMs", values.parse_duration_ms, None,
        "Spark streaming reads: the longest wait for `read.stream.minRowsPerTrigger` rows (give both).",
    )
    # retention
    snapshot_num_retained_min: int = declare(
        "snapshot.num-retained.min", values.positive_int, "10", "Snapshots always kept."
    )
    snapshot_num_retained_max: int = declare(
        "snapshot.num-retained.max", values.positive_int, str(2**31 - 1), "Snapshots kept at most."
    )
    snapshot_time_retained: int = declare(
        "snapshot.time-retained", values.parse_duration_ms, "1 h", "Snapshots younger than this are kept."
    )
    snapshot_expire_limit: int = declare(
        "snapshot.expire.limit", values.positive_int, "50", "Snapshots expired at most per run."
    )
    snapshot_expire_execution_mode: str = declare(
        "snapshot.expire.execution-mode",
        values.choice("sync", "async"),
        "sync",
        "Writers expire snapshots after each commit, in the committing thread (`write-only` writers do not).",
        supports=lambda v: v == "sync",
        unsupported="changelake expires snapshots synchronously after each commit",
    )
    changelog_num_retained_min: int | None = declare(
        "changelog.num-retained.min", values.positive_int, None, "Changelogs always kept."
    )
    changelog_num_retained_max: int | None = declare(
        "changelog.num-retained.max", values.positive_int, None, "Changelogs kept at most."
    )
    changelog_time_retained: int | None = declare(
        "changelog.time-retained", values.parse_duration_ms, None, "Changelogs younger than this are kept."
    )
    tag_automatic_creation: str = declare(
        "tag.automatic-creation",
        values.text_value,
        "none",
        "Automatic tag creation.",
        supports=lambda v: v.strip().lower() == "none",
        unsupported="automatic tag creation is not implemented",
    )
    # descriptive
    owner: str | None = declare("owner", values.text_value, None, "The table's owner.")
    comment: str | None = declare("comment", values.text_value, None, "A comment on the table.",
                                  effect=_STORED)

    @staticmethod
    def specs() -> list[OptionSpec]:
        """Every declared option, in declaration order."""
        return [f.metadata["option"] for f in dataclasses.fields(TableOptions) if "option" in f.metadata]

    @classmethod
    def parse(cls, raw: Mapping[str, str], *, table: str, new: bool = False) -> TableOptions:
        """Parse every declared option of ``raw`` (defaults for the others). With ``new`` (a
        table being created), unknown keys and non-string values are rejected too."""
        if new:
            check_keys(raw, table)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            spec: OptionSpec | None = f.metadata.get("option")
            if spec is None:
                continue
            text = spec.text(raw)
            if text is not None:
                values[f.name] = spec.value(text, table)
                if new:
                    spec.check_supported(values[f.name], table)
            elif spec.derive is not None:
                values[f.name] = spec.derive(values)
            else:
                values[f.name] = f.default
        return cls(raw=dict(raw), table=table, **values)


_KEYS = frozenset(key for spec in TableOptions.specs() for key in (spec.key, *spec.fallback_keys))
_KEYS_BY_LOWER = {key.lower(): key for key in _KEYS}


def check_keys(raw: Mapping[str, str], table: str) -> None:
    """OptionError for a key of ``raw`` that names no option changelake knows (with a
    did-you-mean), one it refuses, or a value that is not a string."""
    for key, value in raw.items():
        if not isinstance(value, str):
            raise OptionError(f"must be a string, got {value!r}", table=table, option=key)
        if _UNSUPPORTED_FIELD_OPTION.match(key):
            raise OptionError("is not supported by changelake", table=table, option=key)
        if key not in _KEYS and not (_FIELD_OPTION.match(key) or _PREFIXED_OPTION.match(key)
                                     or _FILE_INDEX_OPTION.match(key)):
            hint = difflib.get_close_matches(key, _KEYS, n=1)
            raise OptionError("is unknown" + (f"; did you mean {hint[0]!r}?" if hint else ""), table=table, option=key)


def canonical_key(key: str, *, table: str) -> str:
    """The declared key ``key`` names, matched ignoring case (Spark lowercases the keys of a
    data source's options); OptionError, with a did-you-mean, for a key that names none."""
    found = _KEYS_BY_LOWER.get(key.lower())
    if found is None:
        hint = difflib.get_close_matches(key.lower(), _KEYS_BY_LOWER, n=1)
        suggestion = f"; did you mean {_KEYS_BY_LOWER[hint[0]]!r}?" if hint else ""
        raise OptionError("is unknown" + suggestion, table=table, option=key)
    return found


def markdown_table() -> str:
    """Every option as a Markdown table (key, default, what changelake does with it, description),
    for ``docs/options.md``."""
    lines = ["| option | default | changelake | what it does |", "|---|---|---|---|"]
    for spec in TableOptions.specs():
        if spec.default is not None:
            default = f"`{spec.default}`" if spec.default else "(empty)"
        else:
            default = "(derived)" if spec.derive is not None else "(none)"
        also = "".join(f" (also `{k}`)" for k in spec.fallback_keys)
        effect = spec.effect.value
        if spec.effect is OptionEffect.ACTS and spec.supports is not None:
            effect += "; other values refused"
        lines.append(f"| `{spec.key}`{also} | {default} | {effect} | {spec.doc} |")
    return "\n".join(lines) + "\n"
