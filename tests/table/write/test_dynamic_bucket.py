"""Dynamic-bucket primary-key tables (``bucket = -1``, the default): each partition's HASH index
places keys; new keys fill buckets up to ``dynamic-bucket.target-row-num`` and open new ones up to
``dynamic-bucket.max-buckets``; the index lands with the rows; writers that race on a partition's
index never put a key in two buckets; a missing or corrupt index file is refused; compaction,
expiry, orphan cleanup and rollback keep the index consistent with the data."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors
from changelake.api.writer import open_write
from changelake.changelog import producers
from changelake.table.format import binary_row, bucket, hash_index
from changelake.table.io.fileio import FileIO
from changelake.table.read import deletion_vectors as read_index
from changelake.table.read.live_files import live_entries
from changelake.table.write import landing
from changelake.table.write.assigners import dynamic
from changelake.table.write.assigners.dynamic import hash_entries

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])


def _rows(keys: range, v: str, dt_: str = "a") -> pa.Table:
    return pa.table({"dt": [dt_] * len(keys), "k": pa.array(keys, pa.int64()), "v": [v] * len(keys)})


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                                  options={"dynamic-bucket.target-row-num": "30", **options})


def buckets_of(table: cl.Table) -> dict[tuple[bytes, int], set[int]]:
    """Keys per (partition, bucket) of the latest snapshot; asserts no key is in two buckets of
    its partition and each bucket's HASH index holds the hash of every key in it."""
    ctx = table.context
    latest = ctx.latest_snapshot()
    assert latest is not None
    keys: dict[tuple[bytes, int], set[int]] = {}
    for e in live_entries(ctx, latest):
        found = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file, ctx.key_columns).column(0).to_pylist()
        keys.setdefault((e.partition, e.bucket), set()).update(found)
    for (partition, b), ids in keys.items():
        for (other_partition, other), other_ids in keys.items():
            if other_partition == partition and other != b:
                assert not ids & other_ids, f"keys {sorted(ids & other_ids)[:5]} in buckets {b} and {other}"
        entry = hash_entries(ctx)[partition][b]
        indexed = hash_index.read(ctx.file_io, read_index.index_path(ctx, entry.file), entry.file, table=ctx.name)
        hashes = bucket.hash_rows(binary_row.encode([pa.array(sorted(ids), pa.int64())]))
        assert set(hashes.tolist()) <= set(indexed.tolist())
    return keys


def _values(table: cl.Table) -> dict[tuple[str, int], str]:
    return {(r["dt"], r["k"]): r["v"] for r in table.scan().to_arrow().to_pylist()}


def test_create_table_without_bucket_makes_a_dynamic_bucket_table(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"])
    assert "bucket" not in table.options  # stored as Paimon stores its default
    assert table.context.options.bucket == -1
    table.write(_rows(range(100), "x"))
    assert [b for _, b in buckets_of(table)] == [0]  # 100 keys: far below 2,000,000
    entries = hash_entries(table.context)
    assert [e.file.row_count for p in entries.values() for e in p.values()] == [100]
    assert all(e.total_buckets == -1 for e in live_entries(table.context, table.latest_snapshot()))  # type: ignore[arg-type]


def test_new_keys_fill_buckets_up_to_the_target_and_updates_stay_put(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows(range(100), "v1"))
    first = buckets_of(table)
    assert sorted(len(k) for k in first.values()) == [10, 30, 30, 30]
    table.write(_rows(range(0, 150), "v2"))  # updates all 100, adds 50
    after = buckets_of(table)
    assert sorted(len(k) for k in after.values()) == [30, 30, 30, 30, 30]
    for where, keys in first.items():
        assert keys <= after[where]  # no key moved
    assert _values(table) == {("a", k): "v2" for k in range(150)}


def test_max_buckets_caps_a_partition_and_extra_keys_go_to_existing_buckets(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"dynamic-bucket.max-buckets": "2", "dynamic-bucket.target-row-num": "10"})
    table.write(_rows(range(100), "x"))
    table.write(_rows(range(50, 120), "y"))
    assert {b for _, b in buckets_of(table)} == {0, 1}
    assert len(_values(table)) == 120


