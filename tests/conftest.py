"""Fixtures shared across the test tree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from changelake.table.commit import renumber
from spark_support import java_reason, session_builder


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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one SparkSession of the test run: local[2], loopback, UI off, two shuffle partitions."""
    reason = java_reason()
    if reason is not None:
        pytest.skip(reason)
    session = (
        session_builder("changelake-tests")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
