"""pypaimon reads a table changelake rolled back, wrote on and swept of orphans: every snapshot
and tag as changelake reads it; and a branch pypaimon made and wrote on stays whole through the
table's orphan cleanup, expiry and rollback."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from pypaimon_oracle import Pypaimon


def _paimon_rows(pypaimon: Pypaimon, warehouse: str, options: dict[str, str] | None = None, *,
                 name: str = "db.t") -> list[dict[str, Any]]:
    """What pypaimon reads of ``name`` (``db.t$branch_b1`` for a branch) with ``options``."""
    return sorted(pypaimon.read(warehouse, name, options).to_pylist(), key=lambda r: r["k"])


def _ours(table: cl.Table, **at: Any) -> list[dict[str, Any]]:
    return sorted(table.scan(**at).to_arrow().to_pylist(), key=lambda r: r["k"])


_SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _two_bucket_table(warehouse: str, *, compaction_trigger: int) -> cl.Table:
    options = {"bucket": "2", "num-sorted-run.compaction-trigger": str(compaction_trigger)}
    return cl.Catalog(warehouse).create_table("db.t", _SCHEMA, primary_keys=["k"], options=options)


def test_pypaimon_reads_a_rolled_back_and_swept_table(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = _two_bucket_table(warehouse, compaction_trigger=2)
    for i in range(6):
        table.write(pa.table({"k": [i, i + 10], "v": [f"a{i}", f"b{i}"]}))
    table.create_tag("at3", 3)
    table.rollback_to(snapshot_id=4)
    table.write(pa.table({"k": [0, 99], "v": ["new", "new"]}))
    # what a crashed writer leaves: a copy of a data file under a name no snapshot knows
    live = next(Path(table.location).rglob("data-*.parquet"))
    stray = live.with_name("data-00000000-0000-0000-0000-000000000000-0.parquet")
    shutil.copyfile(live, stray)
    os.utime(stray, (1_000_000_000, 1_000_000_000))  # from long ago
    assert table.remove_orphan_files(older_than=dt.timedelta(hours=1)) == [str(stray)]
    assert _paimon_rows(pypaimon, warehouse) == _ours(table)
    for snapshot in table.snapshots():
        assert _paimon_rows(pypaimon, warehouse, {"scan.snapshot-id": str(snapshot.id)}) == \
            _ours(table, snapshot_id=snapshot.id)
    assert _paimon_rows(pypaimon, warehouse, {"scan.tag-name": "at3"}) == _ours(table, tag="at3")


def _nothing_more(table: cl.Table) -> None:
    """Orphan cleanup alone: the branch's own commits name files the table does not."""


def _expire(table: cl.Table) -> None:
    table.delete_tag("t2")  # the branch's snapshot 2 is now held by the branch alone
    table.write(pa.table({"k": [1, 2, 3], "v": ["m", "m", "m"]}))
    table.compact(full=True)
    table.expire_snapshots(retain_min=1, retain_max=1, older_than_ms=2**62)


def _rollback(table: cl.Table) -> None:
    table.rollback_to(snapshot_id=1)


@pytest.mark.parametrize("maintain", [_nothing_more, _expire, _rollback])
def test_a_branch_pypaimon_made_survives_the_tables_maintenance(tmp_path: Path, pypaimon: Pypaimon,
                                                                maintain: Callable[[cl.Table], None]) -> None:
    warehouse = str(tmp_path)
    table = _two_bucket_table(warehouse, compaction_trigger=50)
    for i in range(3):
        table.write(pa.table({"k": [i, i + 1], "v": [f"a{i}", f"b{i}"]}))
    table.create_tag("t2", 2)
    pypaimon.create_branch(warehouse, "db.t", "b1", "t2")
    branch = "db.t$branch_b1"
    pypaimon.write(warehouse, branch, pa.table({"k": [2, 50], "v": ["br", "br"]}, schema=_SCHEMA))
    pypaimon.write(warehouse, branch, pa.table({"k": [0, 51], "v": ["br2", "br2"]}, schema=_SCHEMA))
    reads: list[dict[str, str]] = [{}, {"scan.snapshot-id": "2"}, {"scan.snapshot-id": "3"},
                                   {"scan.snapshot-id": "4"}, {"scan.tag-name": "t2"}]
    expected = [_paimon_rows(pypaimon, warehouse, options, name=branch) for options in reads]
    assert expected[1] == expected[4] != expected[0]  # the branch moved on from its tag

    maintain(table)
    assert [_paimon_rows(pypaimon, warehouse, options, name=branch) for options in reads] == expected
    table.remove_orphan_files(older_than=dt.timedelta(0))
    assert [_paimon_rows(pypaimon, warehouse, options, name=branch) for options in reads] == expected
    assert _paimon_rows(pypaimon, warehouse) == _ours(table)


_PARTITIONED = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                          pa.field("v", pa.string())])


