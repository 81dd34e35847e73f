"""Concurrent commits (threads and processes) and exactly-once commit identifiers."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.changelog import producers
from changelake.errors import CommitConflictError, StorageError, TableNotFoundError
from changelake.table.commit import committer as table_commit
from changelake.table.format import snapshot as table_snapshot
from changelake.table.lsm import compactor
from changelake.table.read import live_files
from changelake.table.write.writer import TableWrite

WRITERS = 4
BATCHES = 5
ROWS_PER_BATCH = 40
SCHEMA = pa.schema([
    pa.field("dt", pa.string()),
    pa.field("id", pa.int64()),
    pa.field("writer", pa.int32()),
    pa.field("batch", pa.int32()),
    pa.field("v", pa.string()),
])
# A commit only loses a race to a commit of another writer that landed meanwhile, so with
# WRITERS * BATCHES commits in all it can never lose more often than that: retries enough
# for every interleaving make the outcome deterministic.
OPTIONS = {"bucket": "4", "commit.max-retries": str(WRITERS * BATCHES + 1)}
_SNAPSHOT_DIR_ENTRY = re.compile(r"^(snapshot-\d+|LATEST|EARLIEST)$")


def _batch(writer: int, batch: int) -> pa.Table:
    """Distinct keys per writer and batch, over two partitions and every bucket."""
    base = (writer * BATCHES + batch) * ROWS_PER_BATCH
    return pa.Table.from_pylist(
        [{"dt": ("d0", "d1")[i % 2], "id": base + i, "writer": writer, "batch": batch, "v": f"w{writer}b{batch}r{i}"}
         for i in range(ROWS_PER_BATCH)],
        schema=SCHEMA,
    )


def _create(tmp_path: Path) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table(
        "db.t", schema=SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options=OPTIONS,
    )


def _rows(table: cl.Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), key=lambda r: (r["dt"], r["id"]))


def _files(root: str, suffix: str) -> set[str]:
    return {os.path.join(d, f) for d, _, names in os.walk(root) for f in names if f.endswith(suffix)}


def _parquet_files(table: cl.Table) -> set[str]:
    return _files(table.location, ".parquet")


def _referenced_metadata(table: cl.Table) -> set[str]:
    """Every manifest and manifest list some snapshot refers to."""
    names: set[str] = set()
    for snap in table.snapshots():
        for list_name in (snap.base_manifest_list, snap.delta_manifest_list):
            names.add(list_name)
            names.update(meta.file_name for meta in live_files.manifest_list(table.context, list_name))
    return {table.context.paths.manifest(n) for n in names}


def _live_data_files(table: cl.Table) -> set[str]:
    return {f"{split.bucket_dir}/{f.file_name}" for split in table.scan().plan() for f in split.files}


def _referenced_data_files(table: cl.Table) -> set[str]:
    """Every data file live in some snapshot (compaction leaves the files it replaced to the
    older snapshots)."""
    return {f"{table.context.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}"
            for snap in table.snapshots() for e in live_files.live_entries(table.context, snap)}


def _check_all_landed(table: cl.Table) -> None:
    """After WRITERS x BATCHES concurrent commits of distinct keys: snapshots 1..N without
    gaps, one APPEND snapshot per commit adding exactly one batch on top of the previous
    snapshot, COMPACT snapshots (at most one per commit, after its APPEND) that change no
    row, nothing lost, nothing left behind by lost races or void compactions."""
    total = WRITERS * BATCHES
    snapshots = table.snapshots()
    assert [s.id for s in snapshots] == list(range(1, len(snapshots) + 1))
    appends = [s for s in snapshots if s.commit_kind == "APPEND"]
    assert len(appends) == total
    assert all(s.commit_kind in ("APPEND", "COMPACT") for s in snapshots)
    appended: set[tuple[str, int]] = set()
    compacted: set[tuple[str, int]] = set()
    for snap in snapshots:
        assert os.path.isfile(table.context.paths.snapshot(snap.id))
        commit = (snap.commit_user, snap.commit_identifier)
        if snap.commit_kind == "APPEND":
            assert commit not in appended
            appended.add(commit)
            assert snap.delta_record_count == ROWS_PER_BATCH
        else:  # the compaction of a commit whose APPEND landed before; keys are distinct
            assert commit in appended and commit not in compacted
            compacted.add(commit)
            assert snap.delta_record_count == 0
        assert snap.total_record_count == len(appended) * ROWS_PER_BATCH
    latest = table.latest_snapshot()
    assert latest is not None and latest.id == len(snapshots)
    leftovers = [n for n in os.listdir(table.context.paths.snapshot_dir) if not _SNAPSHOT_DIR_ENTRY.match(n)]
    assert not leftovers, f"temporary files left in the snapshot directory: {leftovers}"

    # Every snapshot holds all rows of the snapshot before it: an APPEND one adds a whole
    # batch, a COMPACT one changes nothing.
    previous: list[dict[str, Any]] = []
    previous_keys: set[tuple[str, int]] = set()
    batches_seen = set()
    appends_so_far = 0
    for snap in snapshots:
        rows = _rows(table, snap.id)
        keys = {(r["dt"], r["id"]) for r in rows}
        if snap.commit_kind == "COMPACT":
            assert rows == previous, f"compaction snapshot {snap.id} changed the rows"
            continue
        appends_so_far += 1
        assert len(rows) == len(keys) == appends_so_far * ROWS_PER_BATCH
        assert previous_keys <= keys, f"snapshot {snap.id} lost rows of snapshot {snap.id - 1}"
        assert [r for r in rows if (r["dt"], r["id"]) in previous_keys] == previous
        added = {(r["writer"], r["batch"]) for r in rows if (r["dt"], r["id"]) not in previous_keys}
        assert len(added) == 1, f"snapshot {snap.id} added rows of {added}"
        batches_seen |= added
        previous, previous_keys = rows, keys
    assert batches_seen == {(w, b) for w in range(WRITERS) for b in range(BATCHES)}

    expected = sorted((r for w in range(WRITERS) for b in range(BATCHES) for r in _batch(w, b).to_pylist()),
                      key=lambda r: (r["dt"], r["id"]))
    assert _rows(table) == expected
    _check_levels(table)
    # Lost races and void compactions must not leave data files or metadata nobody refers to.
    _check_no_orphans(table)


def _check_levels(table: cl.Table) -> None:
    """Every level >= 1 of every bucket of the latest snapshot is one sorted run."""
    latest = table.latest_snapshot()
    assert latest is not None
    runs: dict[tuple[bytes, int, int], list[Any]] = {}
    for e in live_files.live_entries(table.context, latest):
        if e.file.level > 0:
            runs.setdefault((e.partition, e.bucket, e.file.level), []).append(e.file)
    for files in runs.values():
        key_of = table.context.key_of
        ordered = sorted(files, key=lambda f: key_of(f.min_key))
        for left, right in itertools.pairwise(ordered):
            assert key_of(left.max_key) < key_of(right.min_key), "files of one level overlap"


def _check_no_orphans(table: cl.Table) -> None:
    on_disk = _parquet_files(table)
    assert _live_data_files(table) <= on_disk, "live data files are missing"
    assert on_disk == _referenced_data_files(table), "data files no snapshot refers to"
    assert _files(table.context.paths.manifest_dir, "") == _referenced_metadata(table)


def test_a_commit_that_fails_before_its_snapshot_leaves_no_manifests(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An error between writing a commit's manifests and creating its snapshot (the store fails
    a manifest list, the table was dropped) removes what the commit wrote, as a lost race does."""
    table = _create(tmp_path)
    table.write(_batch(0, 0))
    before = _rows(table)
    write_list = table_commit._write_manifest_list
    calls = 0

    def failing_second_list(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the base list landed, the delta list fails
            raise StorageError("write failed: injected", file="manifest-list")
        return write_list(*args, **kwargs)

    monkeypatch.setattr(table_commit, "_write_manifest_list", failing_second_list)
    with pytest.raises(StorageError, match="injected"):
        table.write(_batch(0, 1))
    monkeypatch.undo()
    assert _rows(table) == before and len(table.snapshots()) == 1
    _check_no_orphans(table)

    catalog = cl.Catalog(str(tmp_path))
    catalog.drop_table("db.t")
    with pytest.raises(TableNotFoundError):
        table.write(_batch(0, 2))
    assert _files(table.location, "") == set() and not catalog.table_exists("db.t")


@pytest.mark.parametrize("operation", ["write", "overwrite"])
def test_a_commit_whose_hint_fails_after_its_snapshot_landed_keeps_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str) -> None:
    """Once the snapshot file exists the commit has landed: an error writing the hints after it
    must not make the commit clean up the manifests and files the snapshot names."""
    table = _create(tmp_path)
    table.write(_batch(0, 0))

    def broken_hint(*args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("hint writer broke")

    monkeypatch.setattr(table_snapshot, "commit_hint", broken_hint)
    landed = table.write(_batch(0, 1)) if operation == "write" else table.overwrite(_batch(0, 1))
    monkeypatch.undo()
    assert landed is not None and landed.id == 2
    expected = (_batch(0, 1) if operation == "overwrite" else pa.concat_tables([_batch(0, 0), _batch(0, 1)]))
    assert _rows(table) == sorted(expected.to_pylist(), key=lambda r: (r["dt"], r["id"]))
    _check_no_orphans(table)


def test_threads_commit_concurrently(tmp_path: Path) -> None:
    table = _create(tmp_path)
    start = threading.Barrier(WRITERS)

    def run(writer: int) -> int:
        start.wait(timeout=60)
        landed = 0
        for b in range(BATCHES):
            snap = table.write(_batch(writer, b))
            assert snap is not None
            landed += 1
        return landed

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        futures = [pool.submit(run, w) for w in range(WRITERS)]
        assert [f.result(timeout=120) for f in futures] == [BATCHES] * WRITERS
    _check_all_landed(table)
    _check_all_landed(cl.Catalog(str(tmp_path)).get_table("db.t"))


def _process_writer(table: cl.Table, writer: int, start: Any) -> None:
    """Runs in a spawned process: ``table`` arrives pickled."""
    start.wait(timeout=120)
    for b in range(BATCHES):
        if table.write(_batch(writer, b)) is None:
            raise SystemExit(3)


def test_processes_commit_concurrently(tmp_path: Path) -> None:
    table = _create(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    processes = [ctx.Process(target=_process_writer, args=(table, w, start)) for w in range(WRITERS)]
    for p in processes:
        p.start()
    try:
        for p in processes:
            p.join(timeout=180)
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in processes] == [0] * WRITERS
    _check_all_landed(cl.Catalog(str(tmp_path)).get_table("db.t"))


@pytest.mark.parametrize("winner", ["writer", "compact"])
def test_conflicting_compaction_is_dropped(tmp_path: Path, winner: str) -> None:
    """A writer's compaction whose input files another commit (a writer's compaction, or
    ``table.compact``) removed meanwhile is void: its APPEND snapshot lands, its compaction
    output is deleted, no row is lost."""
    table = _create(tmp_path)
    table.write(_batch(3, 0))
    loser = TableWrite(table.context, "loser", changelog=producers.for_table(table.context))
    loser.write(_batch(1, 0))
    messages = loser.prepare(full_compaction=True)  # restores (and compacts) snapshot 1's files
    void = {f"{m.bucket_dir(table.context)}/{f.file_name}" for m in messages for f in m.compact_after
            if f not in m.compact_before}
    assert void and void <= _parquet_files(table)

    if winner == "writer":
        other = TableWrite(table.context, "winner", changelog=producers.for_table(table.context))
        other.write(_batch(0, 0))
        won = table_commit.commit(table.context, other.prepare(full_compaction=True), "winner", 1,
                                  compact_conflicts_fatal=False)
        assert [s.commit_kind for s in won] == ["APPEND", "COMPACT"]
        batches = [(3, 0), (0, 0), (1, 0)]
    else:
        won_compaction = table.compact(full=True)
        assert won_compaction is not None and won_compaction.commit_kind == "COMPACT"
        batches = [(3, 0), (1, 0)]
    before = table.latest_snapshot()
    assert before is not None

    landed = table_commit.commit(table.context, messages, "loser", 1, compact_conflicts_fatal=False)
    assert [(s.id, s.commit_kind) for s in landed] == [(before.id + 1, "APPEND")]
    assert [s.id for s in table.snapshots()] == list(range(1, before.id + 2))
    assert not void & _parquet_files(table), "the void compaction left its files behind"
    expected = sorted((r for w, b in batches for r in _batch(w, b).to_pylist()), key=lambda r: (r["dt"], r["id"]))
    assert _rows(table) == expected
    assert _rows(table, before.id) == sorted(
        (r for w, b in batches[:-1] for r in _batch(w, b).to_pylist()), key=lambda r: (r["dt"], r["id"]))
    _check_levels(table)
    _check_no_orphans(table)


# -- exactly-once ------------------------------------------------------------------------


def _state(table: cl.Table) -> tuple[list[int], list[dict[str, Any]], set[str], set[str]]:
    return ([s.id for s in table.snapshots()], _rows(table), _parquet_files(table),
            _files(table.context.paths.manifest_dir, ""))


def test_replayed_identifier_is_skipped(tmp_path: Path) -> None:
    table = _create(tmp_path)
    rows = _batch(0, 0)
    w = table.writer(commit_user="job-1")
    w.write(rows)
    landed = w.commit(identifier=7)
    assert len(landed) == 1
    assert (landed[0].id, landed[0].commit_user, landed[0].commit_identifier) == (1, "job-1", 7)
    before = _state(table)
    assert len(before[2]) > 0

    replay = table.writer(commit_user="job-1")
    replay.write(rows)
    assert replay.commit(identifier=7) == []
    after = _state(table)
    assert after == before, "a replayed identifier changed the table or left files behind"
    # The skipped rows are dropped, not carried into the writer's next commit.
    assert replay.commit(identifier=9) == []
    assert _state(table) == before

    nxt = table.writer(commit_user="job-1")
    nxt.write(_batch(0, 1))
    landed = nxt.commit(identifier=8)
    assert [(s.id, s.commit_identifier) for s in landed] == [(2, 8)]
    assert len(_rows(table)) == 2 * ROWS_PER_BATCH


def test_lower_identifier_is_skipped(tmp_path: Path) -> None:
    table = _create(tmp_path)
    w = table.writer(commit_user="job-1")
    w.write(_batch(0, 0))
    assert len(w.commit(identifier=8)) == 1
    before = _state(table)
    for identifier in (5, 7, 8):
        late = table.writer(commit_user="job-1")
        late.write(_batch(1, identifier))
        assert late.commit(identifier=identifier) == [], identifier
        assert _state(table) == before
    w.write(_batch(0, 1))
    assert [s.commit_identifier for s in w.commit(identifier=9)] == [9]


def test_identifiers_are_per_commit_user(tmp_path: Path) -> None:
    table = _create(tmp_path)
    for user, writer in (("job-1", 0), ("job-2", 1)):
        w = table.writer(commit_user=user)
        w.write(_batch(writer, 0))
        assert [(s.commit_user, s.commit_identifier) for s in w.commit(identifier=7)] == [(user, 7)]
    assert [s.id for s in table.snapshots()] == [1, 2]


def test_replay_is_skipped_after_other_commits(tmp_path: Path) -> None:
    """job-1's identifier is found behind snapshots committed by other users since."""
    table = _create(tmp_path)
    w = table.writer(commit_user="job-1")
    w.write(_batch(0, 0))
    assert len(w.commit(identifier=7)) == 1
    for b in range(1, 4):
        table.write(_batch(1, b))
    before = _state(table)
    replay = table.writer(commit_user="job-1")
    replay.write(_batch(0, 0))
    assert replay.commit(identifier=7) == []
    assert _state(table) == before


def _commit_as(table: cl.Table, user: str, identifier: int, rows: pa.Table) -> list[cl.Snapshot]:
    with table.writer(commit_user=user) as writer:
        writer.write(rows)
        return writer.commit(identifier=identifier)


def _expiring(tmp_path: Path) -> cl.Table:
    """Writers keep the newest two snapshots only."""
    return cl.Catalog(str(tmp_path)).create_table(
        "db.t", schema=SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={**OPTIONS, "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "2"})


def test_a_replay_is_skipped_after_its_snapshots_expired(tmp_path: Path) -> None:
    """job-1 commits 7 and 8, then other writers' commits expire every snapshot of job-1: a
    replay of 8 (or of an earlier identifier) still lands nothing (Paimon's filterCommitted,
    which looks at retained snapshots only, would land it again); 9 lands."""
    table = _expiring(tmp_path)
    assert len(_commit_as(table, "job-1", 7, _batch(0, 0))) == 1
    assert len(_commit_as(table, "job-1", 8, _batch(0, 1))) == 1
    for b in range(3):
        table.write(_batch(1, b))
    assert "job-1" not in {s.commit_user for s in table.snapshots()}
    before = _state(table)
    for identifier in (8, 7, 2):
        assert _commit_as(table, "job-1", identifier, _batch(0, 1)) == [], identifier
        assert _state(table) == before
    # A slower expiry run that expired only 7's snapshot may record it after 8's record: the
    # newest record still counts.
    records = Path(table.location) / "commit-user" / "user-job-1"
    (newest,) = records.iterdir()
    older = json.loads(newest.read_text()) | {"commitIdentifier": 7, "snapshotId": 1}
    (records / "snapshot-1").write_text(json.dumps(older))
    assert _commit_as(table, "job-1", 8, _batch(0, 1)) == []
    assert _state(table) == before
    assert [s.commit_identifier for s in _commit_as(table, "job-1", 9, _batch(0, 2))] == [9]
    assert len(_rows(table)) == 6 * ROWS_PER_BATCH


def test_a_rollback_lets_the_commits_it_drops_land_again(tmp_path: Path) -> None:
    """A rollback to a tag of an expired snapshot drops what expiry recorded of the commits
    after it: their replay lands again, as when their snapshots are still there."""
    table = _expiring(tmp_path)
    table.write(_batch(1, 0))
    table.create_tag("base", 1)
    assert len(_commit_as(table, "job-1", 7, _batch(0, 0))) == 1
    for b in range(1, 4):
        table.write(_batch(1, b))
    assert _commit_as(table, "job-1", 7, _batch(0, 0)) == []
    table.rollback_to(tag="base")
    assert [s.commit_identifier for s in _commit_as(table, "job-1", 7, _batch(0, 0))] == [7]
    assert {(r["writer"], r["batch"]) for r in _rows(table)} == {(1, 0), (0, 0)}


def test_replay_skipped_after_files_were_written_leaves_no_orphans(tmp_path: Path) -> None:
    """Two attempts of identifier 7 (a restarted job) both write their files; the one that
    commits second finds 7 already landed and must delete what it wrote."""
    table = _create(tmp_path)
    table.write(_batch(3, 0))
    rows = _batch(0, 0)
    slow = TableWrite(table.context, "job-1", changelog=producers.for_table(table.context))
    slow.write(rows)
    messages = slow.prepare()
    assert messages and all(m.new_files for m in messages)

    fast = table.writer(commit_user="job-1")
    fast.write(rows)
    assert len(fast.commit(identifier=7)) == 1
    before = _state(table)

    slow_files = {f"{m.bucket_dir(table.context)}/{f.file_name}" for m in messages for f in m.new_files}
    assert slow_files <= before[2]

    assert table_commit.commit(table.context, messages, "job-1", 7) == []
    after = _state(table)
    assert after[:2] == before[:2], "the skipped attempt changed the table"
    assert after[2] == before[2] - slow_files, "the skipped attempt left data files behind"
    assert after[3] == before[3], "the skipped attempt left manifest files behind"
    assert after[2] == _live_data_files(table)
    assert after[3] == _referenced_metadata(table)


def test_racing_replays_of_one_identifier_land_once(tmp_path: Path) -> None:
    """Several attempts of the same (commit_user, identifier) commit at the same time: exactly
    one lands, whatever the interleaving, and the others clean up their files."""
    table = _create(tmp_path)
    table.write(_batch(3, 0))
    rows = _batch(0, 0)
    start = threading.Barrier(WRITERS)

    def attempt(_: int) -> list[cl.Snapshot]:
        w = table.writer(commit_user="job-1")
        w.write(rows)
        start.wait(timeout=60)
        return w.commit(identifier=7)

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        results = list(pool.map(attempt, range(WRITERS), timeout=120))
    landed = [s for r in results for s in r]
    assert len(landed) == 1 and sum(1 for r in results if r == []) == WRITERS - 1
    assert (landed[0].id, landed[0].commit_user, landed[0].commit_identifier) == (2, "job-1", 7)
    assert [s.id for s in table.snapshots()] == [1, 2]
    assert len(_rows(table)) == 2 * ROWS_PER_BATCH
    assert _parquet_files(table) == _live_data_files(table)
    assert _files(table.context.paths.manifest_dir, "") == _referenced_metadata(table)


def test_a_compaction_whose_input_a_concurrent_compaction_expired_is_a_conflict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``compact()`` reads a file that another handle's compaction removed and whose expiry
    deleted it meanwhile: a race, reported as CommitConflictError (the compaction is void, the
    table whole), not as a missing file of a corrupt table; compacting again succeeds."""
    table = _create(tmp_path)
    for batch in range(3):
        table.write(_batch(0, batch))
    expected = _rows(table)
    other = cl.open_table(table.location)
    real = compactor.compact_bucket
    raced: list[bool] = []

    def after_a_concurrent_compaction(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(True)
            other.compact(full=True)
            other.expire_snapshots(retain_min=1, retain_max=1, older_than_ms=2**62)
        return real(*args, **kwargs)

    monkeypatch.setattr(compactor, "compact_bucket", after_a_concurrent_compaction)
    with pytest.raises(CommitConflictError, match="compacted away by a concurrent commit"):
        table.compact(full=True)
    assert _rows(table) == expected
    table.compact(full=True)
    assert _rows(table) == expected
