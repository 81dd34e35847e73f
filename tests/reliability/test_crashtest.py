"""The crash test at a small size: every mode, every named kill point and random kills, each
kill followed by a check from a fresh process (see crashtest.py and crashtest_verify.py;
``./dev crashtest`` runs the full figure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crashtest
import crashtest_verify
import operations
import pytest
import workload

import changelake as cl
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import live_files
from pypaimon_oracle import Pypaimon

# Three or four kills per mode, every named point at least once (killed the first or second time the
# point is reached, so that a short episode surely reaches it), and random kills. A point that
# other modes reach through the same code is not planned again (the suite's time stays flat).
PLANS = {
    "writer": [KillPoint.MANIFEST, KillPoint.SNAPSHOT_BEFORE_LATEST, crashtest.RANDOM],
    "write": [KillPoint.MANIFEST_LIST, KillPoint.COMPACTION, crashtest.RANDOM],
    "spill": [KillPoint.SPILL_RUN, KillPoint.DATA_FILE, crashtest.RANDOM],
    "compaction": [KillPoint.ORPHAN_FILE, KillPoint.MANIFEST_COMPACTION, KillPoint.ROLLBACK_CONSUMER,
                   KillPoint.ROLLBACK, KillPoint.RESCALE, KillPoint.OVERWRITE],
    "partial-update": [KillPoint.COMPACTION, KillPoint.SNAPSHOT_BEFORE_LATEST, crashtest.RANDOM],
    "aggregation": [KillPoint.SNAPSHOT_BEFORE_LATEST, KillPoint.DATA_FILE, crashtest.RANDOM],
    "first-row": [KillPoint.COMPACTION, KillPoint.MANIFEST, crashtest.RANDOM],
    "changelog": [KillPoint.CHANGELOG_FILE, KillPoint.SPILL_RUN, crashtest.RANDOM],
    "expire": [KillPoint.EXPIRE_SNAPSHOTS, KillPoint.EXPIRE_FILES, KillPoint.EXPIRE_RECORDED],
    "decoupled": [KillPoint.EXPIRE_SNAPSHOTS, KillPoint.EXPIRE_FILES, crashtest.RANDOM],
    "lookup": [KillPoint.BEFORE_COMPACT_SNAPSHOT, KillPoint.CHANGELOG_FILE, crashtest.RANDOM],
    "deletion-vectors": [KillPoint.INDEX_FILE, KillPoint.BEFORE_COMPACT_SNAPSHOT, KillPoint.EXPIRE_FILES],
    "dv-partial-update": [KillPoint.INDEX_FILE, KillPoint.COMPACTION, crashtest.RANDOM],
    "dv-gentle": [KillPoint.INDEX_FILE, KillPoint.BEFORE_COMPACT_SNAPSHOT, crashtest.RANDOM],
    # the compaction point is reached on the background thread
    "dv-async": [KillPoint.COMPACTION, KillPoint.INDEX_FILE, crashtest.RANDOM],
    "dynamic-bucket": [KillPoint.HASH_INDEX, KillPoint.EXPIRE_FILES, crashtest.RANDOM],
    "hint-faults": [KillPoint.HINT_RETRY, KillPoint.SNAPSHOT_BEFORE_LATEST, crashtest.RANDOM],
    "postpone": [KillPoint.COMPACTION, KillPoint.SNAPSHOT_BEFORE_LATEST, crashtest.RANDOM],
    "append": [KillPoint.COMPACTION, KillPoint.DATA_FILE, crashtest.RANDOM],
    # a writer killed mid-commit or while its key index spills: the next bootstraps it again
    "cross-partition": [KillPoint.KEY_INDEX, KillPoint.SNAPSHOT_BEFORE_LATEST, crashtest.RANDOM],
    # ORC and Avro data and changelog files, killed half written and in compaction
    "file-formats": [KillPoint.DATA_FILE, KillPoint.CHANGELOG_FILE, KillPoint.COMPACTION],
    # data files at external paths, killed half written; expiry deletes there
    "external-paths": [KillPoint.DATA_FILE, KillPoint.EXPIRE_FILES, crashtest.RANDOM],
    # data files' index files, killed half written; expiry deletes them with their data files
    "file-index": [KillPoint.FILE_INDEX, KillPoint.EXPIRE_FILES, crashtest.RANDOM],
    # Table operations: a kill inside each ("point@operation" arms the point only while one of
    # that kind runs), in the order an episode runs them; ./dev crashtest kills at every point
    # of each.
    "operations": ["data-file@delete", "snapshot-before-latest@update", "overwrite-written@overwrite",
                   "manifest@merge", "overwrite@drop", "manifest-list@expire", "snapshot-before-latest@truncate"],
    "append-operations": ["row-level-rewritten@delete", "data-file@update", "overwrite@overwrite",
                          "snapshot-before-latest@drop", "overwrite@expire", "manifest@truncate"],
    "dv-operations": ["before-compact-snapshot@delete", "data-file@overwrite", "overwrite@truncate"],
    # branch operations before the writes (branching.py): a kill inside each
    "branches": [KillPoint.BRANCH_CREATED, KillPoint.FAST_FORWARD, KillPoint.BRANCH_DELETE],
    # the writer drops the expired partition after each commit: killed inside the drop
    "partition-expiry": [KillPoint.OVERWRITE, KillPoint.MANIFEST_LIST, crashtest.RANDOM],
}
KILLS = sum(len(p) for p in PLANS.values())


def test_every_kill_point_is_survived(tmp_path: Path, pypaimon: Pypaimon) -> None:
    plans = {mode: [str(p) for p in points] for mode, points in PLANS.items()}
    totals = crashtest.crashtest(str(tmp_path), KILLS, pypaimon_address=pypaimon.address, commits=5, plans=plans,
                                 timeout=60)
    assert not totals.failures, totals.summary(0)
    assert totals.rows.total == 0 and totals.paimon_rows.total == 0 and totals.changelog.total == 0
    assert totals.changelog_rows > 0
    assert totals.kills == KILLS
    expected = {p.value for p in KillPoint if p not in crashtest.SPARK_ONLY}
    assert expected <= {p.partition("@")[0] for p in totals.kills_by_point}, totals.kills_by_point
    landed = {op for op, n in totals.operations_landed.items() if n}
    assert landed == {*operations.Operation, "writer expiry", "nothing to do"}, totals.operations_landed
    assert totals.commits_landed >= 5 * len(PLANS)
    assert totals.key_moves > 0


def test_kill_point_hook(tmp_path: Path) -> None:
    """The hook kills on the N-th time its point is reached and is inert otherwise."""
    src = str(Path(killpoints.__file__).resolve().parents[3])
    script = ("from changelake.table.io import killpoints as k\n"
              "for i in range(3):\n"
              "    k.reached(k.KillPoint.MANIFEST)\n"
              "    print(i, flush=True)\n")

    def run(value: str) -> subprocess.CompletedProcess[str]:
        env = os.environ | {killpoints.ENVIRONMENT_VARIABLE: value, "PYTHONPATH": src}
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)

    killed = run("manifest:2")
    assert killed.returncode == -9 and killed.stdout.split() == ["0"]
    assert run("manifest").stdout.split() == []
    inert = run("data-file")
    assert inert.returncode == 0 and inert.stdout.split() == ["0", "1", "2"]


def test_data_file_kill_leaves_its_row_groups_on_disk(tmp_path: Path) -> None:
    """Data files are written through a buffer, yet the data-file kill point still leaves what
    it promises: a file with its row groups on disk and no footer (which the table never lists)."""
    src = str(Path(killpoints.__file__).resolve().parents[3])
    script = ("import sys, pyarrow as pa, changelake as cl\n"
              "t = cl.Catalog(sys.argv[1]).create_table('db.t', pa.schema([('id', pa.int64()), ('v', pa.string())]),\n"
              "                                         primary_keys=['id'], options={'bucket': '1'})\n"
              "t.write(pa.table({'id': list(range(5000)), 'v': [str(i) for i in range(5000)]}))\n")
    env = os.environ | {killpoints.ENVIRONMENT_VARIABLE: "data-file", "PYTHONPATH": src}
    killed = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == -9, killed.stderr
    (partial,) = (tmp_path / "db.db" / "t" / "bucket-0").glob("data-*.parquet")
    data = partial.read_bytes()
    assert len(data) > 1000 and data.startswith(b"PAR1") and not data.endswith(b"PAR1")


def test_the_model_and_the_orphan_count_see_damage(tmp_path: Path, pypaimon: Pypaimon) -> None:
    """The checks are not vacuous: a deleted data file is reported missing, a stray file is an
    orphan, and a lost commit shows as rows missing from the model."""
    mode = workload.MODES["writer"]
    warehouse = str(tmp_path)
    table = workload.create_table(warehouse, mode.table_options)
    with table.writer(commit_user=crashtest_verify.WRITER_USER) as writer:
        for index in (1, 2):
            for call in workload.commit_rows(mode, 0, 0, index):
                writer.write(workload.to_arrow(call))
            writer.commit(index)
    records = [{"event": "intent", "commit": i} for i in (1, 2, 3)]
    records.insert(1, {"event": "result", "commit": 1, "user": crashtest_verify.WRITER_USER, "snapshots": [1]})
    report = crashtest_verify.verify(table, warehouse, mode, 0, records, pypaimon_address=pypaimon.address)
    assert not report.errors, report.errors
    assert report.start == 2 and report.pending == 3 and not report.pending_landed
    # commit 2's result names a snapshot the table does not have; commit 9 never landed
    bad = [*records, {"event": "result", "commit": 9, "user": crashtest_verify.WRITER_USER, "snapshots": []}]
    bad_report = crashtest_verify.verify(table, warehouse, mode, 0, bad, pypaimon_address=pypaimon.address)
    assert any("commit 9 was skipped" in e for e in bad_report.errors)
    snap = table.latest_snapshot()
    assert snap is not None
    live = next(iter(live_files.live_entries(table.context, snap)))
    open(os.path.join(table.context.bucket_dir(live.partition, live.bucket), "stray.parquet"), "wb").close()
    os.remove(f"{table.context.bucket_dir(live.partition, live.bucket)}/{live.file.file_name}")
    files = workload.check_files(table, table.snapshots())
    assert len(files.missing) == 1
    assert any(p.endswith("stray.parquet") for p in files.orphans)


def test_the_changelog_check_sees_a_lost_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                pypaimon: Pypaimon) -> None:
    """With an input changelog, a changelog that misses one row of its commit is reported."""
    mode = workload.MODES["changelog"]
    warehouse = str(tmp_path)
    table = workload.create_table(warehouse, mode.table_options)
    records = _two_commits(table, mode)
    report = crashtest_verify.verify(table, warehouse, mode, 0, records, pypaimon_address=pypaimon.address)
    assert not report.errors, report.errors
    assert report.changelog_rows == sum(len(c) for i in (1, 2) for c in workload.commit_rows(mode, 0, 0, i))
    real = workload.changelog_rows
    monkeypatch.setattr(workload, "changelog_rows", lambda t, s: real(t, s)[1:])
    errors = crashtest_verify.verify(table, warehouse, mode, 0, records, pypaimon_address=pypaimon.address).errors
    assert any("changelog rows" in e for e in errors) and any("folded" in e for e in errors), errors


def test_the_check_sees_a_key_live_in_two_partitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     pypaimon: Pypaimon) -> None:
    """Cross-partition: commits that move keys check clean (the model moves them too); a read in
    which a moved key is still in its old partition is reported."""
    mode = workload.MODES["cross-partition"]
    warehouse = str(tmp_path)
    table = workload.create_table(warehouse, mode.table_options, mode.primary_keys)
    records = _two_commits(table, mode)
    report = crashtest_verify.verify(table, warehouse, mode, 0, records, pypaimon_address=pypaimon.address)
    assert not report.errors, report.errors
    assert report.key_moves > 0
    real = workload.scan_rows

    def left_behind(t: object, snapshot_id: int | None = None) -> list[workload.Row]:
        rows = real(table, snapshot_id)
        return [*rows, rows[0] | {"p": "y" if rows[0]["p"] == "x" else "x"}]

    monkeypatch.setattr(workload, "scan_rows", left_behind)
    errors = crashtest_verify.verify(table, warehouse, mode, 0, records, pypaimon_address=pypaimon.address).errors
    assert any("on two rows" in e for e in errors), errors


def _two_commits(table: cl.Table, mode: workload.Mode) -> list[dict[str, object]]:
    """Commits 1 and 2 of writer 0 of episode 0, and the records a writer logs of them."""
    records: list[dict[str, object]] = []
    with table.writer(commit_user=crashtest_verify.WRITER_USER) as writer:
        for index in (1, 2):
            for call in workload.commit_rows(mode, 0, 0, index):
                writer.write(workload.to_arrow(call))
            landed = writer.commit(index)
            records += [{"event": "intent", "commit": index},
                        {"event": "result", "commit": index, "user": crashtest_verify.WRITER_USER,
                         "snapshots": [s.id for s in landed]}]
    return records
