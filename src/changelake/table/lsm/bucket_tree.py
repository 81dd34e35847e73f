"""One bucket's LSM tree as values: its files with their key ranges, sorted runs and levels,
and what universal compaction would pick next; and how sizes and keys read as text. Both the
text summary (:mod:`.inspection`) and the picture (:mod:`.picture`) draw from these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from changelake.table.lsm.universal import PickRule


@dataclass(frozen=True)
class FileInspection:
    """One data (or changelog) file: keys decoded to Python values, one tuple per key."""

    name: str
    level: int
    rows: int
    size: int
    min_key: tuple[Any, ...]
    max_key: tuple[Any, ...]
    min_sequence: int
    max_sequence: int
    deleted_rows: int | None
    compacted: bool  # written by a compaction (else by a write)


@dataclass(frozen=True)
class SortedRunInspection:
    """Files with disjoint key ranges in key order: a level-0 file, or a whole higher level."""

    level: int
    files: tuple[FileInspection, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


@dataclass(frozen=True)
class PendingCompaction:
    """What universal compaction would pick next in a bucket: the rule that fired with its
    numbers (``reason``), the files (names) and the level they would go to."""

    rule: PickRule
    reason: str
    files: tuple[str, ...] = ()
    output_level: int | None = None


@dataclass(frozen=True)
class BucketInspection:
    """The LSM tree of one bucket."""

    partition: tuple[tuple[str, Any], ...]  # (partition key, value) pairs
    # ``key=value,...`` (empty for an unpartitioned table); a TIMESTAMP(7..9) value, which
    # decodes as its nanoseconds, shows as the timestamp
    partition_text: str
    bucket: int
    num_levels: int
    runs: tuple[SortedRunInspection, ...]  # newest data first: level-0 files, then levels 1..
    pending: PendingCompaction
    changelog: tuple[FileInspection, ...]  # changelog files the snapshot added in this bucket

    @property
    def files(self) -> tuple[FileInspection, ...]:
        return tuple(f for run in self.runs for f in run.files)

    def level(self, level: int) -> tuple[SortedRunInspection, ...]:
        """The sorted runs of one level (level 0: one per file; else none or one)."""
        return tuple(run for run in self.runs if run.level == level)

    @property
    def size(self) -> int:
        return sum(run.size for run in self.runs)

    @property
    def rows(self) -> int:
        return sum(run.rows for run in self.runs)


def human_size(size: int) -> str:
    """``1.5 KiB``-style sizes."""
    if size < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def key_text(key: tuple[Any, ...]) -> str:
    """A key as text: the value for one key column, a tuple for several."""
    return str(key[0]) if len(key) == 1 else "(" + ", ".join(str(v) for v in key) + ")"
