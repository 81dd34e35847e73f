"""Tables whose data files live elsewhere than their bucket directories, across Paimon clients:
``data-file.path-directory`` (bucket directories under ``<table>/<directory>``) and
``data-file.external-paths`` (new files under other directories, each manifest entry recording
its URI), written alternately by pypaimon 2.1 and changelake, each reading what the
other wrote, changelake compacting files of both; and on S3, a table whose external path is another
prefix of the store, which pypaimon reads.

Java Paimon 0.9 (the bridge jar here) has neither option (they came in later Paimon releases):
it would write a table that has them at the table's root and read no external file, so there
is no Java case.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from pypaimon_oracle import Pypaimon
from s3_support import S3Endpoint

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
Row = dict[str, Any]


def _rows(start: int, count: int = 12) -> pa.Table:
    return pa.table({"p": ["a", "b", "c"] * (count // 3), "k": list(range(start, start + count)),
                     "v": [f"v{start}"] * count}, schema=SCHEMA)


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r["p"], r["k"]))


def _expected(*starts: int) -> list[Row]:
    rows = {(r["p"], r["k"]): r for start in starts for r in _rows(start).to_pylist()}
    return _sorted(list(rows.values()))


def _data_files(root: Path) -> set[str]:
    return {os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.startswith("data-")}


def _layout(tmp_path: Path, layout: str) -> tuple[dict[str, str], list[Path]]:
    """The table options of a layout and the directories its data files must be under."""
    external = [tmp_path / "ext1", tmp_path / "ext2"]
    uris = ",".join(f"file://{e}" for e in external)
    table = tmp_path / "wh" / "db.db" / "t"
    return {
        "path-directory": ({"data-file.path-directory": "data"}, [table / "data"]),
        "external": ({"data-file.external-paths": uris, "data-file.external-paths.strategy": "round-robin"},
                     external),
        "both": ({"data-file.path-directory": "data", "data-file.external-paths": f"s3://nowhere/t,{uris}",
                  "data-file.external-paths.strategy": "specific-fs",
                  "data-file.external-paths.specific-fs": "file"}, [e / "data" for e in external]),
    }[layout]


@pytest.mark.parametrize("append", [False, True], ids=["primary-key", "append"])
@pytest.mark.parametrize("layout", ["path-directory", "external", "both"])
def test_pypaimon_and_changelake_write_one_table(tmp_path: Path, pypaimon: Pypaimon, layout: str,
                                                 append: bool) -> None:
    warehouse = str(tmp_path / "wh")
    options, places = _layout(tmp_path, layout)
    keys = [] if append else ["p", "k"]
    pypaimon.create_table(warehouse, "db.t", SCHEMA, primary_keys=keys, partition_keys=["p"],
                          options={"bucket": "2" if not append else "-1", **options})
    pypaimon.write(warehouse, "db.t", _rows(0))
    pypaimon.write(warehouse, "db.t", _rows(6))
    theirs = _data_files(tmp_path)
    assert theirs and all(f.startswith(tuple(f"{p}/p=" for p in places)) for f in theirs)

    table = cl.Catalog(warehouse).get_table("db.t")
    expected = _expected(0, 6) if not append else _sorted(_rows(0).to_pylist() + _rows(6).to_pylist())
    assert _sorted(table.scan().to_arrow().to_pylist()) == expected
    table.write(_rows(20))
    table.compact(full=True)
    ours = _data_files(tmp_path) - theirs
    assert ours and all(f.startswith(tuple(f"{p}/p=" for p in places)) for f in ours)
    assert not [f for f in _data_files(tmp_path / "wh") if not f.startswith(tuple(map(str, places)))]

    pypaimon.write(warehouse, "db.t", _rows(3))
    expected = _sorted([*expected, *_rows(20).to_pylist(), *_rows(3).to_pylist()]) if append else \
        _expected(0, 6, 20, 3)
    assert _sorted(pypaimon.read(warehouse, "db.t").to_pylist()) == expected
    table.refresh()
    assert _sorted(table.scan().to_arrow().to_pylist()) == expected


def test_external_paths_on_s3(s3: S3Endpoint, s3_warehouse: str, pypaimon: Pypaimon) -> None:
    external = f"{s3_warehouse}-external"
    table = cl.Catalog(s3_warehouse, storage_options=s3.storage_options).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "2", "data-file.external-paths": external,
                 "data-file.external-paths.strategy": "round-robin"})
    table.write(_rows(0))
    table.write(_rows(6))
    table.compact(full=True)
    prefix = external.removeprefix(f"s3://{s3.bucket}/")
    written = [k for k in s3.keys(prefix) if k.rsplit("/", 1)[-1].startswith("data-")]
    assert written and all(k.startswith((f"{prefix}/p=a/bucket-", f"{prefix}/p=b/bucket-", f"{prefix}/p=c/bucket-"))
                           for k in written)
    table_prefix = s3_warehouse.removeprefix(f"s3://{s3.bucket}/") + "/"
    assert not [k for k in s3.keys(table_prefix) if k.rsplit("/", 1)[-1].startswith("data-")]
    expected = _expected(0, 6)
    assert _sorted(table.scan().to_arrow().to_pylist()) == expected
    theirs = pypaimon.read(s3_warehouse, "db.t", catalog_options=s3.paimon_options)
    assert _sorted(theirs.to_pylist()) == expected
    stray = f"{s3.bucket}/{written[0].rsplit('/', 1)[0]}/data-stray-0.parquet"
    table.context.file_io.write_bytes(stray, b"x")
    assert table.remove_orphan_files(older_than=dt.timedelta(0)) == [stray]
    assert _sorted(table.scan().to_arrow().to_pylist()) == expected
