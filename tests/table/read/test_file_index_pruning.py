"""File indexes (``file-index.bloom-filter.columns``, ``file-index.bitmap.columns``): every data
file written (appends, flushes, compactions) gets one, embedded in its manifest entry or
beside it as ``<data file>.index``; reads skip files whose index rules out an ``=`` or ``IN``
filter, under the rules of value statistics; expiry, orphan cleanup and failed writes treat
the index file as part of its data file; bad options are refused naming them."""

from __future__ import annotations

import datetime as dt
import glob
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import OptionError

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                    pa.field("k", pa.int32()), pa.field("day", pa.date32()), pa.field("ts", pa.timestamp("ms")),
                    pa.field("score", pa.float64()), pa.field("raw", pa.binary())])
FILES = 4
ROWS = 200
BLOOM = {"file-index.bloom-filter.columns": "name,day,ts,score,raw", "file-index.bitmap.columns": "k"}


def _batch(file: int, *, rename: str = "name") -> pa.Table:
    """File ``file``'s rows: every FILES-th id from ``file`` (so value statistics of every
    column span nearly the whole range and skip no file), the bitmap column ``k`` a few values
    of its own."""
    ids = list(range(file, FILES * ROWS, FILES))
    return pa.table({"id": ids, "name": [None if i % 50 == 0 else f"n{i:05d}" for i in ids],
                     "k": [100 * file + i % 3 for i in range(len(ids))],
                     "day": pa.array([19_000 + i for i in ids], pa.date32()),
                     "ts": pa.array([i * 1_000 for i in ids], pa.timestamp("ms")),
                     "score": [i / 4 for i in ids], "raw": [i.to_bytes(4, "big") for i in ids]}, schema=SCHEMA)


def _files(scan: cl.Scan) -> int:
    return sum(len(split.files) for split in scan.plan())


def _ids(scan: cl.Scan) -> list[int]:
    return sorted(scan.to_arrow().column("id").to_pylist())


def _index_files(root: Path) -> list[str]:
    return sorted(glob.glob(f"{root}/**/*.index", recursive=True))


def _append(tmp_path: Path, options: dict[str, str]) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.a", SCHEMA, options={"bucket": "-1", **options})
    for file in range(FILES):
        table.write(_batch(file))
    return table


@pytest.mark.parametrize(("options", "index_files"), [
    pytest.param({}, FILES, id="index-files"),
    pytest.param({"file-index.in-manifest-threshold": "64 kb", "file-index.bloom-filter.name.items": "300",
                  **{f"file-index.bloom-filter.{c}.items": "300" for c in ("day", "ts", "score", "raw")}}, 0,
                 id="embedded"),
    pytest.param({"file.format": "orc"}, FILES, id="orc"),
    pytest.param({"file.format": "avro"}, FILES, id="avro"),
])
def test_append_table_skips_files_by_their_indexes(tmp_path: Path, options: dict[str, str], index_files: int) -> None:
    table = _append(tmp_path, {**BLOOM, **options})
    assert len(_index_files(tmp_path)) == index_files
    assert _files(table.scan()) == FILES
    assert _files(table.scan(filter=pc.field("id") == 202)) == FILES  # id has no index, its stats span all
    for where, ids in [
        (pc.field("name") == "n00202", [202]),
        ("name IN ('n00005', 'n00009')", [5, 9]),
        (pc.field("k") == 201, [i for i in range(2, FILES * ROWS, FILES)][1::3]),
        (pc.field("k").isin([1, 301]), [i for i in range(0, FILES * ROWS, FILES)][1::3]
         + [i for i in range(3, FILES * ROWS, FILES)][1::3]),
        (pc.field("day") == pa.scalar(dt.date.fromordinal(dt.date(1970, 1, 1).toordinal() + 19_007)), [7]),
        (pc.field("ts") == pa.scalar(11_000, pa.timestamp("ms")), [11]),
        (pc.field("score") == 2.5, [10]),
        (pc.field("raw") == (13).to_bytes(4, "big"), [13]),
        ((pc.field("name") == "n00202") | (pc.field("name") == "n00301"), [202, 301]),
        ((pc.field("name") == "n00202") & (pc.field("id") > 0), [202]),
    ]:
        scan = table.scan(filter=where)
        expected_files = len({i % FILES for i in ids})
        assert (_files(scan), _ids(scan)) == (expected_files, sorted(ids)), where
    # values no file holds: nothing is read
    assert _files(table.scan(filter=pc.field("name") == "absent")) == 0
    assert _files(table.scan(filter=pc.field("k") == 7)) == 0
    # what an index cannot rule out: other comparisons, negations, nulls, an OR with another column
    for where in [pc.field("name") != "n00202", pc.field("name") > "n00790",
                  ~(pc.field("name") == "n00202"), (pc.field("name") == "n00202") | (pc.field("id") == 1),
                  "name NOT IN ('n00005')"]:
        assert _files(table.scan(filter=where)) == FILES, where
    assert _ids(table.scan(filter=pc.field("name").is_null())) == list(range(0, FILES * ROWS, 50))


