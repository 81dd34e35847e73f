"""Where data files live: ``data-file.path-directory`` (the bucket directories under a
subdirectory of the table) and ``data-file.external-paths`` (new data and changelog files under
other directories, their manifest entries recording the full path), through writes, reads,
compaction, row-level changes, expiry, rollback and orphan cleanup."""

from __future__ import annotations

import datetime as dt
import os
import uuid
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import OptionError, StorageError
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
FAR_FUTURE = 2**62


def _rows(start: int, count: int = 10) -> pa.Table:
    return pa.table({"p": ["a", "b"] * (count // 2), "k": list(range(start, start + count)),
                     "v": [f"v{start}"] * count})


def _files(root: str | Path) -> set[str]:
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names}


def _data_files(root: str | Path) -> set[str]:
    return {f for f in _files(root) if os.path.basename(f).startswith(("data-", "changelog-"))}


def _age(paths: set[str], days: int) -> None:
    old = (dt.datetime.now() - dt.timedelta(days=days)).timestamp()
    for path in paths:
        os.utime(path, (old, old))


def _live_paths(table: cl.Table) -> set[str]:
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    return {table.context.entry_path(e) for e in live_files.live_entries(table.context, snapshot)}


def _expected(*starts: int) -> list[dict[str, object]]:
    rows = {(r["p"], r["k"]): r for start in starts for r in _rows(start).to_pylist()}
    return sorted(rows.values(), key=lambda r: (r["p"], r["k"]))


def _read(table: cl.Table, snapshot_id: int | None = None) -> list[dict[str, object]]:
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), key=lambda r: (r["p"], r["k"]))


