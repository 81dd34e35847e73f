"""The compaction picker on hand-built level layouts, and compaction through the public API."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.table.executor import compaction_executor
from changelake.table.format.manifest import DataFileMeta, FileKind, SimpleStats
from changelake.table.lsm.levels import LevelSortedRun, SortedRun
from changelake.table.lsm.universal import PickRule, UniversalCompaction, create_unit, pick_full
from changelake.table.read import live_files

_STATS = SimpleStats(b"", b"", ())


def _file(name: str, size: int, level: int) -> DataFileMeta:
    return DataFileMeta(name, size, 1, b"", b"", _STATS, _STATS, 0, 0, 0, level)


def _runs(*spec: tuple[int, int]) -> list[LevelSortedRun]:
    """Runs from (level, size) pairs, newest first."""
    return [LevelSortedRun(level, SortedRun((_file(f"f{i}", size, level),))) for i, (level, size) in enumerate(spec)]


def _names(unit: object) -> list[str]:
    return [f.file_name for f in unit.files]  # type: ignore[attr-defined]


PICKER = UniversalCompaction(max_size_amplification_percent=200, size_ratio=1, compaction_trigger=5)


def test_size_amplification_picks_everything_into_the_top_level() -> None:
    runs = _runs((0, 100), (0, 100), (0, 100), (0, 100), (5, 100))
    unit = PICKER.pick(6, runs)
    assert unit is not None and unit.output_level == 5 and len(unit.files) == 5


def test_size_ratio_merges_similar_adjacent_runs_into_the_level_below_the_next() -> None:
    runs = _runs((0, 10), (0, 10), (0, 10), (0, 10), (5, 1000))
    unit = PICKER.pick(6, runs)
    assert unit is not None and unit.output_level == 4
    assert _names(unit) == ["f0", "f1", "f2", "f3"]


def test_run_count_above_trigger_forces_a_pick() -> None:
    # The newest run is tiny and the next is large, so the size-ratio pass picks nothing.
    runs = _runs((0, 1), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100), (5, 1_000_000))
    unit = PICKER.pick(6, runs)
    assert unit is not None and unit.output_level == 4
    assert _names(unit) == ["f0", "f1", "f2", "f3", "f4", "f5"]


def test_nothing_below_the_trigger() -> None:
    assert PICKER.pick(6, _runs((0, 10), (0, 10), (0, 10), (5, 1000))) is None


@pytest.mark.parametrize(("spec", "rule", "words"), [
    ([(0, 100), (0, 100), (0, 100), (0, 100), (5, 100)], PickRule.SIZE_AMPLIFICATION,
     "size amplification 400% > compaction.max-size-amplification-percent 200"),
    ([(0, 10), (0, 10), (0, 10), (0, 10), (5, 1000)], PickRule.SIZE_RATIO, "the newest 4 runs"),
    ([(0, 1), (0, 100), (0, 100), (0, 100), (0, 100), (0, 100), (5, 1_000_000)], PickRule.RUN_COUNT,
     "7 sorted runs > num-sorted-run.compaction-trigger 5: the newest 6 runs into level 4"),
    ([(0, 10), (0, 10), (0, 10), (5, 1000)], PickRule.NONE,
     "nothing: 4 sorted runs < num-sorted-run.compaction-trigger 5"),
])  # fmt: skip
def test_explain_names_the_rule_and_its_numbers(spec: list[tuple[int, int]], rule: PickRule, words: str) -> None:
    runs = _runs(*spec)
    pick = PICKER.explain(6, runs)
    assert (pick.rule, pick.unit) == (rule, PICKER.pick(6, runs))
    assert words in pick.reason


def test_explain_level0_forces_level0_up_when_nothing_else_is_picked() -> None:
    pick = PICKER.explain_level0(6, _runs((0, 10), (0, 10), (5, 1000)))
    assert pick.rule is PickRule.FORCE_LEVEL0_UP and pick.unit is not None and _names(pick.unit) == ["f0", "f1"]
    assert "nothing: 3 sorted runs < num-sorted-run.compaction-trigger 5" in pick.reason
    assert PICKER.explain_level0(6, _runs((5, 1000))).rule is PickRule.NONE


def test_forced_level0_goes_up_with_level1_and_weighs_level2_against_both() -> None:
    # Paimon's ForceUpLevel0CompactionTest: level 1 joins whatever its size, and level 2 joins
    # when level 0 and level 1 together reach it (level 1 would otherwise grow at every commit).
    force = PICKER.pick_level0
    assert (unit := force(3, _runs((0, 1), (1, 99), (2, 100)))) is not None
    assert (len(unit.files), unit.output_level) == (3, 2)
    assert (unit := force(3, _runs((0, 1), (1, 99), (2, 102)))) is not None
    assert (len(unit.files), unit.output_level) == (2, 1)
    assert (unit := force(3, _runs((0, 1), (1, 10)))) is not None and unit.output_level == 2
    assert (unit := force(3, _runs((0, 1), (0, 5), (2, 10)))) is not None and unit.output_level == 1
    assert (unit := force(3, _runs((0, 1), (0, 5), (0, 10), (0, 20)))) is not None and unit.output_level == 2
    assert force(3, _runs((2, 10))) is None


def test_run_count_pick_weighs_the_next_level_against_level0_and_level1() -> None:
    # Paimon's UniversalCompactionTest.testFileNumCompactionConsidersLevel2.
    unit = UniversalCompaction(max_size_amplification_percent=200, size_ratio=1, compaction_trigger=3).pick(
        3, _runs((0, 10), (0, 20), (1, 97), (2, 100)))
    assert unit is not None and (len(unit.files), unit.output_level) == (4, 2)


def test_size_ratio_never_takes_a_larger_level1_run_before_a_pick_is_due() -> None:
    assert PICKER.pick(6, _runs((0, 1), (1, 50), (2, 100), (3, 200), (4, 400))) is None


def test_level0_output_extends_to_the_next_run_above_level0() -> None:
    unit = create_unit(_runs((0, 1), (0, 1), (2, 1), (4, 1)), max_level=5, run_count=1)
    assert unit.output_level == 2 and _names(unit) == ["f0", "f1", "f2"]


def test_extension_over_every_run_goes_to_the_max_level() -> None:
    unit = create_unit(_runs((0, 1), (0, 1), (0, 1)), max_level=5, run_count=1)
    assert unit.output_level == 5 and len(unit.files) == 3


def test_pick_full() -> None:
    assert pick_full(6, _runs((5, 10))) is None
    unit = pick_full(6, _runs((0, 1), (3, 10)))
    assert unit is not None and unit.output_level == 5 and len(unit.files) == 2


# -- through the table ----------------------------------------------------------------------

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1", **options}
    )


def _rows(lo: int, hi: int, tag: str = "v") -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"{tag}{i}" * 8 for i in range(lo, hi)]})


def _compact_entries(table: cl.Table) -> list[tuple[int, str, int]]:
    snap = table.latest_snapshot()
    assert snap is not None and snap.commit_kind == "COMPACT"
    delta = live_files.manifest_list(table.context, snap.delta_manifest_list)
    entries = [e for m in delta for e in live_files.manifest_entries(table.context, m.file_name)]
    return [(e.kind, e.file.file_name, e.file.level) for e in entries]


def test_large_non_overlapping_files_are_upgraded_without_rewriting(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true", "target-file-size": "2 kb"})
    table.write(_rows(0, 300))
    table.write(_rows(1000, 1300))
    before = {e.file.file_name for e in live_files.live_entries(table.context, table.latest_snapshot())}
    assert table.compact(full=True) is not None
    entries = _compact_entries(table)
    upgraded = {name for kind, name, level in entries if kind == FileKind.ADD and level == 5}
    assert upgraded and upgraded <= before  # same files, new level: a metadata change
    assert {(FileKind.DELETE, name, 0) for name in upgraded} <= set(entries)
    assert table.scan().to_arrow().num_rows == 600


def test_overlapping_files_are_rewritten(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true"})
    table.write(_rows(0, 100))
    table.write(_rows(50, 150, tag="w"))
    before = {e.file.file_name for e in live_files.live_entries(table.context, table.latest_snapshot())}
    table.compact(full=True)
    after = live_files.live_entries(table.context, table.latest_snapshot())
    assert len(after) == 1 and after[0].file.file_name not in before and after[0].file.level == 5
    result = table.scan().to_arrow().sort_by("id")
    assert result.column("v").to_pylist() == [f"v{i}" * 8 for i in range(50)] + [f"w{i}" * 8 for i in range(50, 150)]


def _kinds_on_disk(table: cl.Table) -> list[int]:
    kinds: list[int] = []
    for entry in live_files.live_entries(table.context, table.latest_snapshot()):
        path = f"{table.context.bucket_dir(entry.partition, entry.bucket)}/{entry.file.file_name}"
        kinds += pq.read_table(path, columns=["_VALUE_KIND"]).column(0).to_pylist()
    return kinds


def test_deletes_are_dropped_only_at_the_top_level(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true", "num-sorted-run.compaction-trigger": "2", "num-levels": "6"})
    table.write(_rows(0, 2000))
    table.compact(full=True)  # level 5 holds 0..1999: much larger than what follows
    table.write(pa.table({"id": pa.array([3], pa.int64()), "v": [None], "rowkind": ["-D"]}))
    table.write(_rows(20, 22, tag="w"))
    # A normal compaction of the two level-0 runs goes to level 4: the delete must survive there.
    table.compact()
    levels = {e.file.level for e in live_files.live_entries(table.context, table.latest_snapshot())}
    assert 4 in levels and 3 in _kinds_on_disk(table)
    assert 3 not in table.scan().to_arrow().column("id").to_pylist()
    table.compact(full=True)
    assert 3 not in _kinds_on_disk(table)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [i for i in range(2000) if i != 3]


def test_sorted_runs_stay_within_the_stop_trigger(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"num-sorted-run.compaction-trigger": "2", "num-sorted-run.stop-trigger": "3"})
    for i in range(15):
        table.write(_rows(i * 7, i * 7 + 20))
        entries = live_files.live_entries(table.context, table.latest_snapshot())
        runs = sum(1 for e in entries if e.file.level == 0) + len({e.file.level for e in entries if e.file.level})
        assert runs <= 3
    assert table.scan().to_arrow().num_rows == 14 * 7 + 20
    assert any(s.commit_kind == "COMPACT" for s in table.snapshots())


def test_write_only_never_compacts(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true", "num-sorted-run.compaction-trigger": "2"})
    for i in range(6):
        table.write(_rows(i, i + 5))
    assert {s.commit_kind for s in table.snapshots()} == {"APPEND"}


def test_full_compaction_delta_commits(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"full-compaction.delta-commits": "1"})
    table.write(_rows(0, 10))
    levels = {e.file.level for e in live_files.live_entries(table.context, table.latest_snapshot())}
    assert levels == {5}
    assert [s.commit_kind for s in table.snapshots()] == ["APPEND", "COMPACT"]


def test_a_commit_over_the_stop_trigger_does_not_wait_behind_queued_compactions(tmp_path: Path) -> None:
    """A bucket whose background compaction is still queued (the one compaction thread is busy
    elsewhere) compacts on the committing thread when its runs pass the stop trigger."""
    table = _table(tmp_path, **{"num-sorted-run.compaction-trigger": "2", "num-sorted-run.stop-trigger": "3"})
    release = threading.Event()
    busy = compaction_executor().submit(release.wait, 120)  # another bucket's long compaction
    failures: list[BaseException] = []

    def commits() -> None:
        try:
            with table.writer(commit_user="u") as writer:
                for i in range(6):
                    writer.write(_rows(i * 7, i * 7 + 20))
                    writer.commit(i)
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=commits)
    worker.start()
    try:
        worker.join(timeout=30)
        assert not worker.is_alive(), "a commit waited for the busy compaction thread"
    finally:
        release.set()
        busy.result()
        worker.join()
    assert not failures
    assert table.scan().to_arrow().num_rows == 5 * 7 + 20
    entries = live_files.live_entries(table.context, table.latest_snapshot())
    assert sum(1 for e in entries if e.file.level == 0) + len({e.file.level for e in entries if e.file.level}) <= 3
