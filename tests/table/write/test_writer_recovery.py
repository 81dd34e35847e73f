"""Writers survive failed commits, void compactions and tricky float keys."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
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
from changelake.table.lsm import compactor, lookup_files
from changelake.table.lsm.compactor import CompactResult
from changelake.table.read import deletion_vectors as read_vectors
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


def test_abort_after_a_failed_commit_drops_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit that failed (an I/O error before its snapshot) keeps its files for a retry;
    ``abort()`` drops them: the rows of that commit never land with a later one."""
    table = _table(tmp_path)
    writer = table.writer("job")
    writer.write(_rows(0, 10, 1))
    real = commit_module._write_manifest_list

    def failing(*args: object, **kwargs: object) -> tuple[str, int]:
        raise OSError("transient storage error")

    monkeypatch.setattr(commit_module, "_write_manifest_list", failing)
    with pytest.raises(OSError, match="transient"):
        writer.commit(1)
    monkeypatch.setattr(commit_module, "_write_manifest_list", real)
    writer.abort()
    writer.write(_rows(20, 25, 2))
    assert [s.commit_identifier for s in writer.commit(2)] == [2]
    assert sorted(table.scan().to_arrow().column("k").to_pylist()) == list(range(20, 25))
    writer.close()


def test_abort_after_a_failed_compaction_deletes_the_new_files_it_took_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit's compaction of one bucket takes in the new level-0 file, another bucket's
    compaction fails: ``abort()`` deletes the new files too, leaving only committed ones."""
    table = _table(tmp_path, bucket="2", **{"full-compaction.delta-commits": "1"})
    table.write(_rows(0, 100, 1))
    committed = {p.name for p in Path(table.location).rglob("data-*")}
    real = compactor.compact_bucket
    calls: list[int] = []

    def second_fails(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(calls))
        if len(calls) == 2:
            raise OSError(errno.EIO, "transient storage error")
        return real(*args, **kwargs)

    monkeypatch.setattr(compactor, "compact_bucket", second_fails)
    writer = table.writer("job")
    writer.write(_rows(0, 100, 2))
    with pytest.raises(OSError, match="transient"):
        writer.commit(1)
    assert len(calls) == 2
    writer.abort()
    assert {p.name for p in Path(table.location).rglob("data-*")} == committed
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


# -- a compaction whose inputs another writer's commit removed and its expiry deleted ------------

RACING = {"num-sorted-run.compaction-trigger": "2", "snapshot.num-retained.min": "1",
          "snapshot.num-retained.max": "1"}


def _live_paths(table: cl.Table) -> set[str]:
    snap = table.latest_snapshot()
    assert snap is not None
    return {f"{table.context.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}"
            for e in live_files.live_entries(table.context, snap)}


def _data_files(table: cl.Table) -> set[str]:
    """Data files present (changelog files aside)."""
    return {os.path.join(d, n) for d, _, names in os.walk(table.location) for n in names if n.startswith("data-")}


class _Model:
    """The table as its commits say it must be: each commit's rows win over the earlier ones."""

    def __init__(self, table: cl.Table) -> None:
        self.table = table
        self.rows: dict[int, int] = {}

    def commit(self, writer: cl.TableWriter, identifier: int, keys: Sequence[int], value: int) -> list[cl.CommitKind]:
        writer.write(pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([value] * len(keys), pa.int64())}))
        kinds = [s.commit_kind for s in writer.commit(identifier)]
        self.rows.update(dict.fromkeys(keys, value))
        got = self.table.scan().to_arrow()
        assert got.num_rows == len(self.rows)
        assert dict(zip(got.column("k").to_pylist(), got.column("v").to_pylist(), strict=True)) == self.rows
        _assert_files_present(self.table)
        return kinds


def _after_next_rebase(monkeypatch: pytest.MonkeyPatch, other_writers: Callable[[], object]) -> None:
    """Run ``other_writers`` once, right after the next writer rebases a bucket's levels on what
    is committed (before it compacts): the race a compaction must survive, as narrow as it gets."""
    rebase = TableWrite._refresh
    armed = [True]

    def rebase_then_race(self: TableWrite, state: Any, files: list[DataFileMeta]) -> None:
        rebase(self, state, files)
        if armed[0]:
            armed[0] = False  # the other writers' own rebases pass here too
            other_writers()

    monkeypatch.setattr(TableWrite, "_refresh", rebase_then_race)


