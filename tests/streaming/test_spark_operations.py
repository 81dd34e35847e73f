"""Paimon's table operations on Spark's executors (``streaming.delete``, ``update``, ``merge``,
``overwrite``): each lands the snapshot its one-process twin (``Table.delete`` ...) lands on a
copy of the table, in every bucket mode; bad input fails before anything is written; inside
``foreachBatch`` a merge lands once per batch across a crash and a restart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession
from test_connect import add_file
from test_sink import events, make_table, rows_of

import changelake as cl
from changelake import streaming
from changelake.errors import CommitConflictError, DataError, FilterError, OptionError, SchemaMismatchError
from changelake.table.commit import overwrite as overwrite_commit
from changelake.table.read import deletion_vectors
from changelake.table.read.live_files import live_entries
from spark_support import MergeBatches

MODES = {
    "fixed-lookup": {"bucket": "2", "changelog-producer": "lookup"},
    "dynamic": {"bucket": "-1", "dynamic-bucket.target-row-num": "10"},
    "cross-partition": {"bucket": "-1"},
}
SOURCE_SCHEMA = "dt string, id long, v int, name string"


def table_of(tmp_path: Path, mode: str) -> cl.Table:
    """A table of three batches of changes, in bucket mode ``mode``."""
    if mode == "cross-partition":  # the primary key lacks the partition column
        table = cl.Catalog(str(tmp_path / "warehouse")).create_table(
            "db.t", pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                               pa.field("v", pa.int32()), pa.field("name", pa.string())]),
            primary_keys=["id"], partition_keys=["dt"], options=MODES[mode])
    else:
        table = make_table(tmp_path, **MODES[mode])
    for b in range(3):
        table.write(pa.Table.from_pylist(events(b)))
    return table


def twin(table: cl.Table, tmp_path: Path) -> cl.Table:
    """A copy of ``table`` for the one-process operation."""
    shutil.copytree(table.location, tmp_path / "twin")
    return cl.open_table(str(tmp_path / "twin"))


def sorted_changes(table: cl.Table, start: int) -> list[dict[str, Any]]:
    latest = table.latest_snapshot()
    assert latest is not None
    rows = table.changes(start, latest.id).to_arrow()
    return rows.sort_by([(n, "ascending") for n in ("rowkind", "dt", "id")]).to_pylist()


def one_key_one_bucket(table: cl.Table) -> None:
    """No key is read twice (each in one bucket of one partition)."""
    rows = table.scan().to_arrow()
    keys = rows.select(table.primary_keys)
    assert keys.group_by(table.primary_keys).aggregate([([], "count_all")]).num_rows == rows.num_rows


@pytest.mark.parametrize("mode", ["fixed-lookup", "cross-partition"])
def test_spark_delete_and_update_land_what_the_table_operations_land(spark: SparkSession, tmp_path: Path,
                                                                    mode: str) -> None:
    table = table_of(tmp_path, mode)
    local = twin(table, tmp_path)
    start = table.latest_snapshot().id  # type: ignore[union-attr]

    deleted = streaming.delete(spark, table, "v = 1 and name <> 'n3'")
    assert deleted is not None and deleted.commit_kind is cl.CommitKind.APPEND and deleted.id == start + 1
    local.delete("v = 1 and name <> 'n3'")
    assert rows_of(table) == rows_of(local)
    assert not any(v == 1 and name != "n3" for v, name in rows_of(table).values())

    updated = streaming.update(spark, table, pc.field("v") == 2, set={"name": "renamed", "v": pc.field("v") + 10})
    assert updated is not None
    local.update(pc.field("v") == 2, set={"name": "renamed", "v": pc.field("v") + 10})
    assert rows_of(table) == rows_of(local)
    assert sum(1 for v, name in rows_of(table).values() if (v, name) == (12, "renamed")) > 10
    one_key_one_bucket(table)
    if mode == "fixed-lookup":  # the lookup producer's changelog, made on the executors, is the same
        assert sorted_changes(table, start) == sorted_changes(local, start)
    assert streaming.delete(spark, table, "v = 1 and name <> 'n3'") is None  # nothing matches now


def test_spark_row_operations_refuse_bad_input_before_writing(spark: SparkSession, tmp_path: Path) -> None:
    table = table_of(tmp_path, "fixed-lookup")
    before = table.latest_snapshot()
    files = {p.name for p in Path(table.location).rglob("*.parquet")}
    with pytest.raises(FilterError, match="nope"):
        streaming.delete(spark, table, "nope = 1")
    with pytest.raises(SchemaMismatchError, match="primary-key"):
        streaming.update(spark, table, "v = 1", set={"id": 3})
    with pytest.raises(SchemaMismatchError, match="not a value of type"):
        streaming.update(spark, table, "v = 1", set={"v": "many"})
    with pytest.raises(DataError, match="2 keys in more than one row"):
        source = spark.createDataFrame([("d0", 1, 5, "a"), ("d0", 1, 6, "b"), ("d1", 2, 5, "a"), ("d1", 2, 5, "a")],
                                       SOURCE_SCHEMA)
        streaming.merge(source, table).when_matched_update().execute()
    with pytest.raises(DataError, match="outside the partition"):
        streaming.overwrite(spark.createDataFrame([("d1", 1, 5, "a")], SOURCE_SCHEMA), table, partitions={"dt": "d0"})
    first_row = make_table(tmp_path / "first", **{"merge-engine": "first-row"})
    with pytest.raises(OptionError, match="first-row"):
        streaming.delete(spark, first_row, "v = 1")
    with pytest.raises(OptionError, match="overwritten whole"):
        cross = table_of(tmp_path / "d", "cross-partition")
        streaming.overwrite(spark.createDataFrame([("d1", 1, 5, "a")], SOURCE_SCHEMA), cross)
    assert table.latest_snapshot() == before
    # the overwrite refused for rows outside its partition left no file behind
    assert {p.name for p in Path(table.location).rglob("*.parquet")} == files


@pytest.mark.parametrize("mode", ["fixed-lookup", "dynamic"])
def test_spark_merge_lands_what_table_merge_lands(spark: SparkSession, tmp_path: Path, mode: str) -> None:
    table = table_of(tmp_path, mode)
    local = twin(table, tmp_path)
    start = table.latest_snapshot().id  # type: ignore[union-attr]
    # Updates of existing keys (batch 2's), deletes (v < 0), new keys, and one partition the table lacks.
    rows = [(f"d{i % 3}", 200 + i, -1 if i % 5 == 0 else 7, f"m{i}") for i in range(0, 40, 2)]
    rows += [(f"d{i % 3}", 900 + i, 8, "new") for i in range(6)] + [("d9", 5000, 9, "other")]
    source = spark.createDataFrame(rows, SOURCE_SCHEMA).repartition(3)

    def clauses(merge: cl.Merge) -> cl.Merge:
        return (merge.when_matched_delete(condition="source.v < 0")
                .when_matched_update(set={"v": pc.field("source.v") + pc.field("target.v"), "name": "source.name"})
                .when_not_matched_insert(condition="source.v > 7"))

    landed = clauses(streaming.merge(source, table)).execute()
    assert landed is not None
    clauses(local.merge(pa.Table.from_pylist([dict(zip(["dt", "id", "v", "name"], r, strict=True)) for r in rows],
                                             schema=table.schema))).execute()
    assert rows_of(table) == rows_of(local)
    assert rows_of(table)[("d9", 5000)] == (9, "other") and ("d0", 200) not in rows_of(table)
    one_key_one_bucket(table)
    if mode == "fixed-lookup":
        assert sorted_changes(table, start) == sorted_changes(local, start)

    # A clause on rows the source lacks reads the whole table.
    start = table.latest_snapshot().id  # type: ignore[union-attr]
    little = spark.createDataFrame([("d1", 201, 1, "x")], SOURCE_SCHEMA)
    swept = (streaming.merge(little, table).when_matched_update()
             .when_not_matched_by_source_delete(condition="target.dt = 'd2'").execute())
    assert swept is not None
    assert not any(dt == "d2" for dt, _ in rows_of(table)) and rows_of(table)[("d1", 201)] == (1, "x")
    assert any(dt == "d0" for dt, _ in rows_of(table))


def test_spark_overwrite_lands_what_table_overwrite_lands(spark: SparkSession, tmp_path: Path) -> None:
    table = table_of(tmp_path, "fixed-lookup")
    local = twin(table, tmp_path)
    rows = [("d1", i, i, "over") for i in range(30)] + [("d1", 3, 99, "later")]  # two rows of key 3: merged
    data = spark.createDataFrame(rows, SOURCE_SCHEMA)
    arrow = pa.Table.from_pylist([dict(zip(["dt", "id", "v", "name"], r, strict=True)) for r in rows],
                                 schema=table.schema)

    dynamic = streaming.overwrite(data, table)  # dynamic-partition-overwrite: d1 only
    assert dynamic is not None and dynamic.commit_kind is cl.CommitKind.OVERWRITE
    local.overwrite(arrow)
    assert rows_of(table) == rows_of(local)
    assert rows_of(table)[("d1", 3)] == (99, "later") and any(dt == "d0" for dt, _ in rows_of(table))
    top = table.context.options.num_levels - 1
    assert {e.file.level for e in live_entries(table.context, dynamic)
            if table.context.describe_partition(e.partition) == "partition {dt=d1}"} == {top}

    static = streaming.overwrite(data.limit(0), table, partitions={"dt": "d0"})  # no rows: d0 emptied
    local.overwrite(arrow.slice(0, 0), partitions={"dt": "d0"})
    assert static is not None and rows_of(table) == rows_of(local) and not any(dt == "d0" for dt, _ in rows_of(table))

    table.set_options({"dynamic-partition-overwrite": "false"})
    assert streaming.overwrite(data.where("id < 5"), table) is not None  # the whole table
    assert set(rows_of(table)) == {("d1", i) for i in range(5)}

    appends = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.log", pa.schema([("dt", pa.string()), ("n", pa.int64())]), partition_keys=["dt"])
    appends.write(pa.table({"dt": ["a", "b", "b"], "n": [1, 2, 3]}))
    replacing = spark.createDataFrame([("b", 7), ("b", 8), ("c", 9)], "dt string, n long").repartition(2)
    streaming.overwrite(replacing, appends)
    assert sorted(appends.scan().to_arrow().to_pylist(), key=lambda r: r["n"]) == [
        {"dt": "a", "n": 1}, {"dt": "b", "n": 7}, {"dt": "b", "n": 8}, {"dt": "c", "n": 9}]


def test_a_merge_in_foreach_batch_lands_each_batch_once_across_restarts(spark: SparkSession, tmp_path: Path) -> None:
    table = make_table(tmp_path, **{"changelog-producer": "lookup"})
    source = tmp_path / "in"
    checkpoint = str(tmp_path / "checkpoint")

    def batch(b: int) -> list[str]:  # new keys, then updates and deletes (v < 0) of the last batch's
        rows = [{"dt": f"d{i % 3}", "id": b * 100 + i, "v": b, "name": f"n{i}"} for i in range(20)]
        if b:
            rows += [{"dt": f"d{i % 3}", "id": (b - 1) * 100 + i, "v": -1 if i % 4 == 0 else 50 + b, "name": "u"}
                     for i in range(0, 20, 2)]
        return [json.dumps(r) for r in rows]

    def expected(batches: int) -> dict[tuple[str, int], tuple[Any, Any]]:
        state: dict[tuple[str, int], tuple[Any, Any]] = {}
        for b in range(batches):
            for r in map(json.loads, batch(b)):
                key = (r["dt"], r["id"])
                if r["v"] < 0:
                    state.pop(key, None)
                elif key in state or r["v"] >= 0:
                    state[key] = (r["v"], r["name"])
        return state

    def run() -> Any:
        df = spark.readStream.schema(SOURCE_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
        query = (df.writeStream.foreachBatch(MergeBatches(table.location, checkpoint))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        return query

    for b in range(3):
        add_file(source, f"batch-{b}.json", batch(b), b)
    first = run()
    assert rows_of(table) == expected(3)
    users = {s.commit_user for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND}
    assert users == {first.id}
    # Spark replays a batch whose commit landed but was not logged: the merge skips it.
    again = MergeBatches(table.location, checkpoint)
    latest = table.latest_snapshot()
    streaming_batch = spark.read.schema(SOURCE_SCHEMA).json(str(source / "batch-2.json"))
    spark.sparkContext.setLocalProperty("sql.streaming.queryId", first.id)
    try:
        again(streaming_batch, 2)
    finally:
        spark.sparkContext.setLocalProperty("sql.streaming.queryId", None)  # type: ignore[arg-type]
    assert table.latest_snapshot() == latest
    add_file(source, "batch-3.json", batch(3), 3)
    second = run()
    assert second.id == first.id and rows_of(table) == expected(4)
    identifiers = [s.commit_identifier for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    assert identifiers == [0, 1, 2, 3]


@pytest.mark.parametrize("mode", ["dynamic", "postpone", "cross-partition"])
def test_spark_overwrites_place_keys_anew_in_every_bucket_mode(spark: SparkSession, tmp_path: Path, mode: str) -> None:
    if mode == "postpone":
        table = make_table(tmp_path, bucket="-2")
        for b in range(3):
            table.write(pa.Table.from_pylist(events(b)))
    else:
        table = table_of(tmp_path, mode)
    if mode == "cross-partition":  # replaced whole on Spark
        table.set_options({"dynamic-partition-overwrite": "false"})
    local = twin(table, tmp_path)
    rows = [(f"d{i % 2}", i, i, "over") for i in range(40)] + [("d0", 2, 99, "later")]
    moved = range(1, 17, 2)
    if mode == "cross-partition":  # keys of d1 in d0 too: one partition keeps each (a key's rows meet in a task)
        rows += [(dt, i, i, "over") for i in moved for dt in ("d0", "d3", "d4")]
    # Adaptive execution would join the small shuffle's partitions into one task.
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        landed = streaming.overwrite(spark.createDataFrame(rows, SOURCE_SCHEMA).repartition(3), table)
    finally:
        spark.conf.unset("spark.sql.adaptive.enabled")
    assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
    local.overwrite(pa.Table.from_pylist([dict(zip(["dt", "id", "v", "name"], r, strict=True)) for r in rows],
                                         schema=table.schema))
    # A task sees a moved key's two rows in no set order: either partition may keep it, once.
    def unmoved(of: cl.Table) -> dict[Any, Any]:
        return {k: v for k, v in rows_of(of).items() if mode != "cross-partition" or k[1] not in moved}

    assert unmoved(table) == unmoved(local)
    assert mode != "cross-partition" or sorted(k[1] for k in rows_of(table) if k[1] in moved) == list(moved)
    assert rows_of(table)[("d0", 2)] == (99, "later") and (mode == "cross-partition") != any(
        dt == "d2" for dt, _ in rows_of(table))
    one_key_one_bucket(table)
    # later writes find the keys where the overwrite put them
    table.write(pa.Table.from_pylist([{"dt": "d0", "id": 2, "v": 7, "name": "after"},
                                      {"dt": "d1", "id": 3, "v": 7, "name": "after"}], schema=table.schema))
    one_key_one_bucket(table)
    assert rows_of(table)[("d0", 2)] == (7, "after") and rows_of(table)[("d1", 3)] == (7, "after")


def test_columns_named_as_spark_would_misread_are_written_and_merged(spark: SparkSession, tmp_path: Path) -> None:
    """A space in a partition column's name, a key named ``count`` (what Spark's count()
    names its column). Spark's mapInArrow itself refuses names with a dot or a backtick."""
    schema = pa.schema([pa.field("d t", pa.string(), nullable=False), pa.field("count", pa.int64(), nullable=False),
                        pa.field("v", pa.int64())])
    table = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.odd", schema, primary_keys=["d t", "count"], partition_keys=["d t"], options={"bucket": "2"})
    spark_schema = "`d t` string, count long, v long"
    rows = spark.createDataFrame([("a", i, i) for i in range(6)], spark_schema).repartition(2)
    assert streaming.write(rows, table) is not None
    source = spark.createDataFrame([("a", 1, 10), ("b", 7, 70)], spark_schema)
    assert streaming.merge(source, table).when_matched_update().when_not_matched_insert().execute() is not None
    got = {(r["d t"], r["count"]): r["v"] for r in table.scan().to_arrow().to_pylist()}
    assert got == {**{("a", i): i for i in range(6)}, ("a", 1): 10, ("b", 7): 70}
    with pytest.raises(DataError, match="1 keys in more than one row"):
        twice = spark.createDataFrame([("a", 1, 1), ("a", 1, 2)], spark_schema)
        streaming.merge(twice, table).when_matched_delete().execute()

