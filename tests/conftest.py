"""Fixtures shared across the test tree."""

from __future__ import annotations

from typing import Any

import pytest

from changelake.table.commit import renumber


@pytest.fixture
def renumber_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each call of the committer's renumbering shifted anything, in call order."""
    calls: list[bool] = []
    real = renumber.renumber

    def counting(*args: Any) -> Any:
        result = real(*args)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(renumber, "renumber", counting)
    return calls
