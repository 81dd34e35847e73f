"""The layout interop matrix: file layout × table kind × writer. Another engine (pypaimon 2.1 or
Java Paimon 0.9) makes the table in an ORC, Avro, per-level or path-directory layout and
writes it; changelake writes on it, tags it, branches it, writes the branch and compacts;
the other engine writes on after that. Every engine then reads every snapshot, the tag and the
branch alike. (Java 0.9 has no ``data-file.path-directory``; pypaimon 2.1 writes no
per-level formats, so each engine makes the layouts it can.)"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl
from pypaimon_oracle import Pypaimon

Row = dict[str, Any]
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()),
                    pa.field("d", pa.float64())])
LAYOUTS = {
    "pypaimon": [{"file.format": "orc"}, {"file.format": "avro"}, {"data-file.path-directory": "data"}],
    "java": [{"file.format": "orc"}, {"file.format": "avro"}, {"file.format.per.level": "0:avro,5:orc"}],
}
CASES = [(writer, layout) for writer, layouts in LAYOUTS.items() for layout in layouts]


def _rows(ids: range, tag: str) -> list[Row]:
    return [{"id": i, "v": f"{tag}{i}", "d": i / 4} for i in ids]


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r["id"], r["v"]))


class _Other:
    """The engine that made the table: its writes and reads of ``db.t``."""

    def __init__(self, warehouse: str, engine: JavaPaimon | Pypaimon) -> None:
        self.warehouse = warehouse
        self.engine = engine

    def create(self, *, primary_key: bool, options: dict[str, str]) -> None:
        keys = ["id"] if primary_key else []
        options = {**options, "bucket": "2"} if primary_key else options
        if isinstance(self.engine, JavaPaimon):
            self.engine.create_table(self.warehouse, "db.t", [("id", "BIGINT"), ("v", "STRING"), ("d", "DOUBLE")],
                                     primary_keys=keys, options=options)
        else:
            self.engine.create_table(self.warehouse, "db.t", SCHEMA, primary_keys=keys, options=options)

    def write(self, rows: list[Row]) -> None:
        if isinstance(self.engine, JavaPaimon):
            self.engine.write(self.warehouse, "db.t", [("+I", row) for row in rows])
        else:
            self.engine.write(self.warehouse, "db.t", pa.Table.from_pylist(rows, schema=SCHEMA))

    def read(self, name: str = "db.t", options: dict[str, str] | None = None) -> list[Row]:
        if isinstance(self.engine, JavaPaimon):
            return _sorted(self.engine.read(self.warehouse, name, options=options))
        return _sorted(self.engine.read(self.warehouse, name, options).to_pylist())


@pytest.mark.parametrize("primary_key", [True, False], ids=["pk", "append"])
@pytest.mark.parametrize(("writer", "layout"), CASES, ids=[f"{w}-{'-'.join(o.values())}" for w, o in CASES])
def test_engines_read_each_others_layouts_at_every_snapshot_tag_and_branch(
        tmp_path: Path, request: pytest.FixtureRequest, writer: str, layout: dict[str, str],
        primary_key: bool) -> None:
    warehouse = str(tmp_path)
    other = _Other(warehouse, request.getfixturevalue("java" if writer == "java" else "pypaimon"))
    other.create(primary_key=primary_key, options=layout)
    other.write(_rows(range(0, 8), "a"))

    table = cl.Catalog(warehouse).get_table("db.t")
    table.write(pa.Table.from_pylist(_rows(range(5, 12), "cl"), schema=SCHEMA))
    table.create_tag("t2")
    branch = table.create_branch("b", from_tag="t2")
    branch.write(pa.Table.from_pylist(_rows(range(10, 14), "br"), schema=SCHEMA))
    table.compact(full=True)
    other.write(_rows(range(1, 3), "z"))

    snapshots = [s.id for s in table.snapshots()]
    assert len(snapshots) == 4
    for snapshot_id in snapshots:
        ours = _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())
        assert other.read(options={"scan.snapshot-id": str(snapshot_id)}) == ours, snapshot_id
    latest = _sorted(table.scan().to_arrow().to_pylist())
    expected = {r["id"]: r for r in _rows(range(0, 8), "a") + _rows(range(5, 12), "cl") + _rows(range(1, 3), "z")}
    assert latest == (_sorted(list(expected.values())) if primary_key else
                      _sorted(_rows(range(0, 8), "a") + _rows(range(5, 12), "cl") + _rows(range(1, 3), "z")))
    assert other.read(options={"scan.tag-name": "t2"}) == _sorted(table.scan(tag="t2").to_arrow().to_pylist())
    assert other.read("db.t$branch_b") == _sorted(branch.scan().to_arrow().to_pylist())
    assert len(branch.scan().to_arrow()) == (14 if primary_key else 19)

    # The layout held: the data files are where and in the formats the options say.
    root = f"{warehouse}/db.db/t"
    files = glob.glob(f"{root}/**/bucket-*/data-*", recursive=True)
    assert files
    extensions = {name.rsplit(".", 1)[1] for name in files}
    if "file.format" in layout:
        assert extensions == {layout["file.format"]}
    elif "file.format.per.level" in layout:
        assert extensions == ({"avro", "orc"} if primary_key else {"parquet"})
    else:
        assert all(name.startswith(f"{root}/data/") for name in files)
