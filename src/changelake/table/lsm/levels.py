"""The LSM tree of one bucket: levels of data files, sorted runs and interval partitioning.

Level 0 holds one sorted run per file (newest first); every level >= 1 is one sorted run of
files whose key ranges do not overlap. Keys are compared as decoded BinaryRow tuples: this is
file metadata, a handful of values per file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from changelake.table.format.manifest import DataFileMeta

KeyOf = Callable[[bytes], tuple[Any, ...]]


@dataclass(frozen=True)
class SortedRun:
    """Files with non-overlapping key ranges, ordered by key."""

    files: tuple[DataFileMeta, ...]

    @property
    def total_size(self) -> int:
        return sum(f.file_size for f in self.files)


@dataclass(frozen=True)
class LevelSortedRun:
    level: int
    run: SortedRun


def interval_partition(files: Iterable[DataFileMeta], key_of: KeyOf) -> list[list[SortedRun]]:
    """Sections of files whose key ranges chain-overlap, each split into sorted runs.

    Sections do not overlap one another, so each can be merged (or read) on its own.
    """
    ordered = sorted(files, key=lambda f: (key_of(f.min_key), key_of(f.max_key)))
    sections: list[list[DataFileMeta]] = []
    bound: tuple[Any, ...] | None = None
    for f in ordered:
        if sections and bound is not None and key_of(f.min_key) <= bound:
            sections[-1].append(f)
            bound = max(bound, key_of(f.max_key))
        else:
            sections.append([f])
            bound = key_of(f.max_key)
    return [_runs_of_section(section, key_of) for section in sections]


def _runs_of_section(files: list[DataFileMeta], key_of: KeyOf) -> list[SortedRun]:
    # Greedy: each file joins the run that ends lowest if it starts after that run's end.
    runs: list[list[DataFileMeta]] = []
    for f in files:
        ends = [key_of(run[-1].max_key) for run in runs]
        lowest = min(range(len(runs)), key=ends.__getitem__) if runs else None
        if lowest is not None and key_of(f.min_key) > ends[lowest]:
            runs[lowest].append(f)
        else:
            runs.append([f])
    return [SortedRun(tuple(run)) for run in runs]


@dataclass(frozen=True)
class Levels:
    """The files of one bucket by level (an immutable value; updates return a new one)."""

    files: tuple[DataFileMeta, ...]
    num_levels: int

    @property
    def max_level(self) -> int:
        return self.num_levels - 1

    def level0(self) -> list[DataFileMeta]:
        """Level-0 files, newest first (by sequence number)."""
        zero = [f for f in self.files if f.level == 0]
        return sorted(zero, key=lambda f: (f.max_sequence_number, f.min_sequence_number, f.file_name), reverse=True)

    def run_of(self, level: int, key_of: KeyOf) -> SortedRun:
        return SortedRun(tuple(sorted((f for f in self.files if f.level == level), key=lambda f: key_of(f.min_key))))

    def sorted_runs(self, key_of: KeyOf) -> list[LevelSortedRun]:
        """Every level-0 file as a run, then one run per non-empty level, newest data first."""
        runs = [LevelSortedRun(0, SortedRun((f,))) for f in self.level0()]
        for level in range(1, self.num_levels):
            run = self.run_of(level, key_of)
            if run.files:
                runs.append(LevelSortedRun(level, run))
        return runs

    def highest_non_empty_level(self) -> int:
        return max((f.level for f in self.files), default=-1)

    def replace(self, before: Sequence[DataFileMeta], after: Sequence[DataFileMeta]) -> Levels:
        gone = {(f.file_name, f.level) for f in before}
        kept = tuple(f for f in self.files if (f.file_name, f.level) not in gone)
        return Levels(kept + tuple(after), self.num_levels)
