"""Expiry and orphan cleanup while two writers commit and a consumer streams the changes: nothing
is lost, every planted orphan older than the threshold goes, no file of an in-flight commit or
a retained snapshot does, and changelake and pypaimon read the table the same at the end.
(Reads during the run are not checked: a snapshot may expire while a slow reader still reads
it, in Paimon as here, when it is older than ``snapshot.time-retained``.)"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl
from pypaimon_oracle import Pypaimon
from stream_follow import fold_until_done

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])
COMMITS = 120
THRESHOLD = dt.timedelta(minutes=1)  # far longer than any commit here takes, retries included


def _paimon_rows(pypaimon: Pypaimon, warehouse: str) -> dict[Any, Any]:
    return {r["k"]: r["v"] for r in pypaimon.read(warehouse, "db.t").to_pylist()}


def _ours(table: cl.Table, **at: Any) -> dict[Any, Any]:
    return {r["k"]: r["v"] for r in table.scan(**at).to_arrow().to_pylist()}


def test_expiry_and_orphan_cleanup_under_two_writers_and_a_stream(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "2", "changelog-producer": "input", "num-sorted-run.compaction-trigger": "3",
        # Snapshots expire once two seconds old (Paimon's snapshot.time-retained, 1 h by
        # default): longer than any compaction here runs, so none loses its input files.
        "snapshot.num-retained.min": "3", "snapshot.time-retained": "2 s",
        # three busy threads share the GIL: a commit's window is long, so it may lose many races
        "commit.max-retries": "100"})
    stream = table.stream(mode="latest", consumer_id="follower")
    stream.commit()
    errors: list[BaseException] = []
    finished = threading.Event()
    planted: list[Path] = []

    def write(user: str, keys: range) -> None:
        try:
            with table.writer(commit_user=user) as writer:
                for identifier in range(1, COMMITS + 1):
                    chosen = list(keys[identifier % 5::5])
                    writer.write(pa.table({"k": pa.array(chosen, pa.int64()),
                                           "v": pa.array([identifier] * len(chosen), pa.int64())}))
                    writer.commit(identifier)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    def maintain() -> None:
        # What crashed writers leave behind: copies of live data files under new names, dated
        # past the threshold; the sweep must take them and nothing a snapshot or a writer needs.
        try:
            while not finished.is_set():
                live = next(Path(table.location).rglob("data-*.parquet"), None)
                if live is not None:
                    orphan = live.with_name(f"data-{uuid.uuid4()}-0.parquet")
                    with contextlib.suppress(FileNotFoundError):  # compacted and expired meanwhile
                        shutil.copyfile(live, orphan)
                        old = time.time() - 2 * THRESHOLD.total_seconds()
                        os.utime(orphan, (old, old))
                        planted.append(orphan)
                table.expire_snapshots()
                table.remove_orphan_files(older_than=THRESHOLD)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(user, keys))
               for user, keys in (("a", range(0, 50)), ("b", range(100, 150)))]
    sweeper = threading.Thread(target=maintain)
    for thread in [*writers, sweeper]:
        thread.start()
    folded = fold_until_done(stream, writers)
    finished.set()
    for thread in [*writers, sweeper]:
        thread.join()
    assert not errors, errors
    table.remove_orphan_files(older_than=THRESHOLD)
    assert planted and not any(p.exists() for p in planted)
    expected = {k: COMMITS - (COMMITS - k % 100) % 5 for k in [*range(0, 50), *range(100, 150)]}
    assert _ours(table) == expected == folded
    assert _paimon_rows(pypaimon, warehouse) == expected
    assert table.snapshots()[0].id > 1  # expiry ran
    for snapshot in table.snapshots():  # every retained snapshot still has all its files
        assert table.scan(snapshot_id=snapshot.id).to_arrow().num_rows == 100
