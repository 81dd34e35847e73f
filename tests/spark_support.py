"""What the Spark tests share: whether Spark can start here, the environment of a child process
that runs its own Spark (a driver, a cluster daemon) on this source tree, a standalone cluster
on loopback, and ending everything such a child started."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from changelake import Table, streaming

SRC = str(Path(__file__).resolve().parents[1] / "src")
TESTS = str(Path(__file__).resolve().parent)


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


def connect_reason() -> str | None:
    """Why a Spark Connect client cannot run here (the ``connect`` extra's packages), or None."""
    try:
        import pyspark.sql.connect.session  # noqa: F401  # checks grpc, pandas, zstandard, ...
    except ImportError as exc:
        return f"Spark Connect needs the connect extra (pip install 'changelake[connect]'): {exc}"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def connect_server(work: Path, timeout: float = 180.0) -> Iterator[str]:
    """pyspark's own Spark Connect server (``sbin/start-connect-server.sh --wait``, SPARK_HOME
    the installed pyspark) on loopback, local[2], its python workers this interpreter with
    changelake from this tree (and these test helpers); its ``sc://`` URL until the block ends, then everything it
    started is killed. Its log is ``work/connect-server.log``."""
    spark_home = Path(pyspark.__file__).resolve().parent
    port = free_port()
    confs = {"spark.master": "local[2]", "spark.connect.grpc.binding.address": "127.0.0.1",
             "spark.connect.grpc.binding.port": str(port), "spark.driver.host": "127.0.0.1",
             "spark.driver.bindAddress": "127.0.0.1", "spark.ui.enabled": "false",
             "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2",
             "spark.sql.streaming.stopTimeout": "30s"}
    command = [str(spark_home / "sbin" / "start-connect-server.sh"), "--wait"]
    for key, value in confs.items():
        command += ["--conf", f"{key}={value}"]
    work.mkdir(parents=True, exist_ok=True)
    env = child_env(SPARK_HOME=str(spark_home), SPARK_LOG_DIR=str(work), SPARK_PID_DIR=str(work),
                    PYTHONPATH=os.pathsep.join([SRC, TESTS]))
    with open(work / "connect-server.log", "wb") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                tail = (work / "connect-server.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the Spark Connect server did not start on port {port}:\n{tail}")
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        end_session(server.pid)
        server.wait()


class CrashAfterCommit:
    """A ``foreachBatch`` function: ``sink``'s, then, once, SIGKILL of the process that runs it
    right after batch ``batch_id`` committed, while file ``marker`` exists (it is removed first):
    a crash between the sink's commit and Spark's commit log. Defined here, not in a test, so
    that a Spark Connect server (tests/ on its path) unpickles it by reference."""

    def __init__(self, sink: streaming.ForeachBatchSink, batch_id: int, marker: str) -> None:
        self.sink = sink
        self.batch_id = batch_id
        self.marker = marker

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.sink(df, batch_id)
        if batch_id == self.batch_id and os.path.exists(self.marker):
            os.unlink(self.marker)
            os.kill(os.getpid(), signal.SIGKILL)


class MergeBatches:
    """A ``foreachBatch`` function that upserts each micro-batch into ``table`` with
    ``streaming.merge`` (rows whose ``v`` is negative delete their key), exactly once per batch
    id; then, once, SIGKILL of its process right after batch ``crash_after`` landed while file
    ``marker`` exists, as :class:`CrashAfterCommit`. Unpickled by reference by a Connect server."""

    def __init__(self, table: str, checkpoint: str, *, crash_after: int = -1, marker: str = "") -> None:
        self.table = table
        self.checkpoint = checkpoint
        self.crash_after = crash_after
        self.marker = marker

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        (streaming.merge(df, self.table, batch_id=batch_id, checkpoint_location=self.checkpoint)
         .when_matched_delete("source.v < 0").when_matched_update()
         .when_not_matched_insert(condition="source.v >= 0")
         .execute())
        if batch_id == self.crash_after and os.path.exists(self.marker):
            os.unlink(self.marker)
            os.kill(os.getpid(), signal.SIGKILL)


QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # short-lived JVMs on a small shared machine


def _wait_for(log: Path, text: str, daemons: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Poll ``log`` until it holds ``text``; RuntimeError when a daemon exits or time runs out."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        exited = [d.args for d in daemons if d.poll() is not None]
        if exited or time.monotonic() > deadline:
            raise RuntimeError(f"no {text!r} in {log} (exited: {exited}):\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


@contextlib.contextmanager
def standalone_cluster(root: Path, *, cores: int = 2, memory: str = "1g") -> Iterator[str]:
    """A Spark standalone master and one worker on loopback, their logs and work directories
    under ``root``: yields the master's URL, and kills both (and every executor) at the end.
    Executors inherit the daemons' environment (this source tree on ``PYTHONPATH``) unless a
    job's ``spark.executorEnv.*`` says otherwise."""
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    root.mkdir(parents=True, exist_ok=True)
    env = child_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(root / "work"), SPARK_LOG_DIR=str(root / "logs"),
                    SPARK_DAEMON_JAVA_OPTS=QUICK_JVM)
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                        "--webui-port", str(free_port())]),
            ("worker", ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1", "--cores",
                        str(cores), "--memory", memory, "--webui-port", str(free_port())]),
        ):
            with (root / f"{name}.log").open("wb") as log:
                daemons.append(subprocess.Popen([spark_class, *command], env=env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for(root / "master.log", "Registering worker", daemons, timeout=120)
        yield master_url
    finally:
        for daemon in daemons:
            end_session(daemon.pid)
            daemon.wait()