APPEND_KINDS = {
    "unaware": {},
    "unaware, deletion vectors": {"deletion-vectors.enabled": "true"},
    "fixed": {"bucket": "2", "bucket-key": "id"},
    "fixed, deletion vectors": {"bucket": "2", "bucket-key": "id", "deletion-vectors.enabled": "true"},
}
APPEND_SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int64()), ("v", pa.int32()), ("name", pa.string())])


def append_table(tmp_path: Path, kind: str) -> cl.Table:
    """A partitioned append table of ``kind`` with three commits of rows (several files a bucket)."""
    # write-only: a fixed-bucket writer's own compactions would join the files the operations touch
    table = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.log", APPEND_SCHEMA, partition_keys=["dt"], options={**APPEND_KINDS[kind], "write-only": "true"})
    for b in range(3):
        table.write(pa.table({"dt": [f"d{i % 3}" for i in range(30)], "id": [b * 100 + i for i in range(30)],
                              "v": [i % 7 for i in range(30)], "name": [f"n{b}-{i}" for i in range(30)]},
                             schema=APPEND_SCHEMA))
    return table


def append_rows(table: cl.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())


def footprint(table: cl.Table, before: set[str]) -> tuple[set[str], dict[str, list[int]], int]:
    """Which of the files ``before`` are still live, the positions each one's deletion vector
    marks, and how many rows the vectors of newer files mark (an unaware table's tasks write
    new rows to files of their own): what operations did to files."""
    ctx = table.context
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    live = {e.file.file_name for e in live_entries(ctx, snapshot)} & before
    marked = {name: sorted(vector) for files in deletion_vectors.snapshot_vectors(ctx, snapshot).values()
              for name, vector in deletion_vectors.bucket_vectors(ctx, files).items()}
    return live, {n: p for n, p in marked.items() if n in before}, sum(len(p) for n, p in marked.items()
                                                                        if n not in before)


