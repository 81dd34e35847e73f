"""changelake on a real standalone cluster (a master and a worker with two cores, started once
for the module): a driver in its own process streams a change feed into a lookup table; the
batches are written by tasks in executor JVMs that the worker launched, not in the driver, and
the table and its changelog come out as the feed says.

The stream runs three times: with the table on local disk, and on S3 (moto's endpoint on
loopback, the ``s3`` fixture), whose storage options (the sink's table's; the data source's
``s3.*`` options) reach the executors inside the pickled table, not through their environment;
and deployed as docs/spark.md tells users to: changelake installed in a virtualenv packed with
venv-pack and shipped by Spark (``spark.archives``), to executors whose Python has no changelake
otherwise, followed by Paimon's procedures on the executors. A 10M-row table is then compacted on
the cluster.

Each Spark driver runs in its own process (a process holds one SparkContext, and this one's
belongs to the test session); everything started here is killed at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import venv_pack
from test_sink import SCHEMA, SPARK_SCHEMA, events, make_table, model

import changelake as cl
from changelake.table.read.live_files import live_entries
from spark_support import SRC, child_env, java_reason, standalone_cluster

JOB = str(Path(__file__).with_name("cluster_job.py"))
DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "cdc_pipeline.py")
BATCHES = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The standalone cluster's master URL."""
    reason = java_reason()
    if reason is not None:
        pytest.skip(reason)
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as master_url:
        yield master_url


def run_job(tmp_path: Path, *args: str, timeout: float = 300) -> dict[str, Any]:
    """Run cluster_job.py as a driver with ``args``; the JSON it prints."""
    log = tmp_path / "driver.log"
    with log.open("wb") as err:
        driver = subprocess.run([sys.executable, JOB, *args], env=child_env(SPARK_LOCAL_IP="127.0.0.1"),
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, timeout=timeout, check=False,
                                start_new_session=True)
    assert driver.returncode == 0, log.read_text(errors="replace")[-3000:]
    return json.loads(driver.stdout.decode().splitlines()[-1])  # type: ignore[no-any-return]