def test_path_directory_holds_every_bucket(tmp_path: Path) -> None:
    """A primary-key table with ``data-file.path-directory``: every bucket directory (data and
    changelog files) is under ``<table>/data``, and compaction, expiry, rollback and orphan
    cleanup find the files there."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "data-file.path-directory": "data", "changelog-producer": "lookup"})
    for start in (0, 5, 10):
        table.write(_rows(start))
    table.compact(full=True)
    root = Path(table.location)
    data = _data_files(root)
    assert data and all(f.startswith(f"{root}/data/p=") for f in data)
    assert any(os.path.basename(f).startswith("changelog-") for f in data)
    assert not [d for d in os.listdir(root) if d.startswith(("p=", "bucket-"))]
    assert _live_paths(table) <= data
    assert set(table.system("files").column("file_path").to_pylist()) <= data
    assert _read(table) == _expected(0, 5, 10)

    compacted = table.latest_snapshot()
    assert compacted is not None
    table.write(_rows(20))
    table.rollback_to(snapshot_id=compacted.id)
    assert _read(table) == _expected(0, 5, 10)
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    left = _data_files(root)
    assert left == _live_paths(table)  # expiry and rollback deleted the rest, under data/
    stray = root / "data" / "p=a" / "bucket-0" / "data-stray-0.parquet"
    stray.write_bytes(b"x")
    _age(_files(root), days=2)
    assert table.remove_orphan_files() == [str(stray)]
    assert _read(table) == _expected(0, 5, 10)


@pytest.mark.parametrize("directory", [None, "data"])
def test_external_paths_round_robin(tmp_path: Path, directory: str | None) -> None:
    """New data and changelog files go under the external paths in turn, at the bucket's path
    relative to the table, their manifest entries recording ``file:`` URIs; compaction keeps
    writing there; reads, expiry, rollback and orphan cleanup follow the recorded paths."""
    external = [tmp_path / "fast", tmp_path / "slow"]
    options = {"bucket": "2", "changelog-producer": "lookup", "data-file.external-paths.strategy": "round-robin",
               "data-file.external-paths": ",".join(f"file://{e}" for e in external)}
    if directory is not None:
        options["data-file.path-directory"] = directory
    table = cl.Catalog(str(tmp_path / "wh")).create_table("db.t", SCHEMA, primary_keys=["p", "k"],
                                                          partition_keys=["p"], options=options)
    for start in range(0, 40, 5):
        table.write(_rows(start))
    table.compact(full=True)
    root = Path(table.location)
    assert not _data_files(root)  # nothing in the table's own directories
    prefix = "" if directory is None else f"{directory}/"
    written = _data_files(external[0]) | _data_files(external[1])
    for bucket in {os.path.dirname(os.path.relpath(f, e)) for e in external for f in _data_files(e)}:
        counts = [len(_data_files(e / bucket)) for e in external]
        assert abs(counts[0] - counts[1]) <= 1, (bucket, counts)  # a bucket's files in turn
    assert all(f.startswith((f"{e}/{prefix}p=a/bucket-", f"{e}/{prefix}p=b/bucket-")) for e in external for f in
               _data_files(e))
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    entries = live_files.live_entries(table.context, snapshot)
    assert all(e.file.external_path == f"file:{table.context.entry_path(e)}" for e in entries)
    assert set(table.system("files").column("file_path").to_pylist()) == {e.file.external_path for e in entries}
    assert _read(table) == _expected(*range(0, 40, 5))
    assert table.changes(0, snapshot.id).to_arrow().num_rows >= len(_expected(*range(0, 40, 5)))  # changelog files

    table.write(_rows(100))
    rolled_back = (_data_files(external[0]) | _data_files(external[1])) - written
    assert rolled_back
    table.rollback_to(snapshot_id=snapshot.id)
    assert not rolled_back & (_data_files(external[0]) | _data_files(external[1]))
    assert _read(table) == _expected(*range(0, 40, 5))
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    left = _data_files(external[0]) | _data_files(external[1])
    assert _live_paths(table) <= left < written  # rollback and expiry deleted at the external paths

    stray = Path(sorted(_live_paths(table))[0]).parent / "data-stray-0.parquet"
    stray.write_bytes(b"x")
    foreign = external[0] / "notes.txt"
    foreign.write_text("not the table's")
    (stray.parent / "README").write_text("not a data file")
    _age(_files(tmp_path), days=2)
    fresh = stray.parent / "data-fresh-0.parquet"
    fresh.write_bytes(b"x")
    assert table.remove_orphan_files() == [str(stray)]
    assert foreign.exists() and (stray.parent / "README").exists() and fresh.exists()
    assert _data_files(external[0]) | _data_files(external[1]) == left | {str(fresh)}
    assert _read(table) == _expected(*range(0, 40, 5))

    assert table.rescale(bucket=3) is not None  # rewritten at the external paths too
    assert not _data_files(root) and _live_paths(table) <= _data_files(external[0]) | _data_files(external[1])
    assert {os.path.basename(os.path.dirname(p)) for p in _live_paths(table)} == {"bucket-0", "bucket-1", "bucket-2"}
    assert _read(table) == _expected(*range(0, 40, 5))


def test_postpone_bucket_files_at_the_external_paths(tmp_path: Path) -> None:
    """A postpone-bucket table: the writer's ``bucket-postpone`` files and the buckets its
    compaction makes of them are all under the external path."""
    external = tmp_path / "ext"
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "-2", "postpone.default-bucket-num": "2", "data-file.path-directory": "data",
                 "postpone.batch-write-fixed-bucket": "false",
                 "data-file.external-paths": f"file://{external}", "data-file.external-paths.strategy": "round-robin"})
    table.write(_rows(0))
    assert {os.path.basename(os.path.dirname(p)) for p in _data_files(external)} == {"bucket-postpone"}
    table.write(_rows(5))
    table.compact()
    assert not _data_files(table.location)
    assert {os.path.relpath(os.path.dirname(p), external) for p in _live_paths(table)} <= \
        {f"data/p={p}/bucket-{b}" for p in "ab" for b in (0, 1)}
    assert _read(table) == _expected(0, 5)


def test_specific_fs_on_an_append_table(tmp_path: Path) -> None:
    """``specific-fs`` writes only to the external paths of the named scheme (the s3 one is never
    touched); an append table's writes, compaction, delete and update keep to it."""
    external = tmp_path / "ext"
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, partition_keys=["p"],
        options={"data-file.external-paths": f"s3://nowhere/t,file://{external}",
                 "data-file.external-paths.strategy": "specific-fs", "data-file.external-paths.specific-fs": "FILE",
                 "compaction.min.file-num": "2"})
    for start in (0, 10, 20):
        table.write(_rows(start))
    table.delete("k < 5")
    table.update("k = 12", set={"v": "x"})
    table.compact(full=True)
    assert not _data_files(table.location)
    assert _live_paths(table) <= _data_files(external)
    rows = _read(table)
    assert [r["k"] for r in rows] == sorted(range(5, 30), key=lambda k: ("a" if k % 2 == 0 else "b", k))
    assert [r["v"] for r in rows if r["k"] == 12] == ["x"]


