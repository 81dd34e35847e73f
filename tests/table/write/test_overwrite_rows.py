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
from changelake.table.read import deletion_vectors

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
    "primary key, dynamic": ({"bucket": "-1", "dynamic-bucket.target-row-num": "1"}, ["dt", "hh", "id"]),
    "cross-partition": ({"bucket": "-1"}, ["id"]),
    "postpone": ({"bucket": "-2"}, ["dt", "hh", "id"]),
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
    cross = make(tmp_path / "cross", keys=["id"], bucket="-1")
    cross_latest = cross.latest_snapshot()
    with pytest.raises(DataError, match=r"key \{'id': 4\} lives in partition \{'dt': 'b', 'hh': '0'\}"):
        cross.overwrite(rows(("a", "0", 4, 1)))  # key 4 lives in b/0, which a dynamic overwrite of a/0 keeps
    postponed = cl.Catalog(str(tmp_path)).create_table(
        "db.postponed", SCHEMA, primary_keys=["dt", "hh", "id"],
        options={"bucket": "-2", "postpone.batch-write-fixed-bucket": "false"})
    with pytest.raises(OptionError, match="writes real buckets") as info:
        postponed.overwrite(rows(("a", "0", 1, 1)))
    assert info.value.option == "postpone.batch-write-fixed-bucket"
    assert cross.latest_snapshot() == cross_latest and postponed.latest_snapshot() is None


def test_a_dynamic_bucket_overwrite_writes_the_partitions_hash_index_anew(tmp_path: Path, pypaimon: Any) -> None:
    table = make(tmp_path, keys=["dt", "hh", "id"], bucket="-1", **{"dynamic-bucket.target-row-num": "3"})
    table.write(rows(*[("a", "0", i, 1) for i in range(10, 20)]))
    landed = table.overwrite(rows(*[("a", "0", i, 2) for i in range(100, 107)]))
    assert landed is not None
    ctx = table.context
    hashes = {(e.partition, e.bucket): e.file.row_count for e in deletion_vectors.index_entries(ctx, landed)
              if e.file.index_type == "HASH"}
    by_partition: dict[str, dict[int, int]] = {}
    for (partition, b), n in hashes.items():
        by_partition.setdefault(ctx.describe_partition(partition), {})[b] = n
    # the replaced partition's keys fill buckets 0, 1, 2 from scratch (3 + 3 + 1); the others keep theirs
    assert by_partition["partition {dt=a, hh=0}"] == {0: 3, 1: 3, 2: 1}
    assert set(by_partition) == {"partition {dt=a, hh=0}", "partition {dt=a, hh=1}", "partition {dt=b, hh=0}"}
    # writes after it find the new keys in their buckets: an update stays one row
    table.write(rows(("a", "0", 100, 3), ("a", "0", 200, 3)))
    assert [r for r in state(table) if r[:2] == ("a", "0")] == [("a", "0", i, 3 if i in (100, 200) else 2)
                                                                for i in [*range(100, 107), 200]]
    warehouse = str(tmp_path)
    assert sorted(tuple(r.values()) for r in pypaimon.read(warehouse, "db.t", {}).to_pylist()) == state(table)


@pytest.mark.parametrize(("engine", "expected"), [
    ({}, [("b", "0", 1, 3)]),  # deduplicate: the key moves to its last row's partition
    ({"merge-engine": "partial-update"}, [("a", "0", 1, 3)]),  # stays in its first, merged there
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"}, [("a", "0", 1, 5)]),
    ({"merge-engine": "first-row"}, [("a", "0", 1, 2)]),  # the first row; the other partition's dropped
])
def test_a_cross_partition_overwrite_keeps_a_key_of_two_partitions_in_one(tmp_path: Path, engine: dict[str, str],
                                                                          expected: list[Any]) -> None:
    """Overwrite rows with one key in two partitions land it in one partition, by the merge
    engine, as a write into an empty table does (not in both: reads saw the key twice and every
    later write failed at its key index's bootstrap)."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt", "hh"],
                                                   options={"bucket": "-1", **engine})
    table.overwrite(rows(("a", "0", 1, 2), ("b", "0", 1, 3)))
    assert state(table) == expected
    table.write(rows(("c", "0", 2, 1)))
    assert state(table) == sorted([*expected, ("c", "0", 2, 1)])
