"""The multi-writer soak at a small size (see soak.py; ``./dev soak`` runs the full figure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import soak

from pypaimon_oracle import Pypaimon


# The dynamic-bucket tables' soaks are shorter: their first commits race for the index (most of
# a writer's commits place new keys), which a few commits reach, and the suite's time stays flat.
# The paused run waits 50 ms before each writer's COMPACT snapshot, so other writers' commits land
# between a commit's APPEND and its COMPACT: without the fixes for those races (a key index
# stamped with the COMPACT snapshot, compactions on a view without the files landed since) it
# left keys live in two partitions in every run.
@pytest.mark.parametrize(("mode", "commits", "pause"), [
    ("fixed", 8, 0.0), ("dynamic-bucket", 4, 0.0), ("cross-partition", 4, 0.0), ("cross-partition", 10, 0.05),
], ids=["fixed", "dynamic-bucket", "cross-partition", "cross-partition-paused"])
def test_concurrent_writers_and_compactor_lose_nothing(tmp_path: Path, pypaimon: Pypaimon, mode: str,
                                                       commits: int, pause: float) -> None:
    report = soak.soak(str(tmp_path), commits, pypaimon_address=pypaimon.address, mode=mode, seed=3, timeout=120,
                       compact_pause=pause)
    assert not report.errors, soak.summary(report, commits, 0, mode)
    assert report.commits_landed == 4 * commits and report.commits_lost == 0
    assert report.appends == 4 * commits
    if mode == "fixed":
        assert report.voids == 0  # fixed buckets: writers never void each other
    if mode == "cross-partition":
        assert report.key_moves > 0