def packed_environment(root: Path) -> Path:
    """A virtualenv with changelake installed, packed by venv-pack, as a user ships it to a
    cluster. Its other packages are links to this interpreter's (copying pyarrow and friends
    would only cost time here); changelake itself is a copy of the source tree's package, and
    the virtualenv's Python imports it from nowhere else (checked before it is installed)."""
    env = root / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not entry.name.startswith(("changelake", "__editable__", "_changelake")) and entry.suffix != ".pth":
            (site / entry.name).symlink_to(entry)
    python = str(env / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    missing = subprocess.run([python, "-c", "import pyarrow, pyspark; import changelake"], env=clean,
                             capture_output=True, text=True, check=False)
    assert "No module named 'changelake'" in missing.stderr, missing.stderr
    shutil.copytree(Path(SRC) / "changelake", site / "changelake", ignore=shutil.ignore_patterns("__pycache__"))
    archive = root / "environment.tar.gz"
    venv_pack.pack(prefix=str(env), output=str(archive))
    return archive


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


@pytest.mark.parametrize("storage", ["local", "s3", "packed-venv"])
def test_a_standalone_cluster_writes_the_stream_on_its_executors(
    cluster: str, tmp_path: Path, storage: str, request: pytest.FixtureRequest
) -> None:
    extra: list[str] = []
    s3 = request.getfixturevalue("s3") if storage == "s3" else None
    if s3 is not None:
        table = cl.Catalog(s3.new_warehouse(), storage_options=s3.storage_options).create_table(
            "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "2", "changelog-producer": "lookup"})
        extra = ["--storage-options", json.dumps(s3.storage_options),
                 "--read-options", json.dumps(s3.paimon_options)]
    else:
        table = make_table(tmp_path, **{"changelog-producer": "lookup"})
    if storage == "packed-venv":
        extra = ["--archive", str(packed_environment(tmp_path)), "--procedures", "compact,rescale,orphans,expire"]
    source = tmp_path / "in"
    source.mkdir()
    for b in range(BATCHES):
        path = source / f"batch-{b}.json"
        path.write_text("\n".join(json.dumps(e) for e in events(b)))
        os.utime(path, (1_000_000 + b, 1_000_000 + b))  # the file source reads in modification order

    result = run_job(tmp_path, "--master", cluster, "--input", str(source), "--table", str(table.location),
                     "--checkpoint", str(tmp_path / "checkpoint"), "--schema", SPARK_SCHEMA, *extra)
    if s3 is not None:
        # docker-compose.yml's pipeline without Docker: the demo on this cluster, on S3.
        options = [a for k, v in s3.paimon_options.items() for a in ("--option", f"{k}={v}")]
        demo = subprocess.run([sys.executable, DEMO, "--master", cluster, "--warehouse", s3.new_warehouse(),
                               *options, "--workdir", str(tmp_path / "demo")],
                              env=child_env(SPARK_LOCAL_IP="127.0.0.1"), capture_output=True, text=True,
                              timeout=300, check=False)
        assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
        assert "batch ids committed to the table: [0, 1, 2] (each once)" in demo.stdout, demo.stdout
        assert "= the source database's final state, exactly" in demo.stdout
        kinds = [line.split()[0] for line in demo.stdout.splitlines()
                 if line.strip()[:2] in ("+I", "-U", "+U", "-D")]
        assert Counter(kinds) == {"+I": 6, "-U": 3, "+U": 3, "-D": 1}

    # It ran on the cluster: each task below an executor JVM, none below the driver.
    assert result["master"] == cluster
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
    if storage != "packed-venv":
        return
    # Spark shipped the packed virtualenv: each task ran its Python and imported its changelake.
    for python, module in result["task_python"]:
        assert python.endswith("/environment/bin/python"), python
        assert "/environment/lib/" in module and not module.startswith(SRC), module
    # Paimon's procedures on the executors, after the stream: the table keeps its rows.
    done = result["procedures"]
    assert done["compact"]["kind"] == "COMPACT" and len(done["compact"]["levels"]) == 1  # one level: the top
    assert done["rescale"]["kind"] == "OVERWRITE" and done["rescale"]["buckets"] == [0, 1, 2]
    assert done["expire"]["expired"] and result["rows_after"] == len(model(BATCHES))


BIG_ROWS, BIG_COMMITS = 10_000_000, 5


def big_table(root: Path) -> cl.Table:
    """A 10M-row upsert table, 4 partitions x 4 buckets, written write-only in five commits (each
    bucket holds five level-0 files): three quarters of each commit new keys, a quarter updates."""
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.int64())])
    table = cl.Catalog(str(root)).create_table("db.big", schema, primary_keys=["dt", "id"], partition_keys=["dt"],
                                               options={"bucket": "4", "write-only": "true"})
    rng = np.random.default_rng(0)
    per_commit = BIG_ROWS // BIG_COMMITS
    fresh = per_commit * 3 // 4
    for c in range(BIG_COMMITS):
        new_ids = np.arange(c * fresh, (c + 1) * fresh)
        updated = rng.choice(max(c * fresh, 1), per_commit - fresh, replace=c * fresh < per_commit - fresh)
        ids = np.concatenate([new_ids, np.unique(updated)])
        table.write(pa.table({"dt": pa.array(np.char.add("d", (ids % 4).astype(str))), "id": ids,
                              "v": np.full(len(ids), c, dtype=np.int64)}, schema=schema))
    return table


def test_a_10m_row_table_compacts_on_the_cluster_as_in_one_process(cluster: str, tmp_path: Path) -> None:
    table = big_table(tmp_path / "warehouse")
    shutil.copytree(table.location, tmp_path / "copy")
    local = cl.open_table(str(tmp_path / "copy"))
    local.compact(full=True)

    result = run_job(tmp_path, "--master", cluster, "--table", table.location, "--procedures", "compact")
    assert result["procedures"]["compact"]["kind"] == "COMPACT"
    for python, _ in result["task_python"]:
        assert not python.endswith("/environment/bin/python")
    table.refresh()

    def summary(t: cl.Table) -> tuple[Any, ...]:
        snapshot = t.latest_snapshot()
        assert snapshot is not None
        entries = live_entries(t.context, snapshot)
        files = sorted((e.partition, e.bucket, e.file.level, e.file.row_count) for e in entries)
        data = t.scan().to_arrow()
        return files, data.num_rows, pa.compute.sum(data["v"]).as_py(), pa.compute.sum(data["id"]).as_py()

    ours, theirs = summary(table), summary(local)
    assert ours == theirs
    assert len(ours[0]) == 16 and len({level for _, _, level, _ in ours[0]}) == 1  # one file a bucket, top level
    assert ours[1] == BIG_COMMITS * (BIG_ROWS // BIG_COMMITS) * 3 // 4  # every key once