def test_reading_without_indexes_and_filters_of_other_types(tmp_path: Path) -> None:
    table = _append(tmp_path, BLOOM | {"file-index.read.enabled": "false"})
    assert _files(table.scan(filter=pc.field("name") == "n00202")) == FILES
    table.set_options({"file-index.read.enabled": "true"})
    assert _files(table.scan(filter=pc.field("name") == "n00202")) == 1
    # a literal of another type is cast to the column's; one no value of the column can equal keeps every file
    assert _files(table.scan(filter=pc.field("k") == pa.scalar(201, pa.int64()))) == 1
    assert _ids(table.scan(filter=pc.field("k") == 201.5)) == []
    assert _files(table.scan(filter="k = 201")) == 1


def test_primary_key_files_are_skipped_only_where_no_merge_needs_them(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "file-index.bloom-filter.columns": "name",
                                          "file-index.in-manifest-threshold": "1 b"})
    table.write(_batch(0))
    # the newer file renames key 4: a read by the old name must not find it in the older file
    table.write(pa.table({**_batch(1).to_pydict(), "id": [4, *_batch(1).column("id").to_pylist()[1:]],
                          "name": ["renamed", *_batch(1).column("name").to_pylist()[1:]]}, schema=SCHEMA))
    assert _files(table.scan()) == 2
    assert _ids(table.scan(filter=pc.field("name") == "n00004")) == []
    assert _ids(table.scan(filter=pc.field("name") == "renamed")) == [4]
    # files alone in their key range are skipped
    table.compact(full=True)
    table.write(pa.table({**_batch(0).to_pydict(), "id": [i + 10_000 for i in _batch(0).column("id").to_pylist()]},
                         schema=SCHEMA))
    assert _files(table.scan()) == 2
    scan = table.scan(filter=pc.field("name") == "n00005")
    assert (_files(scan), _ids(scan)) == (1, [5])


def test_deletion_vector_tables_skip_files_and_compaction_outputs_keep_indexes(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.dv", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "2", "deletion-vectors.enabled": "true", **BLOOM})
    for file in range(FILES):
        table.write(_batch(file))
    table.update("id = 6", set={"name": "six"})
    assert _ids(table.scan(filter=pc.field("name") == "n00006")) == []
    assert _ids(table.scan(filter=pc.field("name") == "six")) == [6]
    files = _files(table.scan())
    assert _files(table.scan(filter=pc.field("name") == "n00202")) < files
    table.compact(full=True)
    live = _files(table.scan())
    assert len(_index_files(tmp_path)) >= live  # the compaction's outputs have indexes too
    scan = table.scan(filter=pc.field("name") == "n00202")
    assert _files(scan) == 1 and _ids(scan) == [202]


def test_expiry_and_orphan_cleanup_delete_index_files_with_their_data_files(tmp_path: Path) -> None:
    external = tmp_path / "external"
    table = _append(tmp_path / "warehouse", BLOOM | {"data-file.external-paths": f"file://{external}",
                                                     "data-file.external-paths.strategy": "round-robin"})
    # the index lies beside its data file, at the external path
    assert len(_index_files(external)) == FILES and not _index_files(tmp_path / "warehouse")
    table.compact(full=True)
    assert len(_index_files(external)) == FILES + 1
    table.expire_snapshots(retain_max=1, retain_min=1)
    assert len(_index_files(external)) == 1
    assert _ids(table.scan(filter=pc.field("name") == "n00202")) == [202]
    # an index file no snapshot names (a writer crashed after writing it) is an orphan
    live = _index_files(external)[0]
    stray = live.replace(".parquet.index", "-stray.parquet.index")
    Path(stray).write_bytes(b"left behind")
    old = (dt.datetime.now() - dt.timedelta(days=2)).timestamp()
    os.utime(stray, (old, old))
    os.utime(live, (old, old))
    assert table.remove_orphan_files() == [stray]
    assert _index_files(external) == [live]


def test_an_aborted_write_leaves_no_index_file(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.a", SCHEMA, options={
        "bucket": "-1", "write-buffer-size": "1 kb", **BLOOM})
    writer = table.writer()
    for file in range(FILES):
        writer.write(_batch(file))
    assert _index_files(tmp_path)  # written with their data files, before any commit
    writer.abort()
    assert _index_files(tmp_path) == [] and not glob.glob(f"{tmp_path}/**/*.parquet", recursive=True)
    writer.close()


