"""Branches across engines: pypaimon 2.1 and Java Paimon 0.9 read (and write) the branches
changelake makes (``db.t$branch_<name>``); changelake reads, writes and fast-forwards to the
branches they make; the table's maintenance keeps what changelake's branches name."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
from java_paimon import JavaPaimon

import changelake as cl
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.string())])
FAR_FUTURE = 2**62

Row = dict[str, Any]


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: r["k"])


def _ours(table: cl.Table, **scan: Any) -> list[Row]:
    return _sorted(table.scan(**scan).to_arrow().to_pylist())


def _write(table: cl.Table, rows: dict[int, str]) -> None:
    table.write(pa.table({"k": list(rows), "v": list(rows.values())}, schema=SCHEMA))


def _table(warehouse: str) -> cl.Table:
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    _write(table, {1: "a", 2: "a", 3: "a"})
    table.create_tag("t1")
    _write(table, {2: "main", 4: "main"})
    return table


def test_pypaimon_reads_and_writes_changelakes_branches(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = _table(warehouse)
    dev = table.create_branch("dev", from_tag="t1")
    _write(dev, {1: "dev", 9: "dev"})
    dev.create_tag("d2")
    empty = table.create_branch("empty")
    _write(empty, {7: "empty"})
    table.create_branch("at2", from_snapshot=2)

    def theirs(name: str, options: dict[str, str] | None = None) -> list[Row]:
        return _sorted(pypaimon.read(warehouse, name, options).to_pylist())

    assert theirs("db.t$branch_dev") == _ours(dev) == [{"k": 1, "v": "dev"}, {"k": 2, "v": "a"},
                                                       {"k": 3, "v": "a"}, {"k": 9, "v": "dev"}]
    assert theirs("db.t$branch_dev", {"scan.tag-name": "t1"}) == _ours(table, tag="t1")
    assert theirs("db.t$branch_dev", {"scan.tag-name": "d2"}) == _ours(dev)
    assert theirs("db.t$branch_empty") == [{"k": 7, "v": "empty"}]
    assert theirs("db.t$branch_at2") == _ours(table)
    assert theirs("db.t") == _ours(table)

    # pypaimon writes on in changelake's branch; changelake reads what it wrote.
    pypaimon.write(warehouse, "db.t$branch_dev", pa.table({"k": [3, 10], "v": ["py", "py"]}, schema=SCHEMA))
    assert _ours(table.branch("dev")) == theirs("db.t$branch_dev")
    assert [s.id for s in table.branch("dev").snapshots()] == [1, 2, 3]

    # The table's expiry and orphan cleanup keep every file the branches name.
    _write(table, {5: "main"})
    table.compact(full=True)
    table.expire_snapshots(retain_min=1, older_than_ms=FAR_FUTURE)
    table.delete_tag("t1")
    table.remove_orphan_files(older_than=dt.timedelta(0))
    for name in ("dev", "empty", "at2"):
        assert theirs(f"db.t$branch_{name}") == _ours(table.branch(name))
    assert theirs("db.t$branch_dev", {"scan.tag-name": "t1"}) == [{"k": 1, "v": "a"}, {"k": 2, "v": "a"},
                                                                  {"k": 3, "v": "a"}]
    # A branch pypaimon makes from changelake's tag, written by pypaimon, fast-forwarded to.
    table.create_tag("t5")
    pypaimon.create_branch(warehouse, "db.t", "py", "t5")
    pypaimon.write(warehouse, "db.t$branch_py", pa.table({"k": [1, 11], "v": ["pyb", "pyb"]}, schema=SCHEMA))
    assert table.list_branches() == ["at2", "dev", "empty", "py"]
    assert _ours(table.branch("py")) == theirs("db.t$branch_py")
    table.fast_forward("py")
    assert _ours(table) == theirs("db.t") == theirs("db.t$branch_py")


def test_java_paimon_reads_and_writes_changelakes_branches_and_the_other_way(tmp_path: Path,
                                                                               java: JavaPaimon) -> None:
    warehouse = str(tmp_path)
    table = _table(warehouse)
    dev = table.create_branch("dev", from_tag="t1")
    _write(dev, {1: "dev", 9: "dev"})

    def theirs(name: str, options: dict[str, str] | None = None) -> list[Row]:
        return _sorted(java.read(warehouse, name, options=options))

    # Java reads changelake's branch by Paimon's name and by the ``branch`` option.
    assert theirs("db.t$branch_dev") == _ours(dev)
    assert theirs("db.t", {"branch": "dev"}) == _ours(dev)
    assert theirs("db.t$branch_dev", {"scan.tag-name": "t1"}) == _ours(table, tag="t1")
    assert theirs("db.t") == _ours(table)
    java.write(warehouse, "db.t$branch_dev", [("+I", {"k": 3, "v": "java"}), ("-D", {"k": 9, "v": None})])
    assert _ours(table.branch("dev")) == theirs("db.t$branch_dev") == [
        {"k": 1, "v": "dev"}, {"k": 2, "v": "a"}, {"k": 3, "v": "java"}]

    # Branches Java makes (from changelake's tag, and empty) and writes into.
    handle = java.table(warehouse, "db.t")
    handle.createBranch("jb", "t1")
    handle.createBranch("je")
    java.write(warehouse, "db.t$branch_jb", [("+I", {"k": 2, "v": "jb"}), ("+I", {"k": 20, "v": "jb"})])
    java.write(warehouse, "db.t$branch_je", [("+I", {"k": 30, "v": "je"})])
    assert table.list_branches() == ["dev", "jb", "je"]
    assert _ours(table.branch("jb")) == theirs("db.t$branch_jb") == [
        {"k": 1, "v": "a"}, {"k": 2, "v": "jb"}, {"k": 3, "v": "a"}, {"k": 20, "v": "jb"}]
    assert _ours(table.branch("je")) == [{"k": 30, "v": "je"}]
    _write(table.branch("jb"), {21: "ours"})
    assert theirs("db.t$branch_jb") == _ours(table.branch("jb"))

    # changelake fast-forwards the table to Java's branch; Java reads the table as the branch.
    table.fast_forward("jb")
    assert theirs("db.t") == _ours(table) == _ours(table.branch("jb"))
    java.write(warehouse, "db.t", [("+I", {"k": 40, "v": "after"})])
    assert _ours(table) == theirs("db.t") and {"k": 40, "v": "after"} in _ours(table)
