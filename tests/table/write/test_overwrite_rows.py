"""``table.overwrite(data, partitions=...)``, Paimon's INSERT OVERWRITE: dynamic partition
overwrite (the default), static and partial static partitions, the whole table, on primary-key
tables (every merge engine merges the new rows among themselves only) and append tables; the
OVERWRITE snapshot streams skip; writes after it; pypaimon reads it; bad input writes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import DataError, OptionError

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("hh", pa.string(), nullable=False),
                    pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def rows(*items: tuple[str, str, int, int]) -> pa.Table:
    return pa.table({"dt": [i[0] for i in items], "hh": [i[1] for i in items], "id": [i[2] for i in items],
                     "v": [i[3] for i in items]}, schema=SCHEMA)


def state(table: cl.Table, **at: Any) -> list[tuple[str, str, int, int]]:
    return sorted((r["dt"], r["hh"], r["id"], r["v"]) for r in table.scan(**at).to_arrow().to_pylist())


def make(tmp_path: Path, *, keys: list[str] | None, **options: str) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=keys, partition_keys=["dt", "hh"],
                                                   options=options)
    table.write(rows(("a", "0", 1, 1), ("a", "0", 2, 1), ("a", "1", 3, 1), ("b", "0", 4, 1)))
    table.write(rows(("a", "0", 1, 2)))
    return table


KINDS = {
    "primary key, fixed, lookup": ({"bucket": "2", "changelog-producer": "lookup"}, ["dt", "hh", "id"]),
    "primary key, deletion vectors": ({"bucket": "2", "deletion-vectors.enabled": "true"}, ["dt", "hh", "id"]),
    "append, unaware": ({"bucket": "-1"}, None),
    "append, fixed": ({"bucket": "2", "bucket-key": "id"}, None),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_dynamic_static_and_whole_table_overwrites(tmp_path: Path, kind: str) -> None:
    options, keys = KINDS[kind]
    table = make(tmp_path, keys=keys, **options)
    before = state(table)
    latest = table.latest_snapshot()
    assert latest is not None

    # Dynamic (the default): only the partitions the rows are in.
    landed = table.overwrite(rows(("a", "0", 9, 9), ("c", "0", 10, 9)))
    assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
    assert state(table) == sorted([r for r in before if r[:2] != ("a", "0")] + [("a", "0", 9, 9), ("c", "0", 10, 9)])
    assert state(table, snapshot_id=latest.id) == before  # time travel reads what was replaced
    assert table.changes(latest.id, landed.id).to_arrow().num_rows == 0  # streams skip it

    # Static, partial: every partition of dt=a, whether or not the rows are in it.
    table.overwrite(rows(("a", "5", 11, 1)), partitions={"dt": "a"})
    assert [r for r in state(table) if r[0] == "a"] == [("a", "5", 11, 1)]
    # Static, empty: the partition is emptied.
    table.overwrite(rows(), partitions={"dt": "c", "hh": "0"})
    assert [r for r in state(table) if r[0] == "c"] == []

    # The whole table, with dynamic-partition-overwrite off; writes go on after it.
    table.set_options({"dynamic-partition-overwrite": "false"})
    table.overwrite(rows(("z", "0", 1, 1), ("z", "0", 2, 2)))
    table.write(rows(("z", "0", 3, 3)))
    assert state(table) == [("z", "0", 1, 1), ("z", "0", 2, 2), ("z", "0", 3, 3)]


def test_a_primary_key_overwrite_merges_its_rows_among_themselves(tmp_path: Path) -> None:
    table = make(tmp_path, keys=["dt", "hh", "id"], bucket="1",
                 **{"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"})
    data = rows(("a", "0", 1, 5), ("a", "0", 1, 6), ("a", "0", 2, 7))
    table.overwrite(data.add_column(0, "rowkind", pa.array(["+I", "+I", "+I"])))
    assert [r for r in state(table) if r[:2] == ("a", "0")] == [("a", "0", 1, 11), ("a", "0", 2, 7)]  # not + old
    table.write(rows(("a", "0", 1, 1)))
    assert [r for r in state(table) if r[:3] == ("a", "0", 1)] == [("a", "0", 1, 12)]
    deletes = rows(("a", "0", 2, 0), ("a", "0", 4, 4)).add_column(0, "rowkind", pa.array(["-D", "+I"]))
    table.overwrite(deletes)  # a delete in the new rows leaves its key out
    assert [r for r in state(table) if r[:2] == ("a", "0")] == [("a", "0", 4, 4)]


def test_bad_overwrites_write_nothing(tmp_path: Path) -> None:
    table = make(tmp_path, keys=["dt", "hh", "id"], bucket="2")
    latest = table.latest_snapshot()
    files = {p.name for p in Path(table.location).rglob("data-*")}
    with pytest.raises(DataError, match=r"outside the partition \{'dt': 'a'\}"):
        table.overwrite(rows(("a", "0", 1, 1), ("b", "0", 2, 2)), partitions={"dt": "a"})
    with pytest.raises(DataError, match="null"):
        table.overwrite(pa.table({"dt": ["a"], "hh": ["0"], "id": pa.array([None], pa.int64()), "v": [1]}))
    with pytest.raises(OptionError, match="one dict"):
        table.overwrite(rows(), partitions=[{"dt": "a"}])  # type: ignore[arg-type]
    assert table.latest_snapshot() == latest and {p.name for p in Path(table.location).rglob("data-*")} == files
    dynamic = cl.Catalog(str(tmp_path)).create_table("db.dyn", SCHEMA, primary_keys=["dt", "hh", "id"])
    with pytest.raises(OptionError, match="bucket=-1") as info:
        dynamic.overwrite(rows(("a", "0", 1, 1)))
    assert info.value.option == "bucket"
