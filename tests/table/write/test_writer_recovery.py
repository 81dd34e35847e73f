"""Writers survive failed commits, void compactions and tricky float keys."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl
from changelake.changelog import producers
from changelake.table.commit import committer as commit_module
from changelake.table.format.data_file import EMPTY_STATS
from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm.compactor import CompactResult
from changelake.table.read import live_files
from changelake.table.write.writer import TableWrite

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, ["k"], options={"bucket": "1", **options})


def _rows(lo: int, hi: int, v: int) -> pa.Table:
    return pa.table({"k": np.arange(lo, hi), "v": np.full(hi - lo, v)})


def _assert_files_present(table: cl.Table) -> None:
    snap = table.latest_snapshot()
    assert snap is not None
    for e in live_files.live_entries(table.context, snap):
        assert os.path.exists(f"{table.context.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}")


def _meta(name: str, level: int) -> DataFileMeta:
    return DataFileMeta(name, 100, 1, b"", b"", EMPTY_STATS, EMPTY_STATS, 0, 0, 0, level)


def test_a_file_upgraded_by_a_later_compaction_is_kept() -> None:
    earlier = CompactResult(before=[_meta("a", 0), _meta("b", 0)], after=[_meta("h", 4)])
    later = CompactResult(before=[_meta("h", 4)], after=[_meta("h", 4).upgrade(5)])
    assert earlier.merge(later) == []
    assert [(f.file_name, f.level) for f in earlier.after] == [("h", 5)]
    rewritten = CompactResult(before=[_meta("h", 4)], after=[_meta("x", 5)])
    assert [f.file_name for f in CompactResult([], [_meta("h", 4)]).merge(rewritten)] == ["h"]


def test_commit_retried_after_an_io_error_lands_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    writer = table.writer("job")
    writer.write(_rows(0, 10, 1))
    real = commit_module._write_manifest_list
    calls = {"n": 0}

    def flaky(*args: object, **kwargs: object) -> tuple[str, int]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("transient storage error")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(commit_module, "_write_manifest_list", flaky)
    with pytest.raises(OSError, match="transient"):
        writer.commit(1)
    landed = writer.commit(1)
    assert [s.commit_identifier for s in landed] == [1]
    assert table.scan().to_arrow().num_rows == 10
    assert writer.commit(1) == []
    writer.close()


def test_writer_recovers_after_its_compaction_is_voided(tmp_path: Path) -> None:
    table = _table(tmp_path)
    model: dict[int, int] = {}
    with TableWrite(table.context, "job", changelog=producers.for_table(table.context)) as writer:
        for i in range(1, 6):
            writer.write(_rows(i * 100, i * 100 + 1000, i))
            model.update({k: i for k in range(i * 100, i * 100 + 1000)})
            writer.commit(i)
        table.compact(full=True)  # another committer rewrites everything under the writer
        for state in writer._buckets.values():  # let a background compaction finish first
            if state.running is not None:
                state.running.result()
        assert writer.commit(6) == []  # only a compaction to commit, and it is void
        for i in range(7, 14):
            keys = np.arange(150, 1450, 7) + i
            writer.write(pa.table({"k": keys, "v": np.full(len(keys), i)}))
            model.update({int(k): i for k in keys})
            writer.commit(i)
            _assert_files_present(table)
    got = {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
    assert got == model


def test_full_compaction_after_background_compaction_keeps_files(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"target-file-size": "64 kb", "full-compaction.delta-commits": "4"})
    table.write(_rows(0, 100_000, 0))
    table.compact(full=True)
    with table.writer("job") as writer:
        for i in range(1, 9):
            writer.write(_rows(1_000_000 + i * 5_000, 1_000_000 + (i + 1) * 5_000, i))
            writer.commit(i)
            _assert_files_present(table)
    assert table.scan().to_arrow().num_rows == 100_000 + 8 * 5_000


def test_nan_and_signed_zero_float_keys(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("s", pa.string(), nullable=False), pa.field("f", pa.float64(), nullable=False),
                        pa.field("v", pa.int64())])
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.f", schema, ["s", "f"], options={"bucket": "1", "write-buffer-size": "1 mb"})
    # -0.0 and 0.0 are different keys (Java's Double.compare); NaN is one key.
    table.write(pa.table({"s": ["a"] * 4, "f": [-0.0, 0.0, -0.0, 0.0], "v": [1, 2, 3, 4]}))
    rows = sorted((str(r["f"]), r["v"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == [("-0.0", 3), ("0.0", 4)]
    n = 200_000  # large enough to spill, with NaN keys sorting last
    floats = np.arange(n, dtype=np.float64)
    floats[-1] = np.nan
    table.write(pa.table({"s": ["b"] * n, "f": floats, "v": np.arange(n)}))
    assert table.scan().to_arrow().num_rows == 2 + n


AGGREGATED = {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"}


def _failing(monkeypatch: pytest.MonkeyPatch, function: str, marker: str, times: int) -> list[str]:
    """Make ``os.<function>`` (the local store's rename or delete) fail ``times`` times for paths
    holding ``marker``, as a transient store error; returns the paths it failed."""
    real = getattr(os, function)
    failed: list[str] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        target = str(args[-1])
        if marker in target and len(failed) < times:
            failed.append(target)
            raise OSError(errno.EIO, "transient storage error", target)
        return real(*args, **kwargs)

    monkeypatch.setattr(os, function, flaky)
    return failed


def _write_until_it_lands(table: cl.Table, data: pa.Table) -> cl.Snapshot | None:
    """A caller that retries a write that raised, as a retry-happy job does."""
    for _ in range(3):
        try:
            return table.write(data)
        except OSError:
            continue
    raise AssertionError("the write never succeeded")


@pytest.mark.parametrize("times", [1, 3])  # once (the retry writes it), every try (LATEST stays behind)
def test_a_landed_commit_is_not_reported_failed_when_its_latest_hint_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: int) -> None:
    """Issue 23 item 7: once snapshot-N exists the commit has landed; the LATEST hint is retried
    as Paimon's HintFileUtils.commitHint does, and its failure is never the commit's."""
    table = _table(tmp_path, **AGGREGATED)
    table.write(pa.table({"k": [1], "v": [5]}))
    failed = _failing(monkeypatch, "replace", "/snapshot/LATEST", times)
    landed = _write_until_it_lands(table, pa.table({"k": [1], "v": [5]}))
    assert len(failed) == times
    assert landed is not None and landed.id == 2
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 10}]  # applied once, not twice
    assert [s.id for s in table.snapshots()] == [1, 2]
    assert table.latest_snapshot() == landed  # LATEST is walked forward when it stayed behind
    assert (Path(table.location) / "snapshot" / "LATEST").read_text() == ("2" if times < 3 else "1")


def test_a_landed_commit_is_not_reported_failed_when_work_after_it_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Expiry after the commit cannot delete, and a writer's compaction cannot land (its
    manifest list fails): the commit returns its APPEND snapshot, and a retry is a replay."""
    table = _table(tmp_path, **AGGREGATED, **{"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1",
                                              "full-compaction.delta-commits": "1"})
    table.write(pa.table({"k": [1], "v": [5]}))
    failed = _failing(monkeypatch, "remove", "/snapshot/snapshot-", 1)
    assert _write_until_it_lands(table, pa.table({"k": [1], "v": [5]})) is not None
    assert len(failed) == 1
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 10}]

    real = commit_module._write_manifest_list
    lists: list[int] = []

    def compaction_fails(ctx: Any, metas: Any, attempt: Any) -> tuple[str, int]:
        lists.append(len(lists))
        if len(lists) > 2:  # the APPEND's base and delta lists pass, the COMPACT's fail
            raise OSError(errno.EIO, "transient storage error")
        return real(ctx, metas, attempt)

    monkeypatch.setattr(commit_module, "_write_manifest_list", compaction_fails)
    with table.writer("job") as writer:
        writer.write(pa.table({"k": [1], "v": [5]}))
        landed = writer.commit(7)
        assert [s.commit_kind for s in landed] == [cl.CommitKind.APPEND] and len(lists) > 2
        monkeypatch.setattr(commit_module, "_write_manifest_list", real)
        assert writer.commit(7) == []  # a retry of the identifier is a replay
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 15}]
    _assert_files_present(table)
