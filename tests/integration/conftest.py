"""Fixtures of the interop tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from java_paimon import JavaPaimon, jar_path, jar_reason

from spark_support import java_reason


@pytest.fixture(scope="session")
def java() -> Iterator[JavaPaimon]:
    """Apache Paimon's Java engine, one JVM for the test run (skips, saying why, without Java
    or Paimon's jar)."""
    reason = java_reason() or jar_reason()
    if reason is not None:
        pytest.skip(reason)
    engine = JavaPaimon(jar_path())
    yield engine
    engine.close()