@pytest.mark.parametrize(("options", "message"), [
    ({"file-index.bloom-filter.columns": "name,nope"}, "'nope', which the table does not have"),
    ({"file-index.bitmap.columns": "score"}, "'score' of type double, which a bitmap index cannot hold"),
    ({"file-index.bloom-filter.columns": "name", "file-index.bloom-filter.k.fpp": "0.5"},
     "column 'k', which file-index.bloom-filter.columns does not name"),
    ({"file-index.bloom-filter.columns": "name", "file-index.bloom-filter.name.fpp": "2"}, "between 0 and 1"),
    ({"file-index.bloom-filter.columns": "name", "file-index.bloom-filter.name.items": "many"}, "invalid value"),
    ({"file-index.range-bitmap.columns": "name"}, "is unknown"),
])
def test_bad_file_index_options_are_refused(tmp_path: Path, options: dict[str, str], message: str) -> None:
    catalog = cl.Catalog(str(tmp_path))
    with pytest.raises(OptionError, match=message):
        catalog.create_table("db.bad", SCHEMA, options=options)
    table = catalog.create_table("db.good", SCHEMA, options={})
    table.write(_batch(0))
    with pytest.raises(OptionError, match=message):
        table.set_options(options)
    assert table.options == cl.Catalog(str(tmp_path)).get_table("db.good").options
    assert not any(k.startswith("file-index") for k in table.options)
    assert _index_files(tmp_path) == []


def test_a_missing_index_file_is_corrupt_metadata_and_indexed_columns_stay(tmp_path: Path) -> None:
    table = _append(tmp_path, BLOOM)
    os.remove(_index_files(tmp_path)[0])
    with pytest.raises(cl.errors.CorruptMetadataError, match=r"\.index"):
        table.scan(filter=pc.field("name") == "n00202").plan()
    assert _files(table.scan(filter=pc.field("id") > 202)) == FILES  # no = or IN: no index is read
    # as Paimon's schema validation: an indexed column cannot be renamed or dropped away from its option
    with pytest.raises(OptionError, match=r"file-index\.bloom-filter\.columns"):
        table.update_schema().rename_column("name", "title").commit()
    assert "name" in cl.Catalog(str(tmp_path)).get_table("db.a").schema.names


@pytest.mark.parametrize(("stored", "wanted"), [(0.0, -0.0), (-0.0, 0.0)])
def test_a_bloom_filter_finds_either_zero(tmp_path: Path, stored: float, wanted: float) -> None:
    # Arrow's 0.0 equals -0.0, but the bloom filter hashes a double's bits: the file holding
    # the other zero was skipped
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("score", pa.float64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, options={
        "file-index.bloom-filter.columns": "score", "metadata.stats-mode": "none"})
    table.write(pa.table({"id": [1, 2], "score": [stored, 5.0]}, schema=schema))
    assert _ids(table.scan(filter=pc.field("score") == wanted)) == [1]
    assert _ids(table.scan(filter="score = 0.0")) == [1]
