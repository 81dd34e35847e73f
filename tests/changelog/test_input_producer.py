"""``changelog-producer=input``: every flush also writes its raw input as changelog files of the
bucket, listed in the APPEND snapshot's changelog manifest list, as Apache Paimon does."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake import errors
from changelake.changelog import producers
from changelake.table.commit import committer
from changelake.table.format import kv, snapshot
from changelake.table.format.manifest import FileKind, FileSource, ManifestEntry
from changelake.table.read import live_files
from changelake.table.write import spill
from changelake.table.write.writer import TableWrite

SCHEMA = pa.schema([
    pa.field("p", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("v", pa.string()),
])
INPUT = {"bucket": "2", "changelog-producer": "input"}


def _create(tmp_path: Path, options: dict[str, str]) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
                                                  options=options)


def _rows(rows: list[tuple[str, int, str | None, str]]) -> pa.Table:
    p, k, v, kind = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table({"p": pa.array(p, pa.string()), "k": pa.array(k, pa.int64()), "v": pa.array(v, pa.string()),
                     "rowkind": pa.array(kind, pa.string())})


def _random_rows(seed: int, count: int, keys: int = 50) -> list[tuple[str, int, str | None, str]]:
    rng = random.Random(seed)
    return [(rng.choice("xy"), rng.randrange(keys), f"{seed}-{i}", rng.choice(["+I", "+I", "+U", "-U", "-D"]))
            for i in range(count)]


def changelog_entries(table: cl.Table, snap: cl.Snapshot) -> list[ManifestEntry]:
    """The entries of a snapshot's changelog manifest list."""
    ctx = table.context
    if snap.changelog_manifest_list is None:
        return []
    return [e for m in live_files.manifest_list(ctx, snap.changelog_manifest_list)
            for e in live_files.manifest_entries(ctx, m.file_name)]


def read_file(table: cl.Table, entry: ManifestEntry) -> pa.Table:
    """A file's columns as stored (a ParquetFile: no partition columns from the path)."""
    return pq.ParquetFile(f"{table.context.bucket_dir(entry.partition, entry.bucket)}/{entry.file.file_name}").read()


def changelog_rows(table: cl.Table, snap: cl.Snapshot) -> list[tuple[Any, ...]]:
    """A snapshot's changelog as (p, k, v, kind) rows, file by file."""
    out: list[tuple[Any, ...]] = []
    for entry in changelog_entries(table, snap):
        data = read_file(table, entry)
        kinds = [kv.ROW_KIND_SYMBOLS[i] for i in data.column(kv.VALUE_KIND).to_pylist()]
        out += zip(data.column("p").to_pylist(), data.column("k").to_pylist(), data.column("v").to_pylist(), kinds,
                   strict=True)
    return out


def _on_disk(tmp_path: Path, prefix: str = "changelog-") -> set[str]:
    return {p.name for p in tmp_path.rglob(f"{prefix}*")}


def _referenced(table: cl.Table) -> set[str]:
    return {e.file.file_name for s in table.snapshots() for e in changelog_entries(table, s)}


def test_files_layout_and_metadata(tmp_path: Path) -> None:
    table = _create(tmp_path, INPUT)
    written = _random_rows(1, 300)
    snap = table.write(_rows(written))
    assert snap is not None and snap.commit_kind is cl.CommitKind.APPEND
    entries = changelog_entries(table, snap)
    assert entries and all(e.kind is FileKind.ADD for e in entries)
    # the manifest list names exactly the changelog files on disk, one or more per bucket written
    assert {e.file.file_name for e in entries} == _on_disk(tmp_path)
    data = live_files.live_entries(table.context, snap)
    assert {(e.partition, e.bucket) for e in entries} == {(e.partition, e.bucket) for e in data}
    assert snap.changelog_record_count == len(written) == sum(e.file.row_count for e in entries)
    assert snap.changelog_manifest_list is not None
    list_path = Path(table.context.paths.manifest(snap.changelog_manifest_list))
    assert snap.changelog_manifest_list_size == list_path.stat().st_size
    [meta] = live_files.manifest_list(table.context, snap.changelog_manifest_list)
    assert meta.num_added_files == len(entries) and meta.num_deleted_files == 0
    data_schema = kv.file_schema(table.schema, ["k"])
    for entry in entries:
        f = entry.file
        assert f.file_name.startswith("changelog-") and f.file_name.endswith("-0.parquet")
        assert f.level == 0 and f.file_source == FileSource.APPEND and f.schema_id == 0
        rows = read_file(table, entry)
        assert rows.schema.names == data_schema.names
        assert f.row_count == rows.num_rows
        seq = rows.column(kv.SEQUENCE).to_numpy()
        assert (f.min_sequence_number, f.max_sequence_number) == (seq.min(), seq.max())
        kinds = rows.column(kv.VALUE_KIND).to_numpy()
        assert f.delete_row_count == int(np.isin(kinds, [kv.UPDATE_BEFORE, kv.DELETE]).sum())
        keys = rows.column("_KEY_k").to_numpy()
        # sorted by key, then sequence number: each key's rows in input order
        assert np.all(np.diff(keys) >= 0) and np.all(np.diff(seq)[np.diff(keys) == 0] > 0)
        assert table.context.key_of(f.min_key) == (keys[0],) and table.context.key_of(f.max_key) == (keys[-1],)
        # the rows the data files keep are changelog rows, with the same sequence numbers
        ours = {(int(s), int(k)) for s, k in zip(seq, keys, strict=True)}
        for d in data:
            if (d.partition, d.bucket) == (entry.partition, entry.bucket):
                kept = read_file(table, d)
                assert set(zip(kept.column(kv.SEQUENCE).to_pylist(), kept.column("_KEY_k").to_pylist(),
                               strict=True)) <= ours
    # exactly the input, row kinds included, each key's rows in input order
    got = changelog_rows(table, snap)
    assert Counter(got) == Counter(written)
    for key in {(p, k) for p, k, _, _ in written}:
        assert [r for r in got if r[:2] == key] == [r for r in written if r[:2] == key]


