"""Streams over OVERWRITE snapshots: skipped by default, as Paimon's; with Paimon's
``streaming-read-overwrite`` (primary-key tables) the rows of the files an overwrite removed
come as -D (Paimon's ``ReverseReader``: an insert as -D, a retraction as +I; rows deletion
vectors marked left out), then the rows of the files it added as stored; with
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
    # Not merged: every stored row of the removed files, key 2's replaced one too.
    assert sorted(removed) == [("-D", 1, "a"), ("-D", 2, "B"), ("-D", 2, "b"), ("-D", 3, "c"), ("-D", 4, "d")]
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


def test_a_retraction_of_a_removed_file_streams_as_an_insert(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1", "streaming-read-overwrite": "true",
                                                     "write-only": "true"})
    table.write(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    table.write(pa.table({"k": pa.array([2], pa.int64()), "v": [None], "rowkind": ["-D"]}))
    stream = table.stream(mode="latest")
    assert _changes(stream) == []
    table.rescale(bucket=2)
    assert sorted(_changes(stream)) == [("+I", 1, "a"), ("+I", 2, None), ("-D", 1, "a"), ("-D", 2, "b")]


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
