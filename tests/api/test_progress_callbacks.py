"""The optional ``progress`` callbacks of the long maintenance methods: (done, total) calls that
climb to the total, and the same results as without a callback."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa

import changelake


def _table(tmp_path: Path, name: str) -> changelake.Table:
    table = changelake.Catalog(str(tmp_path)).create_table(
        name, pa.schema([("id", pa.int64()), ("v", pa.string())]), ["id"], options={"bucket": "3"})
    for round_ in range(3):
        table.write(pa.table({"id": list(range(30)), "v": [f"r{round_}"] * 30}))
    return table


def _check(calls: list[tuple[int, int]], total: int) -> None:
    assert calls, "progress was never reported"
    assert calls[-1] == (total, total)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert all(seen == total for _, seen in calls)


def test_compact_reports_each_bucket(tmp_path: Path) -> None:
    table = _table(tmp_path, "db.t")
    calls: list[tuple[int, int]] = []
    landed = table.compact(full=True, progress=lambda done, total: calls.append((done, total)))
    assert landed is not None
    _check(calls, 3)
    assert table.scan().to_arrow().num_rows == 30


def test_expire_reports_each_deleted_file(tmp_path: Path) -> None:
    table = _table(tmp_path, "db.t")
    table.compact(full=True)
    calls: list[tuple[int, int]] = []
    result = table.expire_snapshots(retain_min=1, retain_max=1,
                                    progress=lambda done, total: calls.append((done, total)))
    assert result.snapshots == (1, 2, 3)
    _check(calls, result.data_files + result.changelog_files + result.manifests)


def test_orphan_search_reports_each_directory(tmp_path: Path) -> None:
    table = _table(tmp_path, "db.t")
    orphan = Path(table.location) / "bucket-0" / "data-orphan.parquet"
    orphan.write_bytes(b"left by a crashed writer")
    old = time.time() - 3 * 86400
    os.utime(orphan, (old, old))
    calls: list[tuple[int, int]] = []
    found = table.remove_orphan_files(dry_run=True, progress=lambda done, total: calls.append((done, total)))
    assert found == [str(orphan)]
    # snapshot, changelog, schema, tag and consumer directories, the manifests, the deletion
    # vectors' index files and 3 buckets
    _check(calls, 10)
