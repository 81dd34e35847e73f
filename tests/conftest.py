"""Fixtures shared across the test tree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession

from changelake.table.commit import renumber
from pypaimon_oracle import Pypaimon, PypaimonWorker, missing_reason
from s3_support import S3Endpoint, moto_s3
from spark_support import connect_reason, connect_server, java_reason, session_builder


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


@pytest.fixture(scope="session")
def connect_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A Spark Connect session on pyspark's own Connect server, started once for the run on
    loopback (local[2], changelake from this tree in its python workers); tests take it
    through ``connect``."""
    reason = java_reason() or connect_reason()
    if reason is not None:
        pytest.skip(reason)
    # Imported here: it needs the connect extra's packages, which connect_reason checked.
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    with connect_server(tmp_path_factory.mktemp("connect-server")) as url:
        # Connect's own builder: the classic builder's remote() would switch the whole process
        # to Connect for good, breaking the classic session's tests that run after.
        session = RemoteSparkSession.builder.remote(url).create()
        yield session
        session.stop()


@pytest.fixture
def connect(connect_session: SparkSession, monkeypatch: pytest.MonkeyPatch) -> SparkSession:
    """The Spark Connect session, with pyspark in Connect mode while the test runs: pyspark
    picks its classic or Connect functions (``functions.col``, UDFs) by this variable,
    process-wide, so it is set only around Connect tests."""
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return connect_session


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Endpoint]:
    """moto's S3 server on loopback, shared by the session, with one bucket."""
    yield from moto_s3()


@pytest.fixture
def s3_warehouse(s3: S3Endpoint) -> str:
    """A fresh ``s3://`` warehouse URL on the moto endpoint (storage options: ``s3.storage_options``)."""
    return s3.new_warehouse()


@pytest.fixture(scope="session")
def pypaimon() -> Iterator[Pypaimon]:
    """pypaimon 2.1 in its own process, started once for the session: ``pypaimon.read(...)``
    calls pypaimon_side.read there (see pypaimon_oracle.py). Skips, saying why, when pypaimon's
    virtualenv is missing."""
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    with PypaimonWorker.start() as worker, worker.connect() as connection:
        yield connection