def test_strategy_none_leaves_the_external_paths_unused(tmp_path: Path) -> None:
    """With strategy ``none`` (the default) the external paths are not used; a table whose
    strategy is changed later reads files of both kinds."""
    external = tmp_path / "ext"
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], options={"bucket": "1", "data-file.external-paths": f"file://{external}"})
    table.write(_rows(0))
    assert not external.exists() and _data_files(table.location)
    table.set_options({"data-file.external-paths.strategy": "round-robin"})
    table.write(_rows(5))
    assert _data_files(external)
    assert _read(table) == _expected(0, 5)
    table.compact(full=True)
    assert _read(table) == _expected(0, 5)


def test_bad_external_paths_name_the_option_and_change_nothing(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path / "wh"))

    def create(name: str, options: dict[str, str]) -> cl.Table:
        return catalog.create_table(name, SCHEMA, primary_keys=["p", "k"], options={"bucket": "1", **options})

    with pytest.raises(OptionError, match=r"data-file.external-paths.strategy") as unknown:
        create("db.a", {"data-file.external-paths.strategy": "random"})
    assert "random" in str(unknown.value)
    with pytest.raises(OptionError, match=r"data-file.external-paths.*scheme"):
        create("db.b", {"data-file.external-paths": str(tmp_path / "bare"), "data-file.external-paths.strategy":
                        "round-robin"})
    with pytest.raises(OptionError, match=r"data-file.external-paths.strategy.*round-robin"):
        create("db.c", {"data-file.external-paths": f"file://{tmp_path}/e",
                        "data-file.external-paths.strategy": "entropy-inject"})

    blocked = tmp_path / "a-file"
    blocked.write_text("in the way")
    cases = [
        ({"data-file.external-paths": f"file://{blocked}/sub", "data-file.external-paths.strategy": "round-robin"},
         "'data-file.external-paths'.*cannot be made"),
        ({"data-file.external-paths": f"file://{tmp_path}/e", "data-file.external-paths.strategy": "specific-fs"},
         "data-file.external-paths.specific-fs"),
        ({"data-file.external-paths": f"file://{tmp_path}/e", "data-file.external-paths.strategy": "specific-fs",
          "data-file.external-paths.specific-fs": "oss"}, "'data-file.external-paths'.*oss"),
        ({"data-file.external-paths": "s3://bucket/t", "data-file.external-paths.strategy": "round-robin"},
         "'data-file.external-paths'.*another filesystem"),
    ]
    for n, (options, message) in enumerate(cases):
        table = create(f"db.t{n}", options)
        before = _files(tmp_path)
        with pytest.raises(OptionError, match=message):
            table.write(_rows(0))
        assert table.latest_snapshot() is None and _files(tmp_path) == before


def test_a_file_on_another_filesystem_is_refused_when_read(tmp_path: Path) -> None:
    """A table read through another filesystem than the one its external files are on (here
    its metadata copied to memory://) names the file it cannot open."""
    table = cl.Catalog(str(tmp_path / "wh")).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"],
        options={"bucket": "1", "data-file.external-paths": f"file://{tmp_path}/ext",
                 "data-file.external-paths.strategy": "round-robin"})
    table.write(_rows(0))
    memory = fsspec.filesystem("memory")
    copy = f"/{uuid.uuid4().hex}"
    for path in _files(table.location):
        memory.pipe_file(f"{copy}/{os.path.relpath(path, table.location)}", Path(path).read_bytes())
    try:
        [external] = _live_paths(table)
        with pytest.raises(StorageError, match="another filesystem") as refused:
            cl.open_table(f"memory://{copy}").scan().to_arrow()
        assert refused.value.file == f"file:{external}"
    finally:
        memory.rm(copy, recursive=True)
