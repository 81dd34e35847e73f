"""Compaction on Spark's executors (``streaming.compact``): one task a bucket, one COMPACT
snapshot, the same result as ``table.compact()`` on a copy of the table."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from test_sink import events, make_table, model, rows_of

import changelake as cl
from changelake import streaming
from changelake.errors import StreamingError
from changelake.table.read.live_files import live_entries


def layout(table: cl.Table) -> Counter[tuple[str, int, int]]:
    """How many files each (partition, bucket, level) holds at the latest snapshot."""
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    return Counter((table.context.describe_partition(e.partition), e.bucket, e.file.level)
                   for e in live_entries(table.context, snapshot))


def written(tmp_path: Path, name: str, **options: str) -> cl.Table:
    """A write-only lookup table after five commits: level 0 piles up, no changelog yet."""
    table = make_table(tmp_path / name, **{"changelog-producer": "lookup", "write-only": "true", **options})
    for b in range(5):
        table.write(pa.table({k: [e[k] for e in events(b)] for k in ("rowkind", "dt", "id", "v", "name")}))
    return table


def copy_of(table: cl.Table, tmp_path: Path) -> cl.Table:
    shutil.copytree(table.location, tmp_path / "copy")
    return cl.open_table(str(tmp_path / "copy"))


@pytest.mark.parametrize("full", [False, True])
def test_spark_compaction_is_table_compact_on_the_executors(spark: SparkSession, tmp_path: Path, full: bool) -> None:
    table = written(tmp_path, "t")
    local = copy_of(table, tmp_path)
    before = table.latest_snapshot()
    assert before is not None and any(level == 0 for _, _, level in layout(table))

    landed = streaming.compact(spark, table, full=full)
    assert landed is not None and landed.commit_kind is cl.CommitKind.COMPACT and landed.id == before.id + 1
    local.compact(full=full)
    assert layout(table) == layout(local)  # bucket by bucket, level by level
    assert not any(level == 0 for _, _, level in layout(table))
    if full:
        assert {level for _, _, level in layout(table)} == {table.context.options.num_levels - 1}
    assert rows_of(table) == rows_of(local) == model(5)
    # the lookup producer's changelog of the keys compaction brought up, as table.compact() writes it
    changes = table.changes(before.id, landed.id).to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")])
    local_changes = local.changes(before.id, landed.id).to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")])
    assert changes.num_rows > 0 and changes.to_pylist() == local_changes.to_pylist()
    if full:
        assert streaming.compact(spark, table, full=True) is None  # nothing left to merge


def test_spark_compaction_of_some_partitions_append_tables_and_refusals(spark: SparkSession,
                                                                        tmp_path: Path) -> None:
    table = written(tmp_path, "t")
    untouched = {k: n for k, n in layout(table).items() if k[0] != "partition {dt=d1}"}
    assert streaming.compact(spark, table, partitions=[{"dt": "d1"}]) is not None
    assert {k: n for k, n in layout(table).items() if k[0] != "partition {dt=d1}"} == untouched
    assert not any(level == 0 for where, _, level in layout(table) if where == "partition {dt=d1}")
    assert rows_of(table) == model(5)

    log = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.log", pa.schema([pa.field("id", pa.int64()), pa.field("msg", pa.string())]))
    for i in range(6):
        log.write(pa.table({"id": [i], "msg": [f"m{i}"]}))
    assert streaming.compact(spark, log, full=True) is not None
    assert len(layout(log)) == 1 and sum(layout(log).values()) == 1  # six small files joined into one
    assert sorted(r["id"] for r in log.scan().to_arrow().to_pylist()) == list(range(6))

    empty = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.empty", pa.schema([pa.field("id", pa.int64(), nullable=False)]), primary_keys=["id"])
    assert streaming.compact(spark, empty) is None
    postponed = make_table(tmp_path / "p", bucket="-2")
    with pytest.raises(StreamingError, match=r"table\.compact\(\)"):
        streaming.compact(spark, postponed)
