"""The kinds of values table options hold: the enums of fixed choices, and the parsers of
Paimon's option texts (memory sizes, durations, booleans, lists of names)."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar


class FileFormat(enum.StrEnum):
    """A data file format (``file.format``), named as Paimon names it (and the file extension)."""

    PARQUET = "parquet"
    ORC = "orc"
    AVRO = "avro"


class MergeEngineKind(enum.StrEnum):
    """``merge-engine``: how the rows of one primary key merge."""

    DEDUPLICATE = "deduplicate"
    PARTIAL_UPDATE = "partial-update"
    AGGREGATION = "aggregation"
    FIRST_ROW = "first-row"


class ChangelogProducer(enum.StrEnum):
    """``changelog-producer``: where a table's changelog comes from."""

    NONE = "none"
    INPUT = "input"
    LOOKUP = "lookup"
    FULL_COMPACTION = "full-compaction"


class ScanMode(enum.StrEnum):
    """``scan.mode``: where a streaming read starts."""

    DEFAULT = "default"
    LATEST_FULL = "latest-full"
    FULL = "full"
    LATEST = "latest"
    COMPACTED_FULL = "compacted-full"
    FROM_TIMESTAMP = "from-timestamp"
    FROM_SNAPSHOT = "from-snapshot"
    FROM_SNAPSHOT_FULL = "from-snapshot-full"
    INCREMENTAL = "incremental"


class TimeTravelSchema(enum.StrEnum):
    """``scan.time-travel.schema`` (changelake's own option): the schema a read of an older
    snapshot (by id, tag or time) returns its rows in."""

    SNAPSHOT = "snapshot"  # the schema the snapshot was committed with, as Paimon reads it
    LATEST = "latest"  # the reading table's schema, old files mapped to it by field id


class LookupCompactMode(enum.StrEnum):
    """``lookup-compact``: how often writers of tables that look keys up force level 0 up."""

    RADICAL = "radical"
    GENTLE = "gentle"


class ExternalPathStrategy(enum.StrEnum):
    """``data-file.external-paths.strategy``: which of the external paths a new data file goes to."""

    NONE = "none"
    ROUND_ROBIN = "round-robin"
    SPECIFIC_FS = "specific-fs"
    ENTROPY_INJECT = "entropy-inject"
    WEIGHT_ROBIN = "weight-robin"


class SortOrder(enum.StrEnum):
    """``sequence.field.sort-order``."""

    ASCENDING = "ascending"
    DESCENDING = "descending"


# -- value parsers --------------------------------------------------------------------------

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


_TRUNCATE = re.compile(r"^truncate\((\d+)\)$")


class StatsKind(enum.Enum):
    """What a column's statistics hold."""

    NONE = "none"
    COUNTS = "counts"
    TRUNCATE = "truncate"
    FULL = "full"


@dataclass(frozen=True)
class StatsMode:
    """A column's stats mode; ``length`` is the truncation length of ``truncate(N)``."""

    kind: StatsKind
    length: int = 0

    @property
    def bounded(self) -> bool:
        """Whether the mode keeps a min and max."""
        return self.kind in (StatsKind.TRUNCATE, StatsKind.FULL)


def parse_stats_mode(text: str) -> StatsMode:
    """A stats mode from Paimon's text (case-insensitive, as Paimon's parser takes it):
    ``none``, ``counts``, ``full`` or ``truncate(N)`` with N > 0; ValueError otherwise."""
    lowered = text.strip().lower()
    truncate = _TRUNCATE.match(lowered)
    if truncate is not None:
        length = int(truncate.group(1))
        if length <= 0:
            raise ValueError("the truncation length must be positive")
        return StatsMode(StatsKind.TRUNCATE, length)
    for kind in (StatsKind.NONE, StatsKind.COUNTS, StatsKind.FULL):
        if lowered == kind.value:
            return StatsMode(kind)
    raise ValueError("expected none, counts, full or truncate(N)")


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
    """``true`` or ``false`` (any case)."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"{text!r} is not 'true' or 'false'")
    return lowered == "true"


def int_value(text: str) -> int:
    """A whole number."""
    return int(text.strip())


def positive_int(text: str) -> int:
    value = int(text.strip())
    if value <= 0:
        raise ValueError(f"{text!r} must be positive")
    return value


def dynamic_max_buckets(text: str) -> int:
    """-1 (no limit) or a number of buckets from 1 to 32768 (Paimon's bucket ids are shorts)."""
    value = int(text.strip())
    if value != -1 and not 1 <= value <= 32768:
        raise ValueError(f"{text!r} must be -1 or between 1 and 32768")
    return value


def percent(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError(f"{text!r} must not be negative")
    return value


# The bucket of a postpone-bucket table's (``bucket = -2``) new files, until a compaction moves
# them into real buckets; Paimon names its directory ``bucket-postpone``.
POSTPONE_BUCKET = -2


def bucket(text: str) -> int:
    value = int(text.strip())
    if value == 0 or value < -2:
        raise ValueError(f"{text!r} must be a positive number of buckets")
    return value


def compression(text: str) -> str:
    """A data file compression (``uncompressed`` is ``none``)."""
    value = choice("zstd", "snappy", "gzip", "lz4", "none", "uncompressed", "brotli")(text)
    return "none" if value == "uncompressed" else value


def text_value(text: str) -> str:
    """The text as it is."""
    return text


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of column names."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def uris(text: str) -> tuple[str, ...]:
    """A comma-separated list of URIs (or paths), each without its trailing slash."""
    return tuple(uri.strip().rstrip("/") for uri in text.split(",") if uri.strip())


def uri_scheme(uri: str) -> str | None:
    """The scheme of a URI (``s3`` of ``s3://bucket/t``), lowercase; None for a bare path."""
    found = _SCHEME.match(uri)
    return found.group(1).lower() if found else None


def per_level(parse: Callable[[str], _T]) -> Callable[[str], tuple[tuple[int, _T], ...]]:
    """Paimon's per-level maps: comma-separated ``<level>:<value>`` pairs, each value parsed
    with ``parse`` (``0:lz4,1:zstd``); empty for none."""

    def parse_pairs(text: str) -> tuple[tuple[int, _T], ...]:
        pairs: dict[int, _T] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            level, sep, value = item.partition(":")
            if not sep or not level.strip().isdigit():
                raise ValueError(f"{item!r} is not <level>:<value> with a level >= 0")
            pairs[int(level)] = parse(value)
        return tuple(sorted(pairs.items()))

    return parse_pairs


def choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return value

    return parse


_E = TypeVar("_E", bound=enum.StrEnum)
_T = TypeVar("_T")


def member(kind: type[_E]) -> Callable[[str], _E]:
    def parse(text: str) -> _E:
        try:
            return kind(text.strip().lower())
        except ValueError:
            raise ValueError(f"{text!r} is not one of {', '.join(m.value for m in kind)}") from None

    return parse
