"""table.inspect(): levels, sorted runs, key ranges, the pending compaction and its reason,
changelog files, the text summary and the PNG picture."""

from __future__ import annotations

import datetime as dt
import os
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import MissingExtraError, ScanError
from changelake.table.lsm.universal import PickRule

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])
SRC = str(Path(cl.__file__).resolve().parents[1])


def _write(table: cl.Table, low: int, high: int) -> None:
    # Distinct values, so a file's size grows with its rows.
    table.write(pa.table({"k": list(range(low, high)), "v": [f"v{k}-{low}" for k in range(low, high)]}))


def _table(tmp_path: Path, **options: str) -> cl.Table:
    # write-only: writers never compact, so level-0 files pile up as the test writes them.
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "write-only": "true", "num-sorted-run.compaction-trigger": "3", **options})


def test_level0_files_are_runs_with_their_key_ranges_and_sequences(tmp_path: Path) -> None:
    table = _table(tmp_path)
    assert table.inspect().buckets == () and "no snapshot yet" in str(table.inspect())
    _write(table, 0, 30)
    _write(table, 10, 40)
    inspection = table.inspect()
    assert (inspection.snapshot_id, inspection.num_levels, inspection.key_names) == (2, 4, ("k",))
    [bucket] = inspection.buckets
    assert len(bucket.level(0)) == 2 and all(not bucket.level(level) for level in (1, 2, 3))
    newest, oldest = (run.files[0] for run in bucket.runs)  # newest data first
    assert (newest.min_key, newest.max_key, newest.rows, newest.level) == ((10,), (39,), 30, 0)
    assert (oldest.min_key, oldest.max_key, oldest.min_sequence, oldest.max_sequence) == ((0,), (29,), 0, 29)
    assert newest.min_sequence == 30 and not newest.compacted and newest.deleted_rows == 0
    assert (inspection.files, inspection.rows, inspection.runs) == (2, 60, 2)
    assert inspection.size == bucket.size == sum(f.size for f in bucket.files) > 0
    assert bucket.pending.rule is PickRule.NONE and bucket.pending.files == ()
    assert bucket.pending.reason == "nothing: 2 sorted runs < num-sorted-run.compaction-trigger 3"


def test_pending_compaction_follows_the_trigger_then_full_compaction_leaves_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"compaction.size-ratio": "50"})
    _write(table, 0, 1000)
    table.compact(full=True)
    _write(table, 0, 10)
    _write(table, 500, 510)
    bucket = table.inspect().buckets[0]
    assert [run.level for run in bucket.runs] == [0, 0, 3]
    # Two small runs on a large one: no size amplification, but the small two are alike.
    assert bucket.pending.rule is PickRule.SIZE_RATIO and bucket.pending.output_level == 2
    assert set(bucket.pending.files) == {run.files[0].name for run in bucket.level(0)}
    assert "the newest 2 runs" in bucket.pending.reason
    _write(table, 0, 5000)
    bucket = table.inspect().buckets[0]
    assert bucket.pending.rule is PickRule.SIZE_AMPLIFICATION
    assert "> compaction.max-size-amplification-percent 200" in bucket.pending.reason
    assert len(bucket.pending.files) == 4 and bucket.pending.output_level == 3

    table.compact(full=True)
    bucket = table.inspect().buckets[0]
    assert [(run.level, len(run.files)) for run in bucket.runs] == [(3, 1)]
    [top] = bucket.files
    assert (top.min_key, top.max_key, top.rows, top.compacted) == ((0,), (4999,), 5000, True)
    assert bucket.pending.rule is PickRule.NONE and bucket.pending.files == ()
    # An older snapshot still shows its own tree.
    assert len(table.inspect(snapshot_id=4).buckets[0].level(0)) == 2


def test_lookup_tables_list_changelog_files_and_force_level0_up(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                                 options={"bucket": "2", "changelog-producer": "lookup"})
    _write(table, 0, 40)
    _write(table, 20, 60)
    inspection = table.inspect()
    snapshot = table.latest_snapshot()
    assert snapshot is not None and inspection.snapshot_id == snapshot.id
    changelog = [f for b in inspection.buckets for f in b.changelog]
    assert changelog and all(f.name.startswith("changelog-") for f in changelog)
    assert sum(f.rows for f in changelog) == snapshot.changelog_record_count
    assert all(not b.level(0) for b in inspection.buckets)  # lookup compacts level 0 up
    assert "changelog files of this snapshot" in str(inspection)

    writes_only = catalog.create_table("db.w", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "changelog-producer": "lookup", "write-only": "true"})
    _write(writes_only, 0, 10)
    pending = writes_only.inspect().buckets[0].pending
    assert pending.rule is PickRule.FORCE_LEVEL0_UP and len(pending.files) == 1
    assert "nothing: 1 sorted run < num-sorted-run.compaction-trigger 5" in pending.reason