@pytest.mark.parametrize("where", ["in the commit", "in the background"])
def test_a_compaction_whose_input_another_writer_compacted_away_and_expired_is_void(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The race behind a "data file is missing" from ``writer.commit`` under two writers:
    writer a's levels name its file F, which writer b's compaction removed and b's expiry
    (retain max 1) then deleted right after a rebased them on the table; a's next compaction
    (in its commit, or in the background and collected by a later commit) finds F missing. As a
    compaction a concurrent commit voided, it is void: a's rows land without it, a's view is
    rebased on the table, and later commits of both writers compact again; the table always
    matches the model, with no file left over."""
    mode = {"commit.force-compact": "true"} if where == "in the commit" else {"num-sorted-run.stop-trigger": "2"}
    table = _table(tmp_path, **RACING, **mode)
    model = _Model(table)
    with table.writer("a") as a, table.writer("b") as b:
        assert model.commit(a, 1, range(0, 100), 1) == [cl.CommitKind.APPEND]  # one run: no compaction
        (f,) = _live_paths(table)
        model.commit(b, 1, range(100, 200), 2)  # b's levels: F and its own file

        def b_compacts_f_away() -> None:
            model.commit(b, 2, range(200, 300), 3)  # F compacted away (b's third run forces it at the latest)
            assert f not in _live_paths(table) and not os.path.exists(f), "b's expiry deleted F"

        _after_next_rebase(monkeypatch, b_compacts_f_away)
        # a's levels name F and b's file: their compaction runs in this commit (void: nothing
        # lands), or starts in the background ...
        assert a.commit(2) == []
        assert not os.path.exists(f)
        # ... and the next commit, past the stop trigger, takes it in (void: it lands nothing). If
        # it had not started yet, that commit compacts afresh from the table as committed instead,
        # and that compaction may land: which happens is the scheduler's choice.
        third = model.commit(a, 3, range(50, 150), 5)
        if where == "in the background":
            assert third[0] == cl.CommitKind.APPEND and not os.path.exists(f)
        kinds = []
        for identifier in range(3, 9):  # both writers go on, each compacting what the other wrote
            kinds += model.commit(b, identifier, range(identifier * 37, identifier * 37 + 100), identifier * 10)
            kinds += model.commit(a, identifier + 1, range(identifier * 23, identifier * 23 + 100), identifier * 10 + 1)
    assert cl.CommitKind.COMPACT in kinds
    assert _data_files(table) == _live_paths(table), "a void compaction left files behind"


@pytest.mark.parametrize("new_keys", [
    range(2, 20_002),  # F is merged in the rewrite whose files rolled over first
    [*range(2, 20_002), *range(500_000, 510_000), 2_000_000],  # after that rewrite, a file moved up, F merged
], ids=["in-the-rewrite", "after-a-rewrite"])
def test_a_void_compaction_deletes_what_it_and_the_compactions_before_it_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_keys: Sequence[int]) -> None:
    """Writer a's full compaction (every third commit) first collects a background compaction of
    two small files, then merges its new rows with them (rolling past ``target-file-size``) and
    only then reads F, which another writer's write compacted away and expired: the compaction
    is void, and neither the files it wrote before F nor the collected compaction's output is
    left behind; the new rows land, and the next commit compacts again."""
    table = _table(tmp_path, **RACING, **{"full-compaction.delta-commits": "3", "target-file-size": "8 kb"})
    model = _Model(table)
    high = 1_000_000  # F's keys: above the others but 2,000,000, so that F is merged last
    with table.writer("a") as a:
        model.commit(a, 1, range(high, high + 250), 1)
        model.commit(a, 2, range(high + 250, high + 500), 2)
        assert model.commit(a, 3, range(high + 500, high + 750), 3)[-1] is cl.CommitKind.COMPACT
        (f,) = _live_paths(table)  # small enough to be rewritten, not moved, by a full compaction
        # two small files spanning the keys below 100,000 (and much smaller than F): they compact
        # in the background, without F, and their output overlaps the next flush's files there
        model.commit(a, 4, [0, 100_000], 5)
        model.commit(a, 5, [1, 99_999], 6)

        def another_writer_compacts_f_away() -> None:
            table.write(_rows(high, high + 1300, 4))  # compacts F away; its expiry deletes F
            model.rows.update(dict.fromkeys(range(high, high + 1300), 4))
            assert not os.path.exists(f)

        _after_next_rebase(monkeypatch, another_writer_compacts_f_away)
        assert model.commit(a, 6, new_keys, 7) == [cl.CommitKind.APPEND]  # full, void
        assert _data_files(table) == _live_paths(table), "a void compaction left files behind"
        assert model.commit(a, 7, range(5, 25), 8)[-1] is cl.CommitKind.COMPACT  # rebased: compacts again
    assert _data_files(table) == _live_paths(table)


@pytest.mark.parametrize("lost", ["committed", "new"])
def test_a_missing_file_no_commit_removed_still_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: str) -> None:
    """A compaction input that is missing although the latest snapshot names it (``committed``),
    or that the commit itself would land (``new``: flushed by a write past the buffer), is a lost
    file, not a race: the commit raises CorruptMetadataError naming it and lands nothing."""
    monkeypatch.setattr(lookup_files, "WRITTEN_ROWS_MEMORY", 0)  # compactions read the files, not a copy
    table = _table(tmp_path, **RACING, **{"commit.force-compact": "true", "write-buffer-size": "1 kb",
                                          "write-buffer-spillable": "false"})
    with table.writer("a") as a:
        a.write(_rows(0, 100, 1))
        a.commit(1)
        before = _live_paths(table)
        a.write(_rows(0, 100, 2))  # flushed: past the buffer
        gone = min(before if lost == "committed" else _data_files(table) - before)
        os.remove(gone)
        with pytest.raises(cl.errors.CorruptMetadataError, match="data file is missing") as raised:
            a.commit(2)
        assert raised.value.file == gone
    assert [s.id for s in table.snapshots()] == [1]


@pytest.mark.parametrize("lookup", [{"deletion-vectors.enabled": "true"}, {"changelog-producer": "lookup"}],
                         ids=["deletion-vectors", "lookup-changelog"])
def test_a_lookup_compaction_whose_input_another_writer_compacted_away_and_expired_is_void(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lookup: dict[str, str]) -> None:
    """Compactions that look up older levels rebase on the latest snapshot when they start;
    another writer's compaction and expiry between that read and the compaction (driven here
    from the writer's read of the snapshot's deletion vectors) delete a file it looks up. The
    compaction is void, the rows land, and their level 0 is moved up from the table as it is."""
    table = _table(tmp_path, **{"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"}, **lookup)
    model = _Model(table)
    with table.writer("a") as a:
        model.commit(a, 1, range(0, 100), 1)
        (f,) = _live_paths(table)
        real = read_vectors.snapshot_vectors

        def others_compact_meanwhile(ctx: Any, snapshot: Any) -> Any:
            found = real(ctx, snapshot)
            monkeypatch.setattr(read_vectors, "snapshot_vectors", real)
            table.write(_rows(50, 250, 2))  # its level 0 goes up over F, and its expiry deletes F
            model.rows.update(dict.fromkeys(range(50, 250), 2))
            return found

        monkeypatch.setattr(read_vectors, "snapshot_vectors", others_compact_meanwhile)
        kinds = model.commit(a, 2, range(0, 100), 3)
        assert read_vectors.snapshot_vectors is real and not os.path.exists(f)
        assert kinds == [cl.CommitKind.APPEND]  # its own compaction was void
        assert not any(file.level == 0 for split in table.scan().plan() for file in split.files), "level 0 went up"
        model.commit(a, 3, range(150, 300), 4)
    assert _data_files(table) == _live_paths(table), "a void compaction left files behind"



def test_a_compaction_keeps_retractions_of_rows_another_writer_landed_since_the_writer_looked(
        tmp_path: Path) -> None:
    """A long-lived writer's compaction that takes in every file it knows of its bucket drops
    retractions (its output is the bottom level): the files other writers landed in the bucket
    since this writer last looked must be among them, or the rows those retractions retract
    (older than them) come back."""
    # The other writer never compacts; this one compacts two sorted runs at commit.
    table = _table(tmp_path, **{"write-only": "true", "num-sorted-run.compaction-trigger": "2",
                                "commit.force-compact": "true"})
    with table.writer(commit_user="other") as other:
        table.reset_options(["write-only"])
        with cl.open_table(table.location).writer(commit_user="one") as writer:
            writer.write(_rows(0, 5, 1))
            assert writer.commit(1)
            other.write(_rows(5, 10, 2))  # rows in the bucket since this writer looked
            assert other.commit(1)
            writer.write(pa.table({"k": np.arange(3, 8), "v": np.full(5, 3), "rowkind": ["-D"] * 5}))
            landed = writer.commit(2)
    assert [s.commit_kind for s in landed] == [cl.CommitKind.APPEND, cl.CommitKind.COMPACT]
    assert sorted(table.scan().to_arrow().column("k").to_pylist()) == [0, 1, 2, 8, 9]
    _assert_files_present(table)
