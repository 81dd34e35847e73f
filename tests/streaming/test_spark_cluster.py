"""The sink on a real standalone cluster (a master and a worker with two cores, started here):
a driver in its own process streams a change feed into a lookup table; the batches are written
by tasks in executor JVMs that the worker launched, not in the driver, and the table and its
changelog come out as the feed says.

It runs twice: with the table on local disk, and on S3 (moto's endpoint on loopback, the
``s3`` fixture), whose storage options (the sink's table's; the data source's ``s3.*`` options)
reach the executors inside the pickled table, not through their environment.

Each Spark runs in its own process (a process holds one SparkContext, and this one's belongs to
the test session); everything started here is killed at the end.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_sink import SCHEMA, SPARK_SCHEMA, events, make_table, model

import changelake as cl
from spark_support import child_env, end_session, java_reason

JOB = str(Path(__file__).with_name("cluster_job.py"))
DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "cdc_pipeline.py")
BATCHES = 3
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"  # short-lived JVMs on a small shared machine


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(log: Path, text: str, daemons: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Poll ``log`` until it holds ``text``; fail when a daemon exits or time runs out."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        exited = [d.args for d in daemons if d.poll() is not None]
        if exited or time.monotonic() > deadline:
            pytest.fail(f"no {text!r} in {log} (exited: {exited}):\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def fold(changes: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[Any, Any]]:
    """The table a changelog makes."""
    state: dict[tuple[str, int], tuple[Any, Any]] = {}
    for c in changes:
        key = (c["dt"], c["id"])
        if c["rowkind"] in ("+I", "+U"):
            state[key] = (c["v"], c["name"])
        else:
            state.pop(key)
    return state


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_a_standalone_cluster_writes_the_stream_on_its_executors(
    tmp_path: Path, storage: str, request: pytest.FixtureRequest
) -> None:
    reason = java_reason()
    if reason is not None:
        pytest.skip(reason)
    import pyspark

    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    storage_args: list[str] = []
    s3 = request.getfixturevalue("s3") if storage == "s3" else None
    if s3 is not None:
        table = cl.Catalog(s3.new_warehouse(), storage_options=s3.storage_options).create_table(
            "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "2", "changelog-producer": "lookup"})
        storage_args = ["--storage-options", json.dumps(s3.storage_options),
                        "--read-options", json.dumps(s3.paimon_options)]
    else:
        table = make_table(tmp_path, **{"changelog-producer": "lookup"})
    source = tmp_path / "in"
    source.mkdir()
    for b in range(BATCHES):
        path = source / f"batch-{b}.json"
        path.write_text("\n".join(json.dumps(e) for e in events(b)))
        os.utime(path, (1_000_000 + b, 1_000_000 + b))  # the file source reads in modification order

    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    env = child_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp_path / "work"),
                    SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_DAEMON_JAVA_OPTS=QUICK_JVM)
    daemons: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp_path / f"{name}.log" for name in ("master", "worker", "driver")}
    try:
        for name, command in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                        "--webui-port", str(free_port())]),
            ("worker", ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1", "--cores", "2",
                        "--memory", "1g", "--webui-port", str(free_port())]),
        ):
            with logs[name].open("wb") as log:
                daemons.append(subprocess.Popen([spark_class, *command], env=env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(logs["master"], "Registering worker", daemons, timeout=120)

        with logs["driver"].open("wb") as log:
            driver = subprocess.Popen(
                [sys.executable, JOB, "--master", master_url, "--input", str(source), "--table", str(table.location),
                 "--checkpoint", str(tmp_path / "checkpoint"), "--schema", SPARK_SCHEMA, *storage_args],
                env=env, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
            daemons.append(driver)
            out, _ = driver.communicate(timeout=240)
        assert driver.returncode == 0, logs["driver"].read_text(errors="replace")[-3000:]
        if s3 is not None:
            # docker-compose.yml's pipeline without Docker: the demo on this cluster, on S3.
            options = [a for k, v in s3.paimon_options.items() for a in ("--option", f"{k}={v}")]
            demo = subprocess.run([sys.executable, DEMO, "--master", master_url, "--warehouse", s3.new_warehouse(),
                                   *options, "--workdir", str(tmp_path / "demo")],
                                  env=env, capture_output=True, text=True, timeout=300, check=False)
            assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
            assert "batch ids committed to the table: [0, 1, 2] (each once)" in demo.stdout, demo.stdout
            assert "= the source database's final state, exactly" in demo.stdout
            kinds = [line.split()[0] for line in demo.stdout.splitlines()
                     if line.strip()[:2] in ("+I", "-U", "+U", "-D")]
            assert Counter(kinds) == {"+I": 6, "-U": 3, "+U": 3, "-D": 1}
    finally:
        for daemon in daemons:
            end_session(daemon.pid)
            daemon.wait()
    result = json.loads(out.decode().splitlines()[-1])

    # It ran on the cluster: each task below an executor JVM, none below the driver.
    assert result["master"] == master_url
    assert len(result["task_ancestry"]) == 2
    for chain in result["task_ancestry"]:
        assert any("CoarseGrainedExecutorBackend" in command for _, command in chain), chain
        assert result["driver_pid"] not in [pid for pid, _ in chain], chain
    # Each batch landed once, committed by the query, and the table is the feed's.
    assert result["batches"] == list(range(BATCHES))
    assert result["commit_users"] == [result["query_id"]]
    assert {(r["dt"], r["id"]): (r["v"], r["name"]) for r in result["rows"]} == model(BATCHES)
    # The lookup changelog, made on the executors, replays to the same table.
    assert fold(result["changes"]) == model(BATCHES)
    assert Counter(c["rowkind"] for c in result["changes"]) == {"+I": 120, "-U": 20, "+U": 20, "-D": 8}
