"""The multi-writer soak at a small size (see soak.py; ``./dev soak`` runs the full figure)."""

from __future__ import annotations

from pathlib import Path

import soak

from pypaimon_oracle import Pypaimon


def test_concurrent_writers_and_compactor_lose_nothing(tmp_path: Path, pypaimon: Pypaimon) -> None:
    commits = 8
    report = soak.soak(str(tmp_path), commits, pypaimon_address=pypaimon.address, seed=3, timeout=120)
    assert not report.errors, soak.summary(report, commits, 0)
    assert report.commits_landed == 4 * commits and report.commits_lost == 0
    assert report.appends == 4 * commits
