"""The ``changelake`` Spark data source on a branch: Paimon's ``branch`` option (or a path
``<table>$branch_<name>``) reads the branch, batch and streaming, and Spark's own writer writes
into it; the sink writes a branch Table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

import changelake as cl
from changelake import streaming
from changelake.errors import BranchNotFoundError
from changelake.streaming import register
from changelake.streaming.source import ChangelakeDataSource

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _table(tmp_path: Path) -> cl.Table:
    table = cl.Catalog(str(tmp_path / "wh")).create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "2"})
    table.write(pa.table({"k": [1, 2], "v": ["a", "a"]}, schema=SCHEMA))
    table.create_tag("t1")
    table.write(pa.table({"k": [2, 3], "v": ["main", "main"]}, schema=SCHEMA))
    branch = table.create_branch("dev", from_tag="t1")
    branch.write(pa.table({"k": [1, 4], "v": ["dev", "dev"]}, schema=SCHEMA))
    return table


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in rows)


def test_the_branch_option_picks_the_branch_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for options in ({"branch": "dev"}, {"BRANCH": "dev"}, {"path": f"{table.location}$branch_dev"}):
        request = ChangelakeDataSource(CaseInsensitiveDict({"path": table.location, **options})).request
        assert request.table.name == "db.t$branch_dev" and request.overrides == {}
    assert ChangelakeDataSource(CaseInsensitiveDict({"path": table.location, "branch": "main"})).request.table.name \
        == "db.t"
    with pytest.raises(BranchNotFoundError, match=r"db\.t: has no branch 'nope'"):
        _ = ChangelakeDataSource(CaseInsensitiveDict({"path": table.location, "branch": "nope"})).request


def test_spark_reads_and_writes_a_branch(spark: Any, tmp_path: Path) -> None:
    register(spark)
    table = _table(tmp_path)
    dev = table.branch("dev")

    def read(**options: str) -> list[tuple[Any, ...]]:
        return _rows(spark.read.format("changelake").options(**options).load(table.location).collect())

    assert read(branch="dev") == [(1, "dev"), (2, "a"), (4, "dev")]
    assert read(branch="dev", **{"scan.tag-name": "t1"}) == [(1, "a"), (2, "a")]
    assert _rows(spark.read.format("changelake").load(f"{table.location}$branch_dev").collect()) == read(branch="dev")
    assert read() == [(1, "a"), (2, "main"), (3, "main")]

    # The sink writes into a branch Table (Spark's own writers take bucket-unaware tables only).
    streaming.write(spark.createDataFrame([(5, "spark")], "k long, v string"), cl.Catalog(str(tmp_path / "wh"))
                    .get_table("db.t$branch_dev"))
    assert read(branch="dev") == [(1, "dev"), (2, "a"), (4, "dev"), (5, "spark")]
    assert read() == [(1, "a"), (2, "main"), (3, "main")]

    # Spark's own writer (a bucket-unaware append table) with the option writes into the branch.
    log = cl.Catalog(str(tmp_path / "wh")).create_table("db.log", SCHEMA)
    log.create_branch("dev")
    spark.createDataFrame([(1, "x")], "k long, v string").write.format("changelake").mode("append") \
        .option("branch", "dev").save(log.location)
    assert log.latest_snapshot() is None and log.branch("dev").scan().to_arrow().to_pylist() == [{"k": 1, "v": "x"}]

    # A stream of the branch's changes from its snapshot 2 on, with a consumer kept in the branch.
    batches: list[list[tuple[Any, ...]]] = []
    query = (spark.readStream.format("changelake")
             .options(**{"branch": "dev", "scan.mode": "from-snapshot", "scan.snapshot-id": "2",
                         "read.changelog": "true", "consumer-id": "spark"})
             .load(table.location)
             .writeStream.foreachBatch(lambda df, _: batches.append([tuple(r) for r in df.collect()]))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert sorted(r for b in batches for r in b) == [("+I", 1, "dev"), ("+I", 4, "dev"), ("+I", 5, "spark")]
    assert (Path(table.location) / "branch" / "branch-dev" / "consumer" / "consumer-spark").exists()
    assert not (Path(table.location) / "consumer").exists()
    assert [s.id for s in dev.snapshots()] == [1, 2, 3]
