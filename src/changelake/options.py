"""Paimon table options: names, defaults and parsing, with a did-you-mean for typos."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from changelake.errors import OptionError

_MEMORY_UNITS = {
    "b": 1, "bytes": 1,
    "k": 1 << 10, "kb": 1 << 10, "kibibytes": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mebibytes": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gibibytes": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tebibytes": 1 << 40,
}  # fmt: skip
_DURATION_UNITS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "min": 60_000, "m": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}  # fmt: skip
_AMOUNT = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_memory_size(text: str) -> int:
    """Bytes in a Paimon memory size such as ``256 mb`` or ``64MB`` or ``1024``."""
    match = _AMOUNT.match(text)
    if match is None or match.group(2).lower() not in _MEMORY_UNITS | {"": 1}:
        raise ValueError(f"{text!r} is not a memory size (like '256 mb')")
    return int(match.group(1)) * _MEMORY_UNITS.get(match.group(2).lower(), 1)


def parse_duration_ms(text: str) -> int:
    """Milliseconds in a Paimon duration such as ``10 s`` or ``1 h`` (bare numbers are ms)."""
    match = _AMOUNT.match(text)
    if match is None or match.group(2).lower() not in _DURATION_UNITS | {"": 1}:
        raise ValueError(f"{text!r} is not a duration (like '10 s')")
    return int(match.group(1)) * _DURATION_UNITS.get(match.group(2).lower(), 1)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"{text!r} is not 'true' or 'false'")
    return lowered == "true"


def _int(text: str) -> int:
    return int(text.strip())


def _enum(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return value

    return parse


def _text(text: str) -> str:
    return text


def _percent(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError(f"{text!r} must not be negative")
    return value


def _positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError(f"{text!r} must be positive")
    return value


def _bucket(text: str) -> int:
    value = int(text.strip())
    if value == 0 or value < -2:
        raise ValueError(f"{text!r} must be a positive number of buckets")
    return value


# Every option key changelake accepts at create_table, with the parser that validates it.
# Unknown keys are rejected there; opening an existing table tolerates them.
KNOWN: dict[str, Callable[[str], Any]] = {
    "bucket": _bucket,
    "bucket-key": _text,
    "path": _text,
    "rowkind.field": _text,
    "file.format": _enum("parquet", "orc", "avro"),
    "file.compression": _enum("zstd", "snappy", "gzip", "lz4", "none", "uncompressed", "brotli"),
    "file.compression.zstd-level": _int,
    "manifest.format": _enum("avro"),
    "manifest.compression": _enum("zstd", "snappy", "deflate", "null", "none"),
    "manifest.target-file-size": parse_memory_size,
    "manifest.merge-min-count": _positive_int,
    "manifest.full-compaction-threshold-size": parse_memory_size,
    "target-file-size": parse_memory_size,
    "write-buffer-size": parse_memory_size,
    "write-buffer-spillable": parse_bool,
    "write-buffer-spill.max-disk-size": parse_memory_size,
    "write-only": parse_bool,
    "write-manifest-cache": parse_memory_size,
    "page-size": parse_memory_size,
    "num-levels": _positive_int,
    "num-sorted-run.compaction-trigger": _positive_int,
    "num-sorted-run.stop-trigger": _positive_int,
    "compaction.max-size-amplification-percent": _percent,
    "compaction.size-ratio": _percent,
    "compaction.optimization-interval": parse_duration_ms,
    "full-compaction.delta-commits": _positive_int,
    "commit.force-compact": parse_bool,
    "commit.max-retries": _positive_int,
    "commit.timeout": parse_duration_ms,
    "commit.user-prefix": _text,
    "merge-engine": _enum("deduplicate", "partial-update", "aggregation", "first-row"),
    "sequence.field": _text,
    "sequence.field.sort-order": _enum("ascending", "descending"),
    "ignore-delete": parse_bool,
    "partial-update.remove-record-on-delete": parse_bool,
    "aggregation.remove-record-on-delete": parse_bool,
    "partial-update.remove-record-on-sequence-group": _text,
    "fields.default-aggregate-function": _text,
    "changelog-producer": _enum("none", "input", "lookup", "full-compaction"),
    "changelog-producer.row-deduplicate": parse_bool,
    "changelog-producer.row-deduplicate-ignore-fields": _text,
    "lookup-wait": parse_bool,
    "source.split.target-size": parse_memory_size,
    "source.split.open-file-cost": parse_memory_size,
    "scan.mode": _enum(
        "default", "latest-full", "full", "latest", "compacted-full",
        "from-timestamp", "from-snapshot", "from-snapshot-full", "incremental",
    ),
    "scan.snapshot-id": _int,
    "scan.tag-name": _text,
    "scan.timestamp-millis": _int,
    "scan.timestamp": _text,
    "scan.plan-sort-partition": parse_bool,
    "consumer-id": _text,
    "consumer.expiration-time": parse_duration_ms,
    "snapshot.num-retained.min": _positive_int,
    "snapshot.num-retained.max": _positive_int,
    "snapshot.time-retained": parse_duration_ms,
    "snapshot.expire.limit": _positive_int,
    "changelog.num-retained.min": _positive_int,
    "changelog.num-retained.max": _positive_int,
    "changelog.time-retained": parse_duration_ms,
    "partition.default-name": _text,
    "partition.legacy-name": parse_bool,
    "metadata.stats-mode": _text,
    "deletion-vectors.enabled": parse_bool,
    "dynamic-bucket.target-row-num": _int,
    "local-sort.max-num-file-handles": _positive_int,
    "sort-spill-threshold": _positive_int,
    "spill-compression": _text,
    "data-file.prefix": _text,
    "changelog-file.prefix": _text,
    "file-index.read.enabled": parse_bool,
    "parquet.block.size": parse_memory_size,
    "parquet.enable.dictionary": parse_bool,
    "owner": _text,
    "comment": _text,
    "tag.automatic-creation": _text,
    "commit-user": _text,
    "record-level.expire-time": parse_duration_ms,
}

_FIELD_OPTION = re.compile(
    r"^fields\.[^.]+(?:,[^.]+)*\.(aggregate-function|sequence-group|ignore-retract|"
    r"default-value|distinct|list-agg-delimiter|nested-key|count-limit)$"
)
_PREFIXED_OPTION = re.compile(r"^(file\.compression\.per\.level|file\.format\.per\.level|format-table\.|fs\.|s3\.)")


def validate_new(options: Mapping[str, str], table: str) -> dict[str, str]:
    """Check a new table's options: known keys only, every value parses. Returns a copy."""
    checked: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(value, str):
            raise OptionError(f"table {table}: option {key!r} must be a string, got {value!r}")
        if key in KNOWN:
            _parse(key, value, table)
        elif not (_FIELD_OPTION.match(key) or _PREFIXED_OPTION.match(key)):
            hint = difflib.get_close_matches(key, KNOWN, n=1)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
            raise OptionError(f"table {table}: unknown option {key!r}{suggestion}")
        checked[key] = value
    return checked