# Each bucket mode once and deletion vectors on and off once here (the one-process tests cover
# every combination; the foreachBatch and race tests below the other two).
@pytest.mark.parametrize("kind", ["unaware, deletion vectors", "fixed"])
def test_spark_operations_on_append_tables_land_what_the_table_operations_land(spark: SparkSession, tmp_path: Path,
                                                                               kind: str) -> None:
    table = append_table(tmp_path, kind)
    local = twin(table, tmp_path)
    before = {e.file.file_name for e in live_entries(table.context, table.latest_snapshot())}  # type: ignore[arg-type]
    with_vectors = "deletion vectors" in kind

    def same(landed: cl.Snapshot | None, start: int) -> None:
        assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE and landed.id == start + 1
        assert (landed.index_manifest is not None) == with_vectors
        assert append_rows(table) == append_rows(local)
        assert footprint(table, before) == footprint(local, before)

    start = table.latest_snapshot().id  # type: ignore[union-attr]
    local.delete("v = 1 and id > 50")
    same(streaming.delete(spark, table, "v = 1 and id > 50"), start)
    assert not any(v == 1 and i > 50 for _, i, v, _ in append_rows(table))

    # Rows of v = 3 get a new id (in a fixed-bucket table, of another bucket); rows of v = 2 stay.
    assignments = {"name": "updated", "id": pc.if_else(pc.field("v") == 3, pc.field("id") + 1001, pc.field("id"))}
    local.update("v in (2, 3)", set=assignments)
    same(streaming.update(spark, table, "v in (2, 3)", set=assignments), start + 1)
    assert {name for _, i, v, name in append_rows(table) if v == 3 and i > 1000} == {"updated"}

    # Every clause: matched rows deleted, updated (one moved to another partition by the source's
    # row), new keys inserted, unmatched table rows deleted.
    source = spark.createDataFrame(
        [("d0", 0, -1, "s"), ("d1", 1, 5, "s"), ("d2", 104, 6, "s"), ("d1", 1004, 9, "s"), ("d0", 3000, 8, "new"),
         ("d1", 3001, 1, "new"), ("d0", 205, 4, "move")], SOURCE_SCHEMA).repartition(2)

    def clauses(merge: cl.Merge) -> cl.Merge:
        return (merge.when_matched_delete(condition="source.v < 0")
                .when_matched_update(condition="source.name = 'move'")
                .when_matched_update(set={"v": pc.field("source.v") + pc.field("target.v"),
                                          "name": pc.field("source.name")})
                .when_not_matched_insert(condition="source.v > 7")
                .when_not_matched_by_source_delete(condition="target.v = 6 and target.dt = 'd2'"))

    clauses(local.merge(source.toArrow(), on=["id"])).execute()
    same(clauses(streaming.merge(source, table, on=["id"])).execute(), start + 2)
    ids = {i: (dt, v, name) for dt, i, v, name in append_rows(table)}
    assert 0 not in ids and ids[1] == ("d1", 6, "s") and ids[3000] == ("d0", 8, "new") and 3001 not in ids
    assert ids[205] == ("d0", 4, "move")
    assert not any(dt == "d2" and v == 6 for dt, v, _ in ids.values())
    if with_vectors:  # no data file rewritten: rows marked in vectors
        assert footprint(table, before)[0] == before
    else:
        assert footprint(table, before)[0] < before and footprint(table, before)[1:] == ({}, 0)