@pytest.mark.parametrize("options", [{}, {"deletion-vectors.enabled": "true"}], ids=["merge-on-read", "vectors"])
def test_pypaimon_reads_and_writes_a_rescaled_table(tmp_path: Path, pypaimon: Pypaimon,
                                                    options: dict[str, str]) -> None:
    """A table whose partitions changelake rescaled, one to 4 buckets, one left at 2 (then that
    one to 3): pypaimon reads every snapshot, the OVERWRITE ones included, as changelake does,
    and its writes to a rescaled partition go where changelake reads them."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", _PARTITIONED, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options={"bucket": "2", **options})
    table.write(pa.table({"dt": ["a"] * 30 + ["b"] * 30, "k": list(range(30)) * 2, "v": ["one"] * 60},
                         schema=_PARTITIONED))
    table.write(pa.table({"dt": ["a"] * 20, "k": list(range(20, 40)), "v": ["two"] * 20,
                          "rowkind": ["+U"] * 15 + ["-D"] * 5}))
    table.rescale(bucket=4, partitions=[{"dt": "a"}])
    table.rescale(bucket=3, partitions=[{"dt": "b"}])
    table.rescale(partitions=[{"dt": "b"}])  # b at the table's 3, a left at 4
    pypaimon.write(warehouse, "db.t", pa.table({"dt": ["b"] * 3, "k": [1, 2, 100], "v": ["theirs"] * 3},
                                               schema=_PARTITIONED))
    table.compact(full=True)  # readers of deletion-vector tables see pypaimon's level-0 files once compacted

    def rows(got: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((r["dt"], r["k"], r["v"]) for r in got)

    for snapshot in table.snapshots():
        assert rows(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot.id)}).to_pylist()) == \
            rows(_ours(table, snapshot_id=snapshot.id)), snapshot.id
    assert ("b", 100, "theirs") in rows(_ours(table))


def test_pypaimon_reads_dropped_partitions_deletes_updates_and_a_truncated_table(tmp_path: Path,
                                                                                pypaimon: Pypaimon) -> None:
    """changelake's OVERWRITE snapshots that drop partitions and truncate, and its deletes and
    updates by predicate: pypaimon reads each snapshot as changelake does."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), *_SCHEMA])
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options={"bucket": "2", "deletion-vectors.enabled": "true"})
    for i in range(3):
        table.write(pa.table({"dt": [f"d{j % 3}" for j in range(i, i + 6)], "k": list(range(i, i + 6)),
                              "v": [f"v{i}"] * 6}, schema=schema))
    table.compact(full=True)
    table.drop_partitions([{"dt": "d1"}])
    table.write(pa.table({"dt": ["d1"], "k": [100], "v": ["back"]}, schema=schema))
    table.delete("k < 2")
    table.update("k = 3", set={"v": "updated"})
    table.compact(full=True)
    assert {r["dt"] for r in _ours(table)} == {"d0", "d1", "d2"}
    assert {r["k"] for r in _ours(table)} >= {3, 100} and not {0, 1} & {r["k"] for r in _ours(table)}
    assert [r["v"] for r in _ours(table) if r["k"] == 3] == ["updated"]
    for snapshot in table.snapshots():
        assert _paimon_rows(pypaimon, warehouse, {"scan.snapshot-id": str(snapshot.id)}) == \
            _ours(table, snapshot_id=snapshot.id)
    table.truncate()
    assert _paimon_rows(pypaimon, warehouse) == _ours(table) == []


def test_pypaimon_reads_an_append_table_after_row_level_deletes_and_updates(tmp_path: Path,
                                                                           pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", _SCHEMA, options={"bucket": "2", "bucket-key": "k"})
    for i in range(3):
        table.write(pa.table({"k": list(range(i * 5, i * 5 + 5)), "v": [f"v{i}"] * 5}))
    table.delete("k < 3 OR k > 12")
    table.update("v = 'v1'", set={"v": "updated"})
    assert [r["k"] for r in _ours(table)] == list(range(3, 13))
    for snapshot in table.snapshots():
        assert _paimon_rows(pypaimon, warehouse, {"scan.snapshot-id": str(snapshot.id)}) == \
            _ours(table, snapshot_id=snapshot.id)


def test_pypaimon_reads_an_insert_overwrite(tmp_path: Path, pypaimon: Pypaimon) -> None:
    """changelake's INSERT OVERWRITE (dynamic, then static) of a primary-key table with
    deletion vectors: pypaimon reads every snapshot as changelake does."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), *_SCHEMA])
    table = cl.Catalog(warehouse).create_table("db.t", schema, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options={"bucket": "2", "deletion-vectors.enabled": "true"})
    table.write(pa.table({"dt": ["a", "a", "b"], "k": [1, 2, 3], "v": ["x", "y", "z"]}, schema=schema))
    table.overwrite(pa.table({"dt": ["a", "c"], "k": [5, 6], "v": ["new", "new"]}, schema=schema))
    table.overwrite(pa.table({"dt": ["b"], "k": [7], "v": ["static"]}, schema=schema), partitions={"dt": "b"})
    table.write(pa.table({"dt": ["a"], "k": [5], "v": ["updated"]}, schema=schema))
    table.compact(full=True)
    assert [(r["dt"], r["k"], r["v"]) for r in _ours(table)] == [("a", 5, "updated"), ("c", 6, "new"),
                                                                 ("b", 7, "static")]
    for snapshot in table.snapshots():
        assert _paimon_rows(pypaimon, warehouse, {"scan.snapshot-id": str(snapshot.id)}) == \
            _ours(table, snapshot_id=snapshot.id)
