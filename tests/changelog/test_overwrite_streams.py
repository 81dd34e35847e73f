"""Streams over OVERWRITE snapshots: skipped by default, as Paimon's; with Paimon's
``streaming-read-overwrite`` (primary-key tables) the rows of the files an overwrite removed
come per bucket merged, each as -D (Paimon's IncrementalChangelogReadProvider since 1.0: merge
reader, ReverseReader; rows deletion vectors marked left out), then the merged rows of the files
it added; with
``streaming-read-append-overwrite`` (append tables) the rows of the files it added, as +I."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _changes(stream: Any) -> list[tuple[str, int, str]]:
    return [(r["rowkind"], r["k"], r["v"]) for b in stream for r in b.data.to_pylist()]


@pytest.mark.parametrize("options", [{}, {"changelog-producer": "input"}], ids=["none", "input"])
def test_an_overwrite_streams_its_removed_rows_as_deletes_then_its_new_rows(tmp_path: Path,
                                                                            options: dict[str, str]) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2", "streaming-read-overwrite": "true", **options})
    table.write(pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}))
    table.write(pa.table({"k": pa.array([2, 4], pa.int64()), "v": ["B", "d"]}))
    stream = table.stream()
    assert sorted(_changes(stream)) == [("+I", 1, "a"), ("+I", 2, "B"), ("+I", 3, "c"), ("+I", 4, "d")]
    table.rescale(bucket=3)
    changes = _changes(stream)
    removed = [c for c in changes if c[0] == "-D"]
    added = [c for c in changes if c[0] != "-D"]
    assert changes == removed + added  # the removed files first
    assert sorted(added) == [("+I", 1, "a"), ("+I", 2, "B"), ("+I", 3, "c"), ("+I", 4, "d")]
    # Merged: each key once, with the value it had (not key 2's replaced "b").
    assert sorted(removed) == [("-D", 1, "a"), ("-D", 2, "B"), ("-D", 3, "c"), ("-D", 4, "d")]
    table.write(pa.table({"k": pa.array([5], pa.int64()), "v": ["e"]}))
    assert _changes(stream) == [("+I", 5, "e")]


def test_rows_the_deletion_vectors_mark_in_a_removed_file_are_left_out(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1", "streaming-read-overwrite": "true",
                                                     "deletion-vectors.enabled": "true"})
    table.write(pa.table({"k": pa.array(range(100), pa.int64()), "v": ["a"] * 100}))
    table.write(pa.table({"k": pa.array([2, 400], pa.int64()), "v": ["B", "d"]}))  # marks key 2 of the first file
    stream = table.stream(mode="latest")
    assert _changes(stream) == []
    table.rescale(bucket=2)
    removed = sorted(c for c in _changes(stream) if c[0] == "-D")
    assert removed == sorted([("-D", k, "a") for k in range(100) if k != 2] + [("-D", 2, "B"), ("-D", 400, "d")])


def test_a_key_a_removed_file_deletes_is_not_brought_back(tmp_path: Path) -> None:
    # Paimon 0.9 read the removed files unmerged and refused their retractions; a retraction
    # read as +I (what changelake did) brought key 2 back to a consumer folding the stream.
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1", "streaming-read-overwrite": "true",
                                                     "write-only": "true"})
    table.write(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    table.write(pa.table({"k": pa.array([2], pa.int64()), "v": [None], "rowkind": ["-D"]}))
    stream = table.stream(mode="latest")
    assert _changes(stream) == []
    table.rescale(bucket=2)
    assert sorted(_changes(stream)) == [("+I", 1, "a"), ("-D", 1, "a")]


def test_an_overwrite_whose_replaced_snapshot_expired_is_a_clear_error(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1", "streaming-read-overwrite": "true"})
    table.write(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    stream = table.stream(mode="latest", consumer_id="c")
    assert _changes(stream) == []
    stream.commit()
    overwrite = table.overwrite(pa.table({"k": pa.array([3], pa.int64()), "v": ["c"]}))
    assert overwrite is not None
    # The consumer holds the overwrite; expiring the snapshot before it deletes the files it removed.
    table.expire_snapshots(retain_max=1, retain_min=1)
    with pytest.raises(errors.SnapshotExpiredError, match=f"OVERWRITE snapshot {overwrite.id}"):
        _changes(stream)


def test_streams_skip_overwrites_unless_asked(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    table.write(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    plain, asked = table.stream(mode="latest"), table.stream(mode="latest",
                                                             options={"streaming-read-overwrite": "true"})
    assert _changes(plain) == _changes(asked) == []
    table.rescale(bucket=3)
    assert _changes(plain) == []
    assert sorted(_changes(asked)) == [("+I", 1, "a"), ("+I", 2, "b"), ("-D", 1, "a"), ("-D", 2, "b")]


def test_an_append_tables_overwrite_streams_its_new_rows(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    table = cl.Catalog(str(tmp_path)).create_table("db.a", schema, options={"bucket": "2", "bucket-key": "k"})
    table.write(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}))
    plain = table.stream(mode="latest")
    asked = table.stream(mode="latest", options={"streaming-read-append-overwrite": "true"})
    assert _changes(plain) == _changes(asked) == []
    table.rescale(bucket=3)
    assert _changes(plain) == []
    assert sorted(_changes(asked)) == [("+I", 1, "a"), ("+I", 2, "b"), ("+I", 3, "c")]


def test_streaming_read_overwrite_is_refused_where_paimon_refuses_it(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    with pytest.raises(errors.OptionError, match="'streaming-read-overwrite': applies only to tables with a primary"):
        catalog.create_table("db.a", pa.schema([("k", pa.int64())]), options={"streaming-read-overwrite": "true"})
    for producer in ("lookup", "full-compaction"):
        with pytest.raises(errors.OptionError, match=f"with changelog-producer {producer}"):
            catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                                 options={"changelog-producer": producer, "streaming-read-overwrite": "true"})
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options={"changelog-producer": "lookup"})
    with pytest.raises(errors.OptionError, match="'streaming-read-overwrite'"):
        table.set_options({"streaming-read-overwrite": "true"})