def test_none_writes_no_changelog(tmp_path: Path) -> None:
    table = _create(tmp_path, {"bucket": "2"})
    snap = table.write(_rows(_random_rows(2, 50)))
    assert snap is not None
    assert snap.changelog_manifest_list is None and snap.changelog_record_count is None
    assert '"changelogManifestList": null' in snap.to_json() and "changelogRecordCount" not in snap.to_json()
    assert not _on_disk(tmp_path)


def test_thin_mode_prefix_and_ignore_delete(tmp_path: Path) -> None:
    table = _create(tmp_path, INPUT | {"data-file.thin-mode": "true", "changelog-file.prefix": "cl-",
                                       "ignore-delete": "true"})
    written = _random_rows(3, 100)
    snap = table.write(_rows(written))
    assert snap is not None
    entries = changelog_entries(table, snap)
    assert {e.file.file_name for e in entries} == _on_disk(tmp_path, "cl-") and not _on_disk(tmp_path)
    assert all("_KEY_k" not in read_file(table, e).column_names for e in entries)
    # ignore-delete drops retractions from the input, as Paimon drops them before its writer
    assert Counter(changelog_rows(table, snap)) == Counter(r for r in written if r[3] in ("+I", "+U"))


@pytest.mark.parametrize("spillable", ["true", "false"])
def test_spilled_and_repeated_flushes_keep_the_raw_input(tmp_path: Path, spillable: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A full write buffer spills sorted runs (or, not spillable, flushes level-0 files): the
    commit's changelog is still every input row, each key's rows in input order, and with
    spilling one sorted stream per bucket."""
    table = _create(tmp_path, INPUT | {"write-buffer-size": "8 kb", "write-buffer-spillable": spillable,
                                       "write-only": "true"})
    spilled: list[int] = []
    real = spill.SpilledRun.write

    def counting(path: str, part: pa.Table, first_key: str) -> spill.SpilledRun:
        spilled.append(part.num_rows)
        return real(path, part, first_key)

    monkeypatch.setattr(spill.SpilledRun, "write", staticmethod(counting))
    calls = [_random_rows(10 + i, 400, keys=300) for i in range(4)]
    with table.writer(commit_user="job") as writer:
        for call in calls:
            writer.write(_rows(call))
        [snap] = writer.commit(identifier=1)
    written = [r for call in calls for r in call]
    got = changelog_rows(table, snap)
    assert Counter(got) == Counter(written)
    for key in {(p, k) for p, k, _, _ in written}:
        assert [r for r in got if r[:2] == key] == [r for r in written if r[:2] == key]
    buckets = Counter((e.partition, e.bucket) for e in changelog_entries(table, snap))
    assert bool(spilled) is (spillable == "true")
    if spillable == "true":
        for entry in changelog_entries(table, snap):
            keys = read_file(table, entry).column("_KEY_k").to_numpy()
            assert np.all(np.diff(keys) >= 0)
    else:
        assert max(buckets.values()) > 1  # several flushes per bucket
    assert _referenced(table) == _on_disk(tmp_path)


def test_long_lived_writer_commits_and_compaction(tmp_path: Path) -> None:
    """Each APPEND snapshot carries the changelog of its commit; COMPACT snapshots carry none."""
    table = _create(tmp_path, INPUT | {"num-sorted-run.compaction-trigger": "2", "commit.force-compact": "true"})
    calls = [_random_rows(20 + i, 60) for i in range(4)]
    with table.writer(commit_user="job") as writer:
        for identifier, call in enumerate(calls, 1):
            writer.write(_rows(call))
            writer.commit(identifier)
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    compacts = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.COMPACT]
    assert len(appends) == 4 and compacts
    assert all(s.changelog_manifest_list is None for s in compacts)
    for snap, call in zip(appends, calls, strict=True):
        assert Counter(changelog_rows(table, snap)) == Counter(call)
    assert _referenced(table) == _on_disk(tmp_path)


def test_replay_abort_and_failed_calls_leave_no_changelog(tmp_path: Path) -> None:
    table = _create(tmp_path, INPUT | {"write-buffer-size": "4 kb", "write-buffer-spillable": "false"})
    with table.writer(commit_user="job") as writer:
        writer.write(_rows(_random_rows(30, 200)))
        assert writer.commit(identifier=1)
    committed = _on_disk(tmp_path)
    with table.writer(commit_user="job") as replay:  # a replay of identifier 1 is skipped
        replay.write(_rows(_random_rows(30, 200)))
        assert _on_disk(tmp_path) > committed  # the replay flushed changelog files...
        assert replay.commit(identifier=1) == []
    assert _on_disk(tmp_path) == committed  # ...and dropped them
    with table.writer(commit_user="other") as aborted:
        aborted.write(_rows(_random_rows(31, 200)))
        aborted.abort()
    assert _on_disk(tmp_path) == committed
    with table.writer(commit_user="other") as failing:
        bad = _rows(_random_rows(32, 200)).set_column(3, "rowkind", pa.array(["+I"] * 199 + ["?"]))
        with pytest.raises(errors.RowKindError):
            failing.write(pa.RecordBatchReader.from_batches(bad.schema, bad.to_batches(max_chunksize=20)))
        assert _on_disk(tmp_path) == committed
    assert _referenced(table) == committed


def test_a_commit_that_gives_up_leaves_no_changelog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _create(tmp_path, INPUT | {"commit.max-retries": "1", "commit.min-retry-wait": "1 ms"})
    monkeypatch.setattr(snapshot, "try_commit", lambda *args: False)  # every race is lost
    with table.writer(commit_user="job") as writer:
        writer.write(_rows(_random_rows(40, 100)))
        with pytest.raises(errors.CommitConflictError):
            writer.commit(identifier=1)
    assert not _on_disk(tmp_path)
    assert not [p for p in tmp_path.rglob("manifest-*")]


def test_a_renumbered_commit_shifts_its_changelog(tmp_path: Path, renumber_calls: list[bool]) -> None:
    """A commit that finds rows committed meanwhile in its buckets copies its files with shifted
    sequence numbers: its changelog files are copied the same way (and the originals go)."""
    table = _create(tmp_path, INPUT | {"bucket": "1", "write-buffer-size": "1 b"})
    shifted = renumber_calls
    late = [("x", 1, "late-1", "+I"), ("x", 1, "late-2", "+U"), ("x", 2, "late-3", "+I")]
    with table.writer(commit_user="late") as writer:
        writer.write(_rows(late))  # spilled at once: numbered before the one-shot write lands
        early = table.write(_rows([("x", 1, "early", "+I"), ("x", 2, "early", "+I")]))
        [snap] = writer.commit(identifier=1)
    assert early is not None and shifted[-1]
    assert table.scan().to_arrow().sort_by("k").column("v").to_pylist() == ["late-2", "late-3"]
    [entry] = changelog_entries(table, snap)
    rows = read_file(table, entry)
    floor = max(e.file.max_sequence_number for e in live_files.live_entries(table.context, early))
    assert entry.file.min_sequence_number > floor
    assert rows.column(kv.SEQUENCE).to_pylist() == list(range(entry.file.min_sequence_number,
                                                              entry.file.max_sequence_number + 1))
    assert changelog_rows(table, snap) == late
    # the data file's rows carry the same shifted numbers as their changelog rows
    data = [e for e in live_files.live_entries(table.context, snap) if e.file.min_sequence_number > floor]
    kept = {(r["_SEQUENCE_NUMBER"], r["v"]) for d in data for r in read_file(table, d).to_pylist()}
    assert kept <= {(r["_SEQUENCE_NUMBER"], r["v"]) for r in rows.to_pylist()}
    assert _referenced(table) == _on_disk(tmp_path)


def test_committer_lists_changelog_of_every_message(tmp_path: Path) -> None:
    """Messages of several buckets (as a Spark driver commits them) land in one changelog
    manifest list with one ADD entry per changelog file."""
    table = _create(tmp_path, INPUT | {"bucket": "4"})
    with TableWrite(table.context, "job", changelog=producers.for_table(table.context)) as writer:
        writer.write(_rows(_random_rows(50, 200)))
        messages = writer.prepare()
    assert len(messages) > 1 and all(m.changelog_files for m in messages)
    [snap] = committer.commit(table.context, messages, "job", 1)
    assert {e.file.file_name for e in changelog_entries(table, snap)} == {
        f.file_name for m in messages for f in m.changelog_files}
