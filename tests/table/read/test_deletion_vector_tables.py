"""Tables with ``deletion-vectors.enabled``, through the public API: every commit compacts level 0
up and marks the replaced rows in deletion vectors (index files listed by the snapshot's index
manifest); scans read each file alone, minus its marked rows."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import changelake as cl
from changelake.table.read import deletion_vectors as read_vectors
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())])
DV = {"bucket": "2", "deletion-vectors.enabled": "true"}


def _rows(table: cl.Table, **scan: Any) -> list[dict[str, Any]]:
    return sorted(table.scan(**scan).to_arrow().to_pylist(), key=lambda r: r["k"])


def _batch(keys: list[int], tag: str, kinds: list[str] | None = None) -> pa.Table:
    data = pa.table({"k": keys, "v": [f"{tag}{k}" for k in keys], "n": keys}, schema=SCHEMA)
    return data if kinds is None else data.append_column("rowkind", pa.array(kinds))


def _snapshot_json(table: cl.Table) -> dict[str, Any]:
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    with open(os.path.join(table.location, "snapshot", f"snapshot-{snapshot.id}")) as f:
        return dict(json.load(f))


def _live_file_levels(table: cl.Table) -> list[int]:
    return [int(level) for level in table.system("files").column("level").to_pylist()]


def test_updates_and_deletes_land_as_deletion_vectors_and_read_without_merging(tmp_path: Any) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options=DV)
    table.write(_batch(list(range(100)), "a"))
    assert "indexManifest" not in _snapshot_json(table)  # nothing replaced yet
    table.write(_batch([5, 50, 150], "b"))
    table.write(_batch([7, 50], "c", ["-D", "-D"]))
    expected = {k: (f"a{k}", k) for k in range(100)}
    expected.update({k: (f"b{k}", k) for k in (5, 50, 150)})
    del expected[7], expected[50]
    assert _rows(table) == [{"k": k, "v": v, "n": n} for k, (v, n) in sorted(expected.items())]
    assert 0 not in _live_file_levels(table)  # every commit compacted level 0 up
    index_manifest = _snapshot_json(table)["indexManifest"]
    assert os.path.exists(os.path.join(table.location, "manifest", index_manifest))
    assert os.listdir(os.path.join(table.location, "index"))
    # pruning and projection work file by file
    filtered = table.scan().filter(pc.field("k") >= 50).select("k", "v").to_arrow().to_pylist()
    assert sorted(filtered, key=lambda r: r["k"]) == [
        {"k": k, "v": v} for k, (v, _) in sorted(expected.items()) if k >= 50]
    # earlier snapshots read as they were: an APPEND snapshot's rows are at level 0, which
    # readers of tables with deletion vectors skip (as Paimon's), its COMPACT snapshot has them
    assert _rows(table, snapshot_id=1) == []
    assert len(_rows(table, snapshot_id=2)) == 100


def test_a_full_compaction_rewrites_the_files_and_drops_their_vectors(tmp_path: Any) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options=DV)
    table.write(_batch(list(range(20)), "a"))
    table.write(_batch([1, 2, 3], "b"))
    before = _rows(table)
    assert "indexManifest" in _snapshot_json(table)
    table.compact(full=True)
    assert _rows(table) == before
    assert "indexManifest" not in _snapshot_json(table)  # no file left with deleted rows


def test_writer_commits_many_times_and_each_key_is_live_once(tmp_path: Any) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={**DV, "target-file-size": "4 kb"})
    twin = cl.Catalog(str(tmp_path)).create_table("db.twin", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    with table.writer(commit_user="u") as writer, twin.writer(commit_user="u") as twin_writer:
        for i in range(8):
            keys = list(range(i * 10, i * 10 + 40))
            for w in (writer, twin_writer):
                w.write(_batch(keys, f"w{i}-"))
                w.commit(i)
            assert _rows(table) == _rows(twin)
    rows = table.scan().to_arrow()
    assert len(pc.unique(rows.column("k"))) == rows.num_rows


def test_partitioned_tables_keep_vectors_per_bucket(tmp_path: Any) -> None:
    schema = SCHEMA.append(pa.field("p", pa.string(), nullable=False))
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["p", "k"], partition_keys=["p"],
                                                   options=DV)

    def batch(keys: list[int], p: str, tag: str) -> pa.Table:
        return _batch(keys, tag).append_column("p", pa.array([p] * len(keys)))

    table.write(pa.concat_tables([batch(list(range(10)), "x", "a"), batch(list(range(10)), "y", "a")]))
    table.write(batch([1, 2], "y", "b"))
    rows = table.scan().to_arrow().to_pylist()
    assert len(rows) == 20
    assert sorted(r["v"] for r in rows if r["p"] == "y" and r["k"] in (1, 2)) == ["b1", "b2"]


def _index_dir_files(table: cl.Table) -> set[str]:
    directory = os.path.join(table.location, "index")
    return set(os.listdir(directory)) if os.path.isdir(directory) else set()


def _index_manifests_on_disk(table: cl.Table) -> set[str]:
    return {n for n in os.listdir(os.path.join(table.location, "manifest")) if n.startswith("index-manifest-")}


def test_expiry_deletes_the_index_files_and_manifests_no_retained_snapshot_names(tmp_path: Any) -> None:
    options = {**DV, "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "2"}
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options=options)
    table.write(_batch(list(range(50)), "a"))
    for i in range(5):
        table.write(_batch(list(range(i, 50, 5)), f"u{i}"))
    retained = [json.loads(Path(table.location, "snapshot", f"snapshot-{s.id}").read_text())
                for s in table.snapshots()]
    named = {s["indexManifest"] for s in retained if "indexManifest" in s}
    assert named and _index_manifests_on_disk(table) == named
    # every index file left is one a retained snapshot's index manifest lists (one per bucket each)
    assert 0 < len(_index_dir_files(table)) <= 2 * len(named)
    assert len(_rows(table)) == 50


def test_orphan_cleanup_removes_index_files_nothing_names(tmp_path: Any) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options=DV)
    table.write(_batch(list(range(20)), "a"))
    table.write(_batch([1, 2], "b"))
    in_use = _index_dir_files(table)
    assert in_use
    stray = os.path.join(table.location, "index", "index-00000000-0000-0000-0000-000000000000-0")
    with open(stray, "wb") as f:
        f.write(b"\x01")
    removed = table.remove_orphan_files(older_than=dt.timedelta(seconds=-60))
    assert removed == [stray]
    assert _index_dir_files(table) == in_use
    assert len(_rows(table)) == 20


def _level_of_files(table: cl.Table, snapshot_id: int) -> dict[str, int]:
    snapshot = table.context.snapshot(snapshot_id)
    return {e.file.file_name: e.file.level for e in live_files.live_entries(table.context, snapshot)}


def _commit(table: cl.Table, batch: pa.Table) -> tuple[dict[str, int], dict[str, int]]:
    """The live files (name: level) of the APPEND and the COMPACT snapshot a write makes."""
    table.write(batch)
    append, compact = table.snapshots()[-2:]
    assert (append.commit_kind, compact.commit_kind) == ("APPEND", "COMPACT")
    return _level_of_files(table, append.id), _level_of_files(table, compact.id)


def test_level0_files_without_retractions_move_up_without_a_rewrite(tmp_path: Any) -> None:
    """Deduplicate: a level-0 file holding no retraction moves up as it is and only the older rows
    of its keys are marked deleted (Paimon's upgrade without rewrite). A file with a delete is
    rewritten to drop it, and so is every file of a table whose merge needs the older values."""
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options={**DV, "bucket": "1"})
    table.write(_batch(list(range(100)), "a"))
    appended, compacted = _commit(table, _batch([5, 50, 150], "b"))
    (level0,) = [name for name, level in appended.items() if level == 0]
    assert compacted.get(level0, 0) > 0  # the same file, one level up
    expected = {k: f"a{k}" for k in range(100)} | {5: "b5", 50: "b50", 150: "b150"}
    assert [(r["k"], r["v"]) for r in _rows(table)] == sorted(expected.items())
    appended, compacted = _commit(table, _batch([7, 150], "c", ["-D", "+U"]))
    (level0,) = [name for name, level in appended.items() if level == 0]
    assert level0 not in compacted  # rewritten without the delete
    del expected[7]
    expected[150] = "c150"
    assert [(r["k"], r["v"]) for r in _rows(table)] == sorted(expected.items())

    partial = catalog.create_table("db.p", SCHEMA, primary_keys=["k"],
                                   options={**DV, "bucket": "1", "merge-engine": "partial-update"})
    partial.write(_batch(list(range(10)), "a"))
    appended, compacted = _commit(partial, _batch([3], "b"))
    (level0,) = [name for name, level in appended.items() if level == 0]
    assert level0 not in compacted
    assert [(r["k"], r["v"]) for r in _rows(partial)] == [(k, "b3" if k == 3 else f"a{k}") for k in range(10)]


def test_a_writer_keeps_its_vectors_between_commits_and_rereads_them_after_another_writers(
        tmp_path: Any, monkeypatch: Any) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={**DV, "target-file-size": "4 kb"})
    twin = cl.Catalog(str(tmp_path)).create_table("db.twin", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    parsed: list[str] = []  # the index files whose vectors are parsed
    parsed_at: set[int] = set()
    parse = read_vectors.bucket_vectors

    def counted(ctx: Any, files: Any) -> Any:
        files = list(files)
        parsed.extend(f.file_name for f in files)
        return parse(ctx, files)

    monkeypatch.setattr(read_vectors, "bucket_vectors", counted)
    with table.writer(commit_user="a") as writer, twin.writer(commit_user="a") as twin_writer:
        for i in range(12):
            keys = list(range(i * 10, i * 10 + 40))
            if i in (5, 9):  # another writer's commit: its compaction marks rows this writer's vectors do not
                other_keys = list(range(i * 10 - 30, i * 10 + 5))
                for t in (table, twin):
                    with t.writer(commit_user="b") as other:
                        other.write(_batch(other_keys, f"b{i}-"))
                        other.commit(0)
            parsed.clear()
            for w in (writer, twin_writer):
                w.write(_batch(keys, f"a{i}-"))
                w.commit(i)
            if parsed:
                parsed_at.add(i)
            assert _rows(table) == _rows(twin)
    # Only after the other writer's commits (its index files replaced those this writer's last
    # commit left; a compaction started before it may still start from the older ones).
    assert parsed_at and parsed_at <= {5, 9}
    rows = table.scan().to_arrow()
    assert len(pc.unique(rows.column("k"))) == rows.num_rows
