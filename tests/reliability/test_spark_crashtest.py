"""The Spark crash test at a small size: one streaming pipeline crashed at each kind of place
(the sink's driver before and after its commit, inside the landing, in an executor's python
worker), restarted from its checkpoint each time, checked after every run (see
spark_crashtest.py; ``./dev crashtest --spark`` runs a longer random sequence)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
import spark_crashtest
from spark_crashtest import COMPLETED, KILLED, TASK_FAILED, UNREACHED, Layout, Result

import changelake as cl
from changelake.table.io.killpoints import KillPoint
from spark_support import java_reason

# One file a run, so the kills land deterministically; each run restarts where the last crashed:
# batch 0 is written but not committed; batch 0 commits but Spark never learns it (the restart
# replays it: nothing may land twice); batch 1's compaction kills a python worker; batch 1's
# APPEND lands without its COMPACT (level 0 and no changelog, until the replay moves it up); the
# full compaction on the executors after the stream dies before its commit (orphans only); the
# rescale after it dies before its commit (the new bucket number set: the next run rescales
# again before it streams, and dies in a python worker there); orphan cleanup dies in a python
# worker.
PLAN = [
    (f"{KillPoint.SINK_WRITTEN}:1", KILLED),
    (f"{KillPoint.SINK_COMMITTED}:1", KILLED),
    (f"{KillPoint.COMPACTION}:1", TASK_FAILED),
    (f"{KillPoint.BEFORE_COMPACT_SNAPSHOT}:1", KILLED),
    (f"{KillPoint.SPARK_COMPACTED}:1", KILLED),
    (f"{KillPoint.SPARK_RESCALED}:1", KILLED),
    (f"{KillPoint.RESCALE}:1", TASK_FAILED),
    (f"{KillPoint.ORPHAN_FILE}:1", TASK_FAILED),
]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Layout, Result]:
    """The pipeline after the plan's crashes and a last clean run."""
    reason = java_reason()
    if reason is not None:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("spark-crashtest")
    return Layout(root), spark_crashtest.crashtest(root, [kill for kill, _ in PLAN], files_per_run=1)


def test_a_crashed_query_lands_every_batch_exactly_once(crashed: tuple[Layout, Result]) -> None:
    layout, result = crashed
    assert not result.failures, result.summary(0)
    assert [r.outcome for r in result.runs] == [outcome for _, outcome in PLAN] + [COMPLETED]
    # After each crash exactly the batches before it had landed (the checks held at every step).
    assert [r.landed for r in result.runs] == [0, 1, 1, 2, 5, 6, 6, 8, 9]
    assert [r.settled for r in result.runs] == [True, True, True, False, True, True, True, True, True]
    assert len(result.files) == 9 and result.changelog_rows > 0
    # the last run's rescale landed: one file a bucket, at the top level, every partition in the
    # table's number of buckets; orphan cleanup left only what the table names
    table = cl.open_table(layout.table)
    latest = table.latest_snapshot()
    assert latest is not None and latest.commit_kind is cl.CommitKind.OVERWRITE
    assert {len(b.files) for b in table.inspect().buckets} == {1}
    assert {b.bucket for b in table.inspect().buckets} == set(range(table.context.options.bucket))
    assert table.remove_orphan_files(older_than=dt.timedelta(0), dry_run=True) == []


def test_the_checks_see_damage(crashed: tuple[Layout, Result]) -> None:
    """The checks are not vacuous: a lost event, a batch Spark marks done that never landed, a
    change emitted twice and a commit by someone else are each reported."""
    layout, result = crashed
    files = result.files
    assert not spark_crashtest.verify(layout, files).errors
    lost = spark_crashtest.verify(layout, [*files[:-1], files[-1][1:]]).errors
    assert any("differs from the events" in e for e in lost), lost

    done = layout.checkpoint / "commits" / str(len(files))
    done.write_text("v1\n{}\n")
    assert any("never landed" in e for e in spark_crashtest.verify(layout, files).errors)
    done.unlink()

    table = cl.open_table(layout.table)
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.changes(0, latest.id).to_arrow()
    errors: list[str] = []
    spark_crashtest.fold_changelog(pa.concat_tables([changes, changes.slice(0, 1)]), errors)
    assert any("do not follow" in e for e in errors), errors

    table.write(pa.table({"p": ["x"], "k": [0], "v": [-1]}, schema=spark_crashtest.SCHEMA))
    stranger = spark_crashtest.verify(layout, files).errors
    assert any("other than the query" in e for e in stranger), stranger


# Without lookup-wait the sink's writer stays in its python worker between micro-batches and a
# batch's compaction (level 0 up, with its changelog) lands with a later batch. Two files a run,
# so that each run's second batch carries the first one's compaction: the driver dies after the
# second batch was written (the compaction it carried never lands: the restart replays it from
# scratch); after it landed, before Spark's commit log (the replay lands nothing); between its
# APPEND and COMPACT (the compaction is lost, level 0 goes up with a later one); a python
# worker dies in a compaction (in the background between tasks, or within one: the query fails,
# or Spark starts another worker and the run goes on).
NO_WAIT_PLAN = [
    (f"{KillPoint.SINK_WRITTEN}:2", {KILLED}),
    (f"{KillPoint.SINK_COMMITTED}:2", {KILLED}),
    (f"{KillPoint.BEFORE_COMPACT_SNAPSHOT}:1", {KILLED}),
    (f"{KillPoint.COMPACTION}:1", {TASK_FAILED, UNREACHED}),
]


def test_a_crashed_query_without_lookup_wait_loses_no_change(tmp_path: Path) -> None:
    reason = java_reason()
    if reason is not None:
        pytest.skip(reason)
    layout = Layout(tmp_path)
    result = spark_crashtest.crashtest(tmp_path, [kill for kill, _ in NO_WAIT_PLAN], files_per_run=2,
                                       options={**spark_crashtest.OPTIONS, "lookup-wait": "false"})
    assert not result.failures, result.summary(0)
    assert all(r.outcome in outcomes for r, (_, outcomes) in zip(result.runs, NO_WAIT_PLAN, strict=False))
    assert result.runs[-1].outcome == COMPLETED and result.landed == len(result.files) == 10
    # The compactions the crashes lost leave level 0, whose changelog a compaction makes: then
    # the changelog folded is the table, which is the events folded (nothing lost or doubled).
    table = cl.open_table(layout.table)
    table.compact()
    latest = table.latest_snapshot()
    assert latest is not None and not spark_crashtest.has_level0(table, latest)
    errors: list[str] = []
    folded = spark_crashtest.fold_changelog(table.changes(0, latest.id).to_arrow(), errors)
    assert not errors
    assert folded == spark_crashtest.read_rows(table, latest.id) == spark_crashtest.fold(
        e for events in result.files for e in events)
    user = spark_crashtest.query_id(layout.checkpoint)
    assert any(s.commit_kind is cl.CommitKind.COMPACT and s.commit_user == user for s in table.snapshots()), \
        "no batch carried a compaction"