def test_summary_has_one_aligned_block_per_bucket(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.p", pa.schema([("p", pa.string()), ("k", pa.string()), ("n", pa.int32())]), primary_keys=["p", "k", "n"],
        partition_keys=["p"], options={"bucket": "2", "write-only": "true", "num-sorted-run.compaction-trigger": "2"})
    for i in range(2):
        table.write(pa.table({"p": ["a"] * 8 + ["b"] * 8, "k": [f"k{j}" for j in range(i, i + 16)], "n": [i] * 16}))
    inspection = table.inspect()
    text = inspection.summary()
    assert text == str(inspection)
    assert text.splitlines()[0].startswith(f"table db.p at snapshot 2: 4 buckets, {inspection.files} files")
    assert text.count("\npartition p=") == len(inspection.buckets) == 4
    for block in text.split("\n\n")[1:]:
        header, *files = [line for line in block.splitlines()[1:] if "data-" in line or "  level  run" in line]
        assert len(files) == 2 and len({line.index(".parquet") for line in files}) == 1
        assert header.index("file") == files[0].index("data-")
    assert all(isinstance(f.min_key[0], str) and f.min_key <= f.max_key for f in inspection.buckets[0].files)
    assert "(files marked *)" in text


NANO_PARTITIONS = pa.schema([pa.field("p", pa.timestamp("ns"), nullable=False), pa.field("k", pa.int64()),
                             pa.field("v", pa.int64())])
ODD = 1_700_000_000_123_456_789  # 2023-11-14 22:13:20.123456789: nanoseconds a datetime cannot hold
WHOLE = 1_700_000_000_123_456_000  # 2023-11-14 22:13:20.123456: a datetime holds it


def test_a_nanosecond_timestamp_partition_is_found_by_a_datetime(tmp_path: Path) -> None:
    """``bucket(partition=...)`` takes a TIMESTAMP(9) partition's value as ``compact(partitions=...)``
    does: its nanoseconds, a datetime or a pandas Timestamp (not only the int the partition
    decodes to); the summary shows it as the timestamp."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", NANO_PARTITIONS, primary_keys=["p", "k"],
                                                   partition_keys=["p"], options={"bucket": "1"})
    table.write(pa.table({"p": pa.array([ODD, WHOLE, WHOLE], pa.timestamp("ns")), "k": [1, 2, 3], "v": [1, 2, 3]}))
    inspection = table.inspect()
    whole, odd = sorted(inspection.buckets, key=lambda b: b.partition)
    assert (odd.partition, odd.rows, whole.rows) == ((("p", ODD),), 1, 2)
    assert inspection.bucket(partition={"p": ODD}) == odd
    assert inspection.bucket(partition={"p": dt.datetime(2023, 11, 14, 22, 13, 20, 123456)}) == whole
    assert inspection.bucket(0, partition={"p": pd.Timestamp(ODD)}) == odd
    assert "partition p=2023-11-14 22:13:20.123456789 bucket 0: 1 file" in inspection.summary()
    with pytest.raises(ScanError, match="no bucket"):
        inspection.bucket(partition={"p": dt.datetime(2023, 11, 14, 22, 13, 20)})
    with pytest.raises(ScanError, match="does not fit the partition keys' types") as info:
        inspection.bucket(partition={"p": "yesterday"})
    assert "db.t" in str(info.value)
    with pytest.raises(ScanError, match=r"\['q'\] are not partition keys \['p'\]"):
        inspection.bucket(partition={"p": ODD, "q": 1})


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_to_png_draws_the_largest_or_a_chosen_bucket(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.p", pa.schema([("p", pa.string()), ("k", pa.string()), ("n", pa.int32())]), primary_keys=["p", "k", "n"],
        partition_keys=["p"], options={"bucket": "2", "changelog-producer": "lookup"})
    for i in range(3):
        table.write(pa.table({"p": ["a"] * 20, "k": [f"k{j:02}" for j in range(i, i + 20)], "n": [i] * 20}))
    inspection = table.inspect()
    largest = max(inspection.buckets, key=lambda b: b.size)
    assert inspection.bucket() is largest
    assert inspection.bucket(1, partition={"p": "a"}).bucket == 1
    with pytest.raises(ScanError, match="no bucket 7"):
        inspection.bucket(7)

    path = tmp_path / "lsm.png"
    inspection.to_png(str(path))
    assert _png_size(path) == (1200, 800) and path.stat().st_size > 20_000
    chosen = tmp_path / "bucket0.png"
    inspection.to_png(str(chosen), partition={"p": "a"}, bucket=0, width=6, height=4, dpi=100)
    assert _png_size(chosen) == (600, 400)


def test_to_png_without_matplotlib_names_the_plot_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    _write(table, 0, 3)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=r"changelake\[plot\]"):
        table.inspect().to_png(str(tmp_path / "x.png"))


def test_matplotlib_is_loaded_only_to_draw() -> None:
    loaded = subprocess.run([sys.executable, "-c", "import sys, changelake; print('matplotlib' in sys.modules)"],
                            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": SRC})
    assert loaded.stdout.strip() == "False"