def test_append_table_operations_in_foreach_batch_land_each_batch_once(spark: SparkSession, tmp_path: Path) -> None:
    table = append_table(tmp_path, "fixed, deletion vectors")
    local = twin(table, tmp_path)
    source = spark.createDataFrame([("d0", 0, 50, "a"), ("d1", 9999, 51, "b")], SOURCE_SCHEMA)
    landed = (streaming.merge(source, table, on=["id"], batch_id=4, commit_user="job")
              .when_matched_update().when_not_matched_insert().execute())
    assert landed is not None and (landed.commit_user, landed.commit_identifier) == ("job", 4)
    local.merge(source.toArrow(), on=["id"]).when_matched_update().when_not_matched_insert().execute()
    assert append_rows(table) == append_rows(local)
    rows = append_rows(table)
    files = sorted(p.name for p in Path(table.location).rglob("*") if p.is_file())
    # Spark replays batch 4 after a crash: whatever the operation, it lands nothing and writes nothing.
    assert (streaming.merge(source, table, on=["id"], batch_id=4, commit_user="job")
            .when_matched_delete().execute()) is None
    assert streaming.delete(spark, table, "v = 50", batch_id=4, commit_user="job") is None
    assert streaming.update(spark, table, "v = 51", set={"v": 0}, batch_id=4, commit_user="job") is None
    assert table.latest_snapshot() == landed and append_rows(table) == rows
    assert sorted(p.name for p in Path(table.location).rglob("*") if p.is_file()) == files
    # A source with two rows of one key is refused before anything is written.
    twice = spark.createDataFrame([("d0", 1, 5, "a"), ("d1", 1, 6, "b"), ("d1", 2, 6, "b")], SOURCE_SCHEMA)
    with pytest.raises(DataError, match="1 keys in more than one row"):
        streaming.merge(twice, table, on=["id"], batch_id=5, commit_user="job").when_matched_delete().execute()
    with pytest.raises(OptionError, match="columns to match rows by"):
        streaming.merge(source, table)
    assert table.latest_snapshot() == landed
    deleted = streaming.delete(spark, table, "v = 50", batch_id=5, commit_user="job")
    assert deleted is not None and (deleted.commit_user, deleted.commit_identifier) == ("job", 5)
    local.delete("v = 50")
    assert all(v != 50 for _, _, v, _ in append_rows(table))
    # Keys of the last commit only (the files of the others are not read); an empty source changes nothing.
    recent = spark.createDataFrame([("d2", 202, 0, "c"), ("d1", 207, 0, "c"), ("d0", 5000, 0, "c")], SOURCE_SCHEMA)
    assert streaming.merge(recent.limit(0), table, on=["id"]).when_matched_delete().execute() is None
    streaming.merge(recent, table, on=["id"]).when_matched_delete().when_not_matched_insert().execute()
    local.merge(recent.toArrow(), on=["id"]).when_matched_delete().when_not_matched_insert().execute()
    assert append_rows(table) == append_rows(local)
    assert {202, 207} & {i for _, i, _, _ in append_rows(table)} == set()


