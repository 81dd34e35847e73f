"""Paimon's procedures on Spark's executors: compaction (``streaming.compact``, one task a
bucket) and rescale (``streaming.rescale``, one task a partition) commit the snapshot
``table.compact()`` and ``table.rescale()`` commit on a copy of the table; orphan cleanup and
expiry (``streaming.remove_orphan_files``, ``streaming.expire_snapshots``) leave the files they
leave."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from test_sink import events, make_table, model, rows_of

import changelake as cl
from changelake import streaming
from changelake.changelog import producers
from changelake.errors import OptionError, StreamingError
from changelake.table.read.live_files import live_entries
from changelake.table.write.writer import TableWrite


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


def files_under(table: cl.Table) -> set[str]:
    """Every file of the table, relative to its root."""
    root = table.location
    return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}


def test_spark_rescale_is_table_rescale_on_the_executors(spark: SparkSession, tmp_path: Path) -> None:
    table = written(tmp_path, "t", **{"deletion-vectors.enabled": "true"})
    local = copy_of(table, tmp_path)
    before = table.latest_snapshot()
    assert before is not None

    landed = streaming.rescale(spark, table, bucket=3)
    assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
    assert table.context.options.bucket == 3  # the Table given moved to the new schema
    local.rescale(bucket=3)
    assert layout(table) == layout(local)
    assert {bucket for _, bucket, _ in layout(table)} == {0, 1, 2}
    assert rows_of(table) == rows_of(local) == model(5)
    assert table.changes(before.id, landed.id).to_arrow().num_rows == 0  # a rescale changes no row
    # Writes go on in the new layout (a write-only table's deletion-vector reads see them once compacted).
    table.write(pa.table({k: [e[k] for e in events(5)] for k in ("rowkind", "dt", "id", "v", "name")}))
    assert streaming.compact(spark, table) is not None
    assert rows_of(table) == model(6)

    # One partition, back to two buckets: the others keep three until rescaled too.
    assert streaming.rescale(spark, str(table.location), bucket=2, partitions=[{"dt": "d1"}]) is not None
    table.refresh()
    assert {(where, b) for where, b, _ in layout(table) if where == "partition {dt=d1}"} == \
        {("partition {dt=d1}", 0), ("partition {dt=d1}", 1)}
    assert {b for where, b, _ in layout(table) if where == "partition {dt=d0}"} == {0, 1, 2}
    assert rows_of(table) == model(6)

    log = cl.Catalog(str(tmp_path / "warehouse")).create_table(
        "db.log", pa.schema([pa.field("id", pa.int64()), pa.field("msg", pa.string())]),
        options={"bucket": "2", "bucket-key": "id"})
    for i in range(4):
        log.write(pa.table({"id": [i, i + 10], "msg": [f"m{i}", f"n{i}"]}))
    assert streaming.rescale(spark, log, bucket=4) is not None
    assert {b for _, b, _ in layout(log)} <= {0, 1, 2, 3} and len({b for _, b, _ in layout(log)}) > 2
    assert sorted(r["id"] for r in log.scan().to_arrow().to_pylist()) == sorted([*range(4), *range(10, 14)])

    with pytest.raises(OptionError, match="fixed buckets"):
        streaming.rescale(spark, make_table(tmp_path / "dyn", bucket="-1"))


def test_spark_orphan_cleanup_and_expiry_leave_what_the_table_methods_leave(spark: SparkSession,
                                                                            tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", **{"snapshot.num-retained.min": "1"})
    for b in range(6):
        table.write(pa.table({k: [e[k] for e in events(b)] for k in ("rowkind", "dt", "id", "v", "name")}))
    table.create_tag("t2", 2)
    # A writer that wrote data files and died before committing, a stray manifest, a temp hint.
    writer = TableWrite(table.context, "crashed", changelog=producers.for_table(table.context))
    writer.write(pa.table({k: [e[k] for e in events(9)] for k in ("rowkind", "dt", "id", "v", "name")}))
    assert writer.prepare()
    Path(table.location, "manifest", "manifest-dead-0").write_bytes(b"x")
    Path(table.location, "snapshot", f"LATEST.{'a' * 32}.tmp").write_text("9")
    assert streaming.remove_orphan_files(spark, table, dry_run=True) == []  # newer than the threshold
    old = (dt.datetime.now() - dt.timedelta(days=2)).timestamp()
    for name in files_under(table):
        os.utime(os.path.join(table.location, name), (old, old))
    local = copy_of(table, tmp_path)

    listed = streaming.remove_orphan_files(spark, table, older_than=dt.timedelta(days=1), dry_run=True)
    expected = local.remove_orphan_files(older_than=dt.timedelta(days=1), dry_run=True)
    assert [os.path.relpath(p, table.location) for p in listed] == \
        [os.path.relpath(p, local.location) for p in expected]
    assert len(listed) >= 4 and any("bucket-" in p for p in listed)
    assert streaming.remove_orphan_files(spark, table, older_than=dt.timedelta(days=1)) == listed
    local.remove_orphan_files(older_than=dt.timedelta(days=1))
    assert files_under(table) == files_under(local)
    assert rows_of(table) == model(6)

    ids = [s.id for s in table.snapshots()]
    result = streaming.expire_snapshots(spark, table, retain_max=2)
    assert result == local.expire_snapshots(retain_max=2)
    assert result.snapshots == tuple(ids[:-2]) and result.data_files > 0
    assert files_under(table) == files_under(local)
    assert rows_of(table) == model(6)
    tagged = table.scan(tag="t2").to_arrow().to_pylist()  # the tag keeps its expired snapshot's files
    assert {(r["dt"], r["id"]): (r["v"], r["name"]) for r in tagged} == model(2)
    assert [s.id for s in table.snapshots()] == ids[-2:]
