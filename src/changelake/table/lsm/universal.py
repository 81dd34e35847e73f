"""Universal compaction (RocksDB-style, as Paimon picks): which sorted runs to merge, and into
which level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm.levels import LevelSortedRun


@dataclass(frozen=True)
class CompactUnit:
    """Files to merge and the level their output goes to."""

    output_level: int
    files: tuple[DataFileMeta, ...]

    @staticmethod
    def of(output_level: int, runs: Sequence[LevelSortedRun]) -> CompactUnit:
        return CompactUnit(output_level, tuple(f for r in runs for f in r.run.files))


@dataclass(frozen=True)
class UniversalCompaction:
    """The picker's settings (Paimon option names in the field docs)."""

    max_size_amplification_percent: int = 200  # compaction.max-size-amplification-percent
    size_ratio: int = 1  # compaction.size-ratio
    compaction_trigger: int = 5  # num-sorted-run.compaction-trigger

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        """Size amplification first (a full compaction), then size ratio, then run count."""
        max_level = num_levels - 1
        unit = self._pick_for_size_amplification(max_level, runs)
        if unit is None and len(runs) >= self.compaction_trigger:
            unit = self._pick_for_size_ratio(max_level, runs, 1)
        if unit is None and len(runs) > self.compaction_trigger:
            unit = self._pick_for_size_ratio(max_level, runs, len(runs) - self.compaction_trigger + 1)
        return unit

    def _pick_for_size_amplification(self, max_level: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        if len(runs) < self.compaction_trigger:
            return None
        candidate_size = sum(r.run.total_size for r in runs[:-1])
        earliest_size = runs[-1].run.total_size
        if candidate_size * 100 > self.max_size_amplification_percent * earliest_size:
            return CompactUnit.of(max_level, runs)
        return None

    def pick_level0(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        """The usual pick, or else every level-0 run (extended by size ratio) into a higher
        level: Paimon's ForceUpLevel0Compaction, for lookup compactions (first-row)."""
        unit = self.pick(num_levels, runs)
        if unit is not None:
            return unit
        count = next((i for i, run in enumerate(runs) if run.level > 0), len(runs))
        return self._pick_for_size_ratio(num_levels - 1, runs, count, force=True) if count else None

    def _pick_for_size_ratio(
        self, max_level: int, runs: Sequence[LevelSortedRun], candidate_count: int, *, force: bool = False
    ) -> CompactUnit | None:
        candidate_size = sum(r.run.total_size for r in runs[:candidate_count])
        for nxt in runs[candidate_count:]:
            if candidate_size * (100.0 + self.size_ratio) / 100.0 < nxt.run.total_size:
                break
            candidate_size += nxt.run.total_size
            candidate_count += 1
        if candidate_count > 1 or force:
            return create_unit(runs, max_level, candidate_count)
        return None


def create_unit(runs: Sequence[LevelSortedRun], max_level: int, run_count: int) -> CompactUnit:
    """The first ``run_count`` runs into the level below the next run; never into level 0:
    a level-0 output extends the pick up to and including the next run at a level > 0."""
    output_level = max_level if run_count == len(runs) else max(0, runs[run_count].level - 1)
    if output_level == 0:
        for nxt in runs[run_count:]:
            run_count += 1
            if nxt.level != 0:
                output_level = nxt.level
                break
    if run_count == len(runs):
        output_level = max_level
    return CompactUnit.of(output_level, runs[:run_count])


def pick_full(num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
    """Everything into the highest level (nothing to do if it is already one top-level run)."""
    max_level = num_levels - 1
    if not runs or (len(runs) == 1 and runs[0].level == max_level):
        return None
    return CompactUnit.of(max_level, runs)