def test_a_spark_merge_into_an_append_table_racing_a_compaction_is_void_and_leaves_no_file(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = append_table(tmp_path, "unaware")
    rows = append_rows(table)
    on_disk = {p for p in Path(table.location).rglob("*") if p.is_file()}
    real = overwrite_commit.commit_rewrite

    def raced(*args: Any, **kwargs: Any) -> Any:
        assert table.compact(full=True) is not None  # joins the files the merge's tasks rewrote
        return real(*args, **kwargs)

    monkeypatch.setattr(overwrite_commit, "commit_rewrite", raced)
    # the tasks rewrite files and write the inserted rows; the commit finds the files compacted
    source = spark.createDataFrame([("d0", 0, 50, "a"), ("d1", 9999, 51, "b")], SOURCE_SCHEMA)
    with pytest.raises(CommitConflictError, match="run the operation again"):
        streaming.merge(source, table, on=["id"]).when_matched_update().when_not_matched_insert().execute()
    latest = table.latest_snapshot()
    assert latest is not None and latest.commit_kind is cl.CommitKind.COMPACT and append_rows(table) == rows
    # what is new on disk is the compaction's
    named = {e.file.file_name for e in live_entries(table.context, latest)}
    new_data = {p.name for p in {p for p in Path(table.location).rglob("*.parquet")} - on_disk}
    assert new_data and new_data <= named