def _parse(key: str, value: str, table: str) -> Any:
    try:
        return KNOWN[key](value)
    except (ValueError, TypeError) as exc:
        raise OptionError(f"table {table}: option {key!r} has invalid value {value!r}: {exc}") from None


@dataclass(frozen=True)
class TableOptions:
    """The options changelake acts on, parsed, with Paimon's defaults."""

    raw: Mapping[str, str]
    table: str

    def get(self, key: str, default: str) -> Any:
        """Parsed value of ``key``, or of ``default`` when the table does not set it."""
        return _parse(key, self.raw.get(key, default), self.table)

    @property
    def bucket(self) -> int:
        return int(self.get("bucket", "-1"))

    @property
    def bucket_key(self) -> tuple[str, ...]:
        text = self.raw.get("bucket-key", "")
        return tuple(k.strip() for k in text.split(",") if k.strip())

    @property
    def rowkind_field(self) -> str | None:
        return self.raw.get("rowkind.field") or None

    @property
    def file_compression(self) -> str:
        value = str(self.get("file.compression", "zstd"))
        return "none" if value == "uncompressed" else value

    @property
    def zstd_level(self) -> int:
        return int(self.get("file.compression.zstd-level", "1"))

    @property
    def manifest_compression(self) -> str:
        return str(self.get("manifest.compression", "zstd"))

    @property
    def partition_default_name(self) -> str:
        return self.raw.get("partition.default-name", "__DEFAULT_PARTITION__")

    @property
    def partition_legacy_name(self) -> bool:
        return bool(self.get("partition.legacy-name", "true"))

    @property
    def target_file_size(self) -> int:
        return int(self.get("target-file-size", "128 mb"))

    @property
    def commit_max_retries(self) -> int:
        return int(self.get("commit.max-retries", "10"))


    @property
    def merge_engine(self) -> str:
        return str(self.get("merge-engine", "deduplicate"))

    @property
    def compaction_trigger(self) -> int:
        return int(self.get("num-sorted-run.compaction-trigger", "5"))

    @property
    def stop_trigger(self) -> int:
        return int(self.get("num-sorted-run.stop-trigger", str(self.compaction_trigger + 3)))

    @property
    def num_levels(self) -> int:
        return int(self.get("num-levels", str(self.compaction_trigger + 1)))

    @property
    def max_size_amplification_percent(self) -> int:
        return int(self.get("compaction.max-size-amplification-percent", "200"))

    @property
    def size_ratio(self) -> int:
        return int(self.get("compaction.size-ratio", "1"))

    @property
    def write_only(self) -> bool:
        return bool(self.get("write-only", "false"))

    @property
    def full_compaction_delta_commits(self) -> int | None:
        if "full-compaction.delta-commits" not in self.raw:
            return None
        return int(self.get("full-compaction.delta-commits", "1"))

    @property
    def commit_force_compact(self) -> bool:
        return bool(self.get("commit.force-compact", "false"))

    @property
    def write_buffer_size(self) -> int:
        return int(self.get("write-buffer-size", "256 mb"))

    @property
    def write_buffer_spillable(self) -> bool:
        return bool(self.get("write-buffer-spillable", "true"))

    @property
    def split_target_size(self) -> int:
        return int(self.get("source.split.target-size", "128 mb"))

    @property
    def split_open_file_cost(self) -> int:
        return int(self.get("source.split.open-file-cost", "4 mb"))

    @property
    def manifest_target_file_size(self) -> int:
        return int(self.get("manifest.target-file-size", "8 mb"))

    @property
    def manifest_merge_min_count(self) -> int:
        return int(self.get("manifest.merge-min-count", "30"))

    @property
    def manifest_full_compaction_size(self) -> int:
        return int(self.get("manifest.full-compaction-threshold-size", "16 mb"))

