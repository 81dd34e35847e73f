"""Table operations on Spark killed in their driver: after a merge's commit, before the job
knew (the re-run of the merge's batch lands nothing), and inside an OVERWRITE commit before its
snapshot (nothing lands; the files are orphans). After each crash the table reads exactly what
the operations that landed make of it, as the same operations in one process do on a twin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import spark_operations_job as job
from pyspark.sql import SparkSession

import changelake as cl
from changelake.table.io.killpoints import ENVIRONMENT_VARIABLE, KillPoint
from spark_support import child_env

# (operations the job runs, kill point, operations that land): each run starts with what the
# previous one left undone. (The sink's crash test kills its driver before the commit and its
# python workers: the operations land through the same code.)
PLAN = [
    (["merge", "delete"], f"{KillPoint.SINK_COMMITTED}:1", ["merge"]),  # landed; the job never learned it
    (["merge", "delete", "overwrite"], f"{KillPoint.OVERWRITE}:1", ["delete"]),  # the merge's batch: nothing
]
# What the last crash left undone, run in this process's Spark session.
REST = ["merge", "overwrite", "update"]


def test_spark_operations_killed_at_each_point_land_once(spark: SparkSession, tmp_path: Path) -> None:
    table = job.create(str(tmp_path / "warehouse"), "db.t")
    twin = cl.open_table(str(shutil.copytree(table.location, tmp_path / "twin")))
    script = str(Path(job.__file__))
    for operations, kill, landed in PLAN:
        run = subprocess.run([sys.executable, script, "--table", table.location, *operations],
                             env=child_env(**{ENVIRONMENT_VARIABLE: kill}), capture_output=True, text=True,
                             timeout=600, check=False)
        assert run.returncode != 0, f"{operations} survived {kill}"
        for operation in landed:
            job.apply(twin, operation)
        table.refresh()
        assert job.rows_of(table) == job.rows_of(twin), f"after {operations} killed at {kill!r}"
    for operation in REST:  # the merge's batch lands nothing again
        job.OPERATIONS[operation](spark, table)
    for operation in REST[1:]:
        job.apply(twin, operation)
    assert job.rows_of(table) == job.rows_of(twin)
    appends = [s for s in table.snapshots() if s.commit_user == "job" and s.commit_kind is cl.CommitKind.APPEND]
    assert [s.commit_identifier for s in appends] == [0]  # the merge's batch landed once