def test_initial_buckets_fill_that_many_buckets_at_once(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"dynamic-bucket.initial-buckets": "3", "dynamic-bucket.target-row-num": "1000"})
    table.write(_rows(range(300), "x"))
    sizes = {b: len(keys) for (_, b), keys in buckets_of(table).items()}
    assert set(sizes) == {0, 1, 2} and all(sizes[b] > 50 for b in sizes)


def test_partitions_have_their_own_index(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(pa.concat_tables([_rows(range(40), "x", "a"), _rows(range(40), "x", "b"), _rows(range(5), "x", "c")]))
    keys = buckets_of(table)
    assert sorted(len(k) for k in keys.values()) == [5, 10, 10, 30, 30]
    assert len(_values(table)) == 85


def test_a_writer_whose_partition_index_changed_meanwhile_conflicts_and_lands_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-buffer-size": "1 kb"})  # every write flushes: buckets assigned then
    table.write(_rows(range(20), "base"))
    with table.writer() as one, table.writer() as two:
        one.write(_rows(range(20, 220), "one"))
        two.write(_rows(range(150, 400), "two"))  # both add keys to buckets they fill from the same index
        assert one.commit(1)
        before = table.latest_snapshot()
        with pytest.raises(errors.CommitConflictError, match="HASH index"):
            two.commit(1)
        assert table.latest_snapshot() == before
        two.write(_rows(range(150, 400), "two"))  # written again, from the index as it is now
        assert two.commit(2)
    assert _values(table) == {("a", k): "base" if k < 20 else "one" if k < 150 else "two" for k in range(400)}
    buckets_of(table)


def test_long_lived_writers_in_turn_pick_up_each_others_keys(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.writer() as one, table.writer() as two:
        for step in range(6):
            writer = one if step % 2 == 0 else two
            writer.write(_rows(range(step * 20, step * 20 + 40), f"s{step}"))
            assert writer.commit(step + 1)  # the other's index changes are loaded, no conflict
    assert len(_values(table)) == 140
    assert sorted(len(k) for k in buckets_of(table).values()) == [20, 30, 30, 30, 30]


def test_a_replayed_commit_identifier_lands_nothing_and_leaves_no_index_file(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.writer(commit_user="u") as writer:
        writer.write(_rows(range(50), "x"))
        writer.commit(7)
    index_dir = tmp_path / "db.db" / "t" / "index"
    files = set(os.listdir(index_dir))
    with table.writer(commit_user="u") as again:
        again.write(_rows(range(50, 90), "y"))
        assert again.commit(7) == []
    assert set(os.listdir(index_dir)) == files
    assert len(_values(table)) == 50


@pytest.mark.parametrize("damage", ["missing", "torn"])
def test_a_missing_or_corrupt_index_file_is_named_and_nothing_is_written(tmp_path: Path, damage: str) -> None:
    table = _table(tmp_path)
    table.write(_rows(range(40), "x"))
    entry = hash_entries(table.context)[next(iter(hash_entries(table.context)))][0]
    path = tmp_path / "db.db" / "t" / "index" / entry.file.file_name
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:6])
    dynamic.COMMITTED.clear()  # as in another process: this one kept the index it committed
    dynamic.LATEST.clear()
    before = table.latest_snapshot()
    with pytest.raises(errors.CorruptMetadataError, match=entry.file.file_name):
        table.write(_rows(range(10), "y"))
    assert table.latest_snapshot() == before
    assert _values(table) == {("a", k): "x" for k in range(40)}


def test_a_writer_starts_from_the_index_this_process_committed(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_rows(range(100), "x"))
    index_dir = tmp_path / "db.db" / "t" / "index"
    aside = tmp_path / "aside"
    index_dir.rename(aside)  # the next write must not need them
    try:
        table.write(_rows(range(50, 130), "y"))
    finally:
        for name in os.listdir(aside):
            (aside / name).rename(index_dir / name)
    assert sorted(len(k) for k in buckets_of(table).values()) == [10, 30, 30, 30, 30]


def test_bucket_key_is_refused_on_dynamic_bucket_tables(tmp_path: Path) -> None:
    with pytest.raises(errors.OptionError, match="bucket-key"):
        _table(tmp_path, **{"bucket-key": "k"})


def test_compaction_expiry_orphans_and_rollback_keep_the_index(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for step in range(4):
        table.write(_rows(range(step * 25, step * 25 + 40), f"s{step}"))
    index_dir = tmp_path / "db.db" / "t" / "index"
    assert len(os.listdir(index_dir)) > len(buckets_of(table))  # replaced HASH files stay for old snapshots
    assert table.compact(full=True) is not None
    buckets_of(table)
    table.expire_snapshots(retain_max=1, retain_min=1)
    live = {e.file.file_name for p in hash_entries(table.context).values() for e in p.values()}
    assert set(os.listdir(index_dir)) == live  # replaced ones went with their snapshots
    stray = index_dir / "index-00000000-0000-0000-0000-000000000000-0"
    stray.write_bytes(b"\0\0\0\1")
    os.utime(stray, (1, 1))  # a crashed writer's, long ago
    removed = table.remove_orphan_files(older_than=dt.timedelta(0))
    assert [os.path.basename(p) for p in removed if "/index/" in p] == [stray.name]
    assert set(os.listdir(index_dir)) == live
    table.write(_rows(range(90, 160), "later"))
    kept = table.latest_snapshot()
    assert kept is not None
    table.write(_rows(range(160, 200), "gone"))
    table.rollback_to(snapshot_id=kept.id)
    table.write(_rows(range(150, 230), "again"))  # keys 160..199 are new again: assigned afresh
    buckets_of(table)
    assert len(_values(table)) == 230


@pytest.mark.parametrize("options", [
    {"deletion-vectors.enabled": "true"},
    {"merge-engine": "first-row", "changelog-producer": "lookup"},
    {"merge-engine": "partial-update"},
    {"changelog-producer": "lookup"},
], ids=["deletion-vectors", "first-row-lookup", "partial-update", "lookup"])
def test_dynamic_buckets_work_with_merge_engines_and_index_kinds(tmp_path: Path, options: dict[str, str]) -> None:
    table = _table(tmp_path, **options)
    first_row = options.get("merge-engine") == "first-row"
    with table.writer() as writer:
        for step in range(4):
            writer.write(_rows(range(step * 25, step * 25 + 40), f"s{step}"))
            writer.commit(step + 1)
    # step s writes keys 25s..25s+39: the last writer of k wins, or with first-row the first
    writer_of = (lambda k: max(0, (k - 15) // 25)) if first_row else (lambda k: min(3, k // 25))
    assert _values(table) == {("a", k): f"s{writer_of(k)}" for k in range(115)}
    buckets_of(table)
    if "deletion-vectors.enabled" in options:
        latest = table.latest_snapshot()
        assert latest is not None
        kinds = {e.file.index_type for e in read_index.index_entries(table.context, latest)}
        assert kinds == {"HASH", "DELETION_VECTORS"}


def test_a_writer_extends_the_index_loaded_before_with_the_keys_of_the_new_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a Spark task of the next micro-batch in a reused worker: the partition's index this
    process loaded some commits ago, extended with the keys the HASH files written since add
    (their first bytes are the ones it holds), not read and sorted whole again."""
    table = _table(tmp_path)
    table.write(_rows(range(50), "a"))
    ctx = table.context
    latest_key = (ctx.file_io.protocol, ctx.paths.root, next(iter(hash_entries(ctx))), ())
    older = dynamic.LATEST.peek(latest_key)
    assert older is not None
    table.write(_rows(range(40, 120), "b"))  # fills bucket 1, opens buckets 2 and 3
    dynamic.COMMITTED.clear()
    dynamic.LATEST.put(latest_key, older)

    def whole(*_: object) -> None:
        raise AssertionError("the index was read whole")

    monkeypatch.setattr(dynamic._PartitionIndex, "of", staticmethod(whole))
    table.write(_rows(range(100, 160), "c"))
    assert _values(table) == {("a", k): "a" if k < 40 else "b" if k < 100 else "c" for k in range(160)}
    assert sorted(len(k) for k in buckets_of(table).values()) == [10, 30, 30, 30, 30, 30]


def test_large_partition_indexes_place_every_key_once_through_filtered_runs(tmp_path: Path) -> None:
    # Past 65,536 keys a sorted run of the index gets a membership filter; merges of runs,
    # a writer reloading the index, and lookups of keys old and new must still agree.
    table = _table(tmp_path, **{"dynamic-bucket.target-row-num": "60000", "write-only": "true"})
    with table.writer() as writer:
        for i, start in enumerate(range(0, 200_000, 40_000), start=1):
            writer.write(_rows(range(max(0, start - 20_000), start + 40_000), f"w{i}"))
            writer.commit(i)
    first = buckets_of(table)
    assert sorted(len(k) for k in first.values()) == [20_000, 60_000, 60_000, 60_000]
    dynamic.COMMITTED.clear()  # the next writer reads every HASH file: one run of 200,000
    dynamic.LATEST.clear()
    table.write(_rows(range(150_000, 250_000), "again"))
    after = buckets_of(table)
    assert sum(len(k) for k in after.values()) == 250_000
    for (partition, b), ids in first.items():  # old keys stayed where they were
        assert ids <= after[(partition, b)]
    values = _values(table)
    assert (values[("a", 139_999)], values[("a", 149_999)], values[("a", 150_000)]) == ("w4", "w5", "again")
    assert len(values) == 250_000


def test_hash_files_written_ahead_and_superseded_or_abandoned_leave_no_file_behind(tmp_path: Path) -> None:
    # A small write buffer flushes several times a commit: each flush writes its buckets' HASH
    # files ahead, the next flush replaces them, and the commit lands only the last.
    table = _table(tmp_path, **{"write-buffer-size": "64 kb", "dynamic-bucket.target-row-num": "5000"})
    index_dir = tmp_path / "db.db" / "t" / "index"
    with table.writer() as writer:
        for i in range(6):
            writer.write(_rows(range(i * 2_000, (i + 1) * 2_000), "x"))
        writer.commit(1)
        listed = {e.file.file_name for p in hash_entries(table.context).values() for e in p.values()}
        assert {f.name for f in index_dir.iterdir()} == listed
        writer.write(_rows(range(12_000, 13_000), "y"))  # never committed
    assert {f.name for f in index_dir.iterdir()} == listed
    assert sorted(len(k) for k in buckets_of(table).values()) == [2_000, 5_000, 5_000]


def test_the_next_task_in_a_process_starts_from_the_keys_a_task_prepared_once_they_land(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Spark runs the sink: a task writes and prepares (it never learns whether the driver
    landed its files), the driver commits; the next micro-batch's task in the same worker takes
    the index as prepared, reading no HASH file. Prepared files that never land are not used."""
    table = _table(tmp_path)
    ctx = table.context
    changelog = producers.for_table(ctx)

    def task_then_driver(rows: pa.Table, identifier: int, *, lands: bool = True) -> None:
        with open_write(ctx, "spark-job", one_shot=True) as write:
            write.write(rows)
            messages = write.prepare()
        if lands:
            landing.land(ctx, changelog, messages, "spark-job", identifier, view=None)

    task_then_driver(_rows(range(50), "a"), 1)
    reads: list[str] = []
    real_read = FileIO.read_bytes

    def read_bytes(file_io: FileIO, path: str) -> bytes:
        if "/index/index-" in path:
            reads.append(path)
        return real_read(file_io, path)

    monkeypatch.setattr(FileIO, "read_bytes", read_bytes)
    task_then_driver(_rows(range(40, 120), "b"), 2)
    assert reads == []
    task_then_driver(_rows(range(120, 140), "lost"), 3, lands=False)  # the batch failed: nothing landed
    task_then_driver(_rows(range(100, 160), "c"), 3)  # from the index as batch 2 left it
    assert reads == []
    assert sum(e.file.row_count for e in hash_entries(ctx)[next(iter(hash_entries(ctx)))].values()) == 160
    assert _values(table) == {("a", k): "a" if k < 40 else "b" if k < 100 else "c" for k in range(160)}
    assert sorted(len(k) for k in buckets_of(table).values()) == [10, 30, 30, 30, 30, 30]
