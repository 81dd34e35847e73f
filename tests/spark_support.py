"""What the Spark tests share: whether Spark can start here, the environment of a child process
that runs its own Spark (a driver, a cluster daemon) on this source tree, and ending everything
such a child started."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from changelake import Table, streaming

SRC = str(Path(__file__).resolve().parents[1] / "src")


def java_reason() -> str | None:
    """Why Spark cannot start here (no Java 17 or 21), or None."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        return "Spark needs Java 17 or 21: none found (JAVA_HOME, PATH); ./dev test installs it where it can"
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    if match is None or match.group(1) not in ("17", "21"):
        return f"Spark needs Java 17 or 21, found {out.splitlines()[0] if out else java!r}"
    return None


def session_builder(app: str, master: str = "local[2]") -> SparkSession.Builder:
    """A SparkSession builder as every Spark test starts one: on loopback, no UI or progress
    bars, two shuffle partitions, this interpreter for python workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )


def write_event_stream(spark: SparkSession, events: str, schema: str, table: Table | str,
                       checkpoint: str) -> StreamingQuery:
    """Stream the JSON change-event files of directory ``events`` (one micro-batch per file,
    in modification order) into ``table`` through the exactly-once sink, until every file
    present at the start is written (AvailableNow); the finished query."""
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(events)
    query = streaming.write_stream(df, table, checkpoint_location=checkpoint, trigger={"availableNow": True})
    query.awaitTermination()
    return query


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child that runs Spark: changelake from this tree, and
    this interpreter for its python workers."""
    return {**os.environ, "PYTHONPATH": SRC, "PYSPARK_PYTHON": sys.executable, **extra}


def session_processes(sid: int) -> list[int]:
    """The processes of session ``sid`` that still run. A child started with
    ``start_new_session=True`` leads its own session, which everything it starts joins (Spark's
    python daemon makes its own process group, not its own session)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(entry.path, "stat").read_text()
            state, _ppid, _pgrp, session = stat[stat.rindex(")") + 2:].split()[:4]
            if int(session) == sid and state not in "ZX":
                pids.append(int(entry.name))
    return pids


def end_session(sid: int, timeout: float = 60.0) -> None:
    """SIGKILL whatever runs in session ``sid`` (a child, its JVM, python daemon and workers)
    and wait until none runs, so that nothing of it acts after this returns."""
    deadline = time.monotonic() + timeout
    while pids := session_processes(sid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} survive SIGKILL")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
