"""Universal compaction (RocksDB-style, as Paimon picks): which sorted runs to merge, and into
which level."""

from __future__ import annotations

import enum
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


class PickRule(enum.StrEnum):
    """Which rule of universal compaction chose a pick (or that none did)."""

    NONE = "none"
    SIZE_AMPLIFICATION = "size-amplification"
    SIZE_RATIO = "size-ratio"
    RUN_COUNT = "run-count"
    FORCE_LEVEL0_UP = "force-level0-up"
    SMALL_FILES = "small-files"  # not universal's: an append table's small-file compaction


@dataclass(frozen=True)
class Pick:
    """A pick (None: nothing to compact) with the rule that made it and why, in words."""

    unit: CompactUnit | None
    rule: PickRule
    reason: str


@dataclass(frozen=True)
class UniversalCompaction:
    """The picker's settings (Paimon option names in the field docs)."""

    max_size_amplification_percent: int = 200  # compaction.max-size-amplification-percent
    size_ratio: int = 1  # compaction.size-ratio
    compaction_trigger: int = 5  # num-sorted-run.compaction-trigger

    def pick(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        """Size amplification first (a full compaction), then size ratio, then run count."""
        return self.explain(num_levels, runs).unit

    def explain(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> Pick:
        """:meth:`pick` with the rule that fired and its numbers (or why none did)."""
        max_level = num_levels - 1
        count, trigger = len(runs), self.compaction_trigger
        if count < trigger:
            return Pick(None, PickRule.NONE,
                        f"nothing: {count} sorted run{'' if count == 1 else 's'} < num-sorted-run.compaction-trigger "
                        f"{trigger}")
        candidate_size = sum(r.run.total_size for r in runs[:-1])
        earliest_size = runs[-1].run.total_size
        amplification = f"{candidate_size * 100 // max(earliest_size, 1)}%"
        if candidate_size * 100 > self.max_size_amplification_percent * earliest_size:
            return Pick(CompactUnit.of(max_level, runs), PickRule.SIZE_AMPLIFICATION,
                        f"size amplification {amplification} > compaction.max-size-amplification-percent "
                        f"{self.max_size_amplification_percent} ({candidate_size} bytes above the oldest run of "
                        f"{earliest_size}): all {count} runs into level {max_level}")
        unit = self._pick_for_size_ratio(max_level, runs, 1)
        if unit is not None:
            picked = _run_count(runs, unit)
            return Pick(unit, PickRule.SIZE_RATIO,
                        f"size ratio: {count} sorted runs >= num-sorted-run.compaction-trigger {trigger}, and the "
                        f"newest {picked} runs each stay within (100 + compaction.size-ratio {self.size_ratio})% "
                        f"of the runs newer than them: into level {unit.output_level}")
        if count > trigger:
            unit = self._pick_for_size_ratio(max_level, runs, count - trigger + 1)
            if unit is not None:
                return Pick(unit, PickRule.RUN_COUNT,
                            f"run count: {count} sorted runs > num-sorted-run.compaction-trigger {trigger}: the "
                            f"newest {_run_count(runs, unit)} runs into level {unit.output_level}")
        return Pick(None, PickRule.NONE,
                    f"nothing: size amplification {amplification} <= compaction.max-size-amplification-percent "
                    f"{self.max_size_amplification_percent}, no two newest runs within compaction.size-ratio "
                    f"{self.size_ratio}%, {count} sorted runs not above num-sorted-run.compaction-trigger {trigger}")

    def pick_level0(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> CompactUnit | None:
        """The usual pick, or else every level-0 run (extended by size ratio) into a higher
        level: Paimon's ForceUpLevel0Compaction, for lookup compactions (first-row)."""
        return self.explain_level0(num_levels, runs).unit

    def explain_level0(self, num_levels: int, runs: Sequence[LevelSortedRun]) -> Pick:
        """:meth:`pick_level0` with the rule that fired and its numbers."""
        usual = self.explain(num_levels, runs)
        if usual.unit is not None:
            return usual
        count = next((i for i, run in enumerate(runs) if run.level > 0), len(runs))
        if not count:
            return Pick(None, PickRule.NONE, f"{usual.reason}; no level-0 file to force up")
        unit = self._pick_for_size_ratio(num_levels - 1, runs, count, force=True)
        into = "" if unit is None else f" into level {unit.output_level}"
        return Pick(unit, PickRule.FORCE_LEVEL0_UP,
                    f"force level 0 up (the usual pick: {usual.reason}): the {count} level-0 files{into}")

    def _pick_for_size_ratio(
        self, max_level: int, runs: Sequence[LevelSortedRun], candidate_count: int, *, force: bool = False
    ) -> CompactUnit | None:
        candidate_size = sum(r.run.total_size for r in runs[:candidate_count])
        # Once a compaction is due, level 0 and level 1 go in whatever their size, and the
        # size ratio is then weighed against all of it: a level-1 run merged into at every
        # forced commit would otherwise grow without bound (Paimon's "level 1 inflation" fix).
        triggered = force or candidate_count > 1
        for nxt in runs[candidate_count:]:
            if candidate_size * (100.0 + self.size_ratio) / 100.0 < nxt.run.total_size and (
                not triggered or nxt.level > 1
            ):
                break
            candidate_size += nxt.run.total_size
            candidate_count += 1
            triggered = True
        return create_unit(runs, max_level, candidate_count) if triggered else None


def _run_count(runs: Sequence[LevelSortedRun], unit: CompactUnit) -> int:
    """How many runs a unit takes: picks are always the newest runs, a prefix of ``runs``."""
    files = 0
    for count, r in enumerate(runs):
        if files >= len(unit.files):
            return count
        files += len(r.run.files)
    return len(runs)


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
