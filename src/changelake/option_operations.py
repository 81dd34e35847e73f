"""The options of table operations (partition expiration: Paimon's ``partition.expiration-*``
and ``partition.timestamp-*``; overwrite; schema merge on write), declared as the rest of
:class:`~changelake.options.TableOptions` (which takes them as a base), kept here so that
module stays small."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import cache

from changelake import option_values as values
from changelake.option_spec import declare


class PartitionExpirationStrategy(enum.StrEnum):
    """``partition.expiration-strategy``: what makes a partition old."""

    VALUES_TIME = "values-time"  # the time its values name
    UPDATE_TIME = "update-time"  # when a file was last written into it


# Java DateTimeFormatter letters changelake reads, as strptime directives.
_JAVA_LETTERS = {"yyyy": "%Y", "uuuu": "%Y", "yy": "%y", "MM": "%m", "M": "%m", "dd": "%d", "d": "%d",
                 "HH": "%H", "H": "%H", "mm": "%M", "m": "%M", "ss": "%S", "s": "%S", "SSS": "%f", "SSSSSS": "%f"}
_JAVA_TOKEN = re.compile(r"'([^']*)'|(y+|u+|M+|d+|H+|m+|s+|S+)|([A-Za-z])|(.)")


@cache
def strptime_format(pattern: str) -> str:
    """The ``strptime`` format of a Java ``DateTimeFormatter`` pattern (years, months, days,
    hours, minutes, seconds, fractions and quoted or other literal text); ValueError for a
    letter it does not know."""
    out = []
    for quoted, letters, unknown, other in _JAVA_TOKEN.findall(pattern):
        if letters:
            if letters not in _JAVA_LETTERS:
                raise ValueError(f"{letters!r} is not a pattern letter changelake reads")
            out.append(_JAVA_LETTERS[letters])
        elif unknown:
            raise ValueError(f"{unknown!r} is not a pattern letter changelake reads")
        else:
            out.append((quoted or other).replace("%", "%%"))
    return "".join(out)


def java_time_pattern(text: str) -> str:
    """A ``DateTimeFormatter`` pattern changelake can read, as it is."""
    strptime_format(text)
    return text


@dataclass(frozen=True)
class OperationOptions:
    """Table-operation options, parsed with Paimon's defaults."""

    write_merge_schema: bool = declare(
        "write.merge-schema", values.parse_bool, "false",
        "Writes add the input's new columns and widen column types (a schema change) before their rows land.")

    dynamic_partition_overwrite: bool = declare(
        "dynamic-partition-overwrite", values.parse_bool, "true",
        "An overwrite of a partitioned table without named partitions replaces only the partitions "
        "its rows are in (false: the whole table).")
    partition_expiration_time: int | None = declare(
        "partition.expiration-time", values.parse_duration_ms, None,
        "Partitions older than this are dropped, by writers after their commits and by "
        "`table.expire_partitions()` (unset: never).")
    partition_expiration_check_interval: int = declare(
        "partition.expiration-check-interval", values.parse_duration_ms, "1 h",
        "How often a writer looks for expired partitions.")
    partition_expiration_strategy: PartitionExpirationStrategy = declare(
        "partition.expiration-strategy", values.member(PartitionExpirationStrategy), "values-time",
        "`values-time`: a partition's age is the time its values name (`partition.timestamp-pattern`, "
        "`partition.timestamp-formatter`); `update-time`: the time its newest file was written.")
    partition_expiration_max_num: int = declare(
        "partition.expiration-max-num", values.positive_int, "100",
        "At most this many partitions expire in one run (the oldest first).")
    partition_timestamp_formatter: str | None = declare(
        "partition.timestamp-formatter", java_time_pattern, None,
        "Java DateTimeFormatter pattern of the partition time (`yyyyMMdd`, `yyyy-MM-dd HH:mm:ss`; "
        "unset: `yyyy-MM-dd` with an optional ` HH:mm:ss`).")
    partition_timestamp_pattern: str | None = declare(
        "partition.timestamp-pattern", values.text_value, None,
        "How partition values make the time, with `$key` for each value (`$dt $hour:00:00`; "
        "unset: the first partition value).")
