"""changelake over Spark Connect (pyspark's own Connect server on loopback): the exactly-once
sink across a crash and restarts, a CDC pipeline into a table whose changelog streams into
another, batch writes and reads, Paimon's procedures on the executors, and what Connect cannot
give the sink, refused clearly."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from test_sink import SPARK_SCHEMA, events, make_table, model, rows_of

import changelake as cl
from changelake import streaming
from changelake.errors import StreamingError
from changelake.streaming import cdc
from spark_support import CrashAfterCommit, MergeBatches


def add_file(folder: Path, name: str, lines: list[str], order: int) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (1_000_000 + order, 1_000_000 + order))  # the file source reads in modification order


def crash_setup(tmp_path: Path) -> tuple[cl.Table, Path, str, Path]:
    """A lookup-changelog table, its input folder and checkpoint, and the marker of a crash to come."""
    marker = tmp_path / "crash-once"
    marker.touch()
    table = make_table(tmp_path, **{"changelog-producer": "lookup"})
    return table, tmp_path / "in", str(tmp_path / "checkpoint"), marker


def run_crashing(connect: SparkSession, source: Path, schema: str, function: Any, checkpoint: str) -> Any:
    """A query that writes the files of ``source`` with ``function`` (which kills its process
    once) until every file is written or the crash fails it; the query."""
    df = connect.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
    query = (df.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination()  # the crash fails the query
    return query


def test_a_connect_query_lands_each_batch_once_across_a_crash_and_restarts(connect: SparkSession,
                                                                           tmp_path: Path) -> None:
    table, source, checkpoint, marker = crash_setup(tmp_path)

    def run() -> Any:
        # The sink as write_stream makes it, in a function that kills its process once, right
        # after batch 1 committed: Spark never logs that batch and replays it on restart.
        sink = streaming.ForeachBatchSink(table, checkpoint_location=checkpoint)
        return run_crashing(connect, source, SPARK_SCHEMA, CrashAfterCommit(sink, 1, str(marker)), checkpoint)

    for b in range(3):
        add_file(source, f"batch-{b}.json", [json.dumps(e) for e in events(b)], b)
    crashed = run()
    assert not marker.exists() and crashed.exception() is not None  # the crash happened, and failed the query
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    assert [s.commit_identifier for s in appends] == [0, 1]
    # the query id, read from the checkpoint where Spark keeps it, is the commit user
    assert {s.commit_user for s in appends} == {crashed.id}

    restarted = run()  # replays batch 1 (nothing lands), then batch 2
    assert restarted.id == crashed.id and restarted.exception() is None
    add_file(source, "batch-3.json", [json.dumps(e) for e in events(3)], 3)
    again = streaming.write_stream(
        connect.readStream.schema(SPARK_SCHEMA).option("maxFilesPerTrigger", 1).json(str(source)),
        table, checkpoint_location=checkpoint, trigger={"availableNow": True})
    again.awaitTermination()
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    assert [s.commit_identifier for s in appends] == [0, 1, 2, 3]
    assert {s.commit_user for s in appends} == {crashed.id}
    assert rows_of(table) == model(4)
    carrying = [s.commit_identifier for s in table.snapshots() if s.changelog_manifest_list is not None]
    assert carrying == [0, 1, 2, 3]  # lookup changelog made in the Connect server's workers


def debezium(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts: int) -> str:
    return json.dumps({"op": op, "before": before, "after": after, "ts_ms": ts})


def test_a_cdc_pipeline_and_its_changelog_stream_run_over_connect(connect: SparkSession, tmp_path: Path) -> None:
    """Debezium events -> decode -> the sink -> a lookup table; its changelog (+I/-U/+U/-D)
    streamed by the changelake source -> the sink -> a copy, which ends equal to the table."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("status", pa.string())])
    catalog = cl.Catalog(str(tmp_path / "warehouse"))
    orders = catalog.create_table("shop.orders", schema, primary_keys=["id"],
                                  options={"bucket": "2", "changelog-producer": "lookup"})
    copy = catalog.create_table("shop.copy", schema, primary_keys=["id"], options={"bucket": "1"})
    files = [
        [debezium("c", None, {"id": i, "status": "new"}, i) for i in range(1, 7)],
        [debezium("u", {"id": 1, "status": "new"}, {"id": 1, "status": "paid"}, 10),
         debezium("d", {"id": 2, "status": "new"}, None, 11)],
        [debezium("u", {"id": 1, "status": "paid"}, {"id": 1, "status": "shipped"}, 20),
         debezium("c", None, {"id": 7, "status": "new"}, 21)],
    ]
    for i, lines in enumerate(files):
        add_file(tmp_path / "events", f"events-{i}.json", lines, i)
    events_df = connect.readStream.option("maxFilesPerTrigger", 1).text(str(tmp_path / "events"))
    ingest = streaming.write_stream(cdc.decode(events_df, "debezium-json", orders.schema, event_time_column=None),
                                    orders, checkpoint_location=str(tmp_path / "ck-ingest"),
                                    trigger={"availableNow": True})
    ingest.awaitTermination()
    expected = {1: "shipped", 3: "new", 4: "new", 5: "new", 6: "new", 7: "new"}
    assert {r["id"]: r["status"] for r in orders.scan().to_arrow().to_pylist()} == expected

    streaming.register(connect)
    changes = (connect.readStream.format("changelake")
               .options(**{"scan.mode": "from-snapshot", "scan.snapshot-id": "1", "read.changelog": "true"})
               .load(orders.location))
    out = streaming.write_stream(changes, copy, checkpoint_location=str(tmp_path / "ck-copy"),
                                 trigger={"availableNow": True})
    out.awaitTermination()
    assert {r["id"]: r["status"] for r in copy.scan().to_arrow().to_pylist()} == expected
    kinds = {r["rowkind"] for r in orders.changes(0, orders.latest_snapshot().id).to_arrow().to_pylist()}
    assert kinds == {"+I", "-U", "+U", "-D"}


def test_batch_writes_and_reads_over_connect_and_what_connect_cannot_do(connect: SparkSession,
                                                                        tmp_path: Path) -> None:
    table = make_table(tmp_path, bucket="-1")
    rows = connect.createDataFrame(events(0), SPARK_SCHEMA).repartition(3)  # several tasks: a shuffle
    first = streaming.write(rows, table)
    assert first is not None and rows_of(table) == model(1)
    streaming.write(connect.createDataFrame(events(1), SPARK_SCHEMA), table)
    assert rows_of(table) == model(2)

    streaming.register(connect)
    latest = connect.read.format("changelake").load(table.location)
    assert {(r["dt"], r["id"]): (r["v"], r["name"]) for r in latest.collect()} == model(2)
    then = connect.read.format("changelake").option("scan.snapshot-id", str(first.id)).load(table.location)
    assert then.count() == len(model(1))
    compacted = streaming.compact(connect, table, full=True)  # Paimon's compact procedure, on the server's executors
    assert compacted is not None and compacted.commit_kind is cl.CommitKind.COMPACT and rows_of(table) == model(2)
    # ... and rescale, orphan cleanup and expiry, on a fixed-bucket table.
    fixed = make_table(tmp_path / "fixed")
    for b in range(2):
        streaming.write(connect.createDataFrame(events(b), SPARK_SCHEMA), fixed)
    rescaled = streaming.rescale(connect, fixed, bucket=3)
    assert rescaled is not None and rescaled.commit_kind is cl.CommitKind.OVERWRITE and rows_of(fixed) == model(2)
    stray = Path(fixed.location, "dt=d0", "bucket-0", "data-stray-0.parquet")
    stray.write_bytes(b"left by a crashed writer")
    os.utime(stray, (1_000_000, 1_000_000))
    assert streaming.remove_orphan_files(connect, fixed, dry_run=True) == [str(stray)]
    assert streaming.remove_orphan_files(connect, fixed) == [str(stray)] and not stray.exists()
    expired = streaming.expire_snapshots(connect, fixed, retain_min=1, retain_max=1)
    assert expired.snapshots and expired.data_files > 0 and rows_of(fixed) == model(2)

    # Connect has no sparkContext: without a checkpoint to read the query id from (nor a commit
    # user), the sink says what to pass, and commits nothing.
    before = table.latest_snapshot()
    with pytest.raises(StreamingError, match="checkpoint_location"):
        streaming.ForeachBatchSink(table)(connect.createDataFrame(events(2), SPARK_SCHEMA), 5)
    with pytest.raises(StreamingError, match="no metadata file"):
        streaming.ForeachBatchSink(table, checkpoint_location=str(tmp_path / "nowhere"))(
            connect.createDataFrame(events(2), SPARK_SCHEMA), 5)
    assert table.latest_snapshot() == before


def test_table_operations_over_connect_and_a_merge_per_batch_across_a_crash(connect: SparkSession,
                                                                           tmp_path: Path) -> None:
    table, source, checkpoint, marker = crash_setup(tmp_path)
    schema = "dt string, id long, v int, name string"

    def upserts(b: int) -> list[str]:  # new keys, and batch 0's keys updated (v > 0) or deleted (v < 0)
        return [json.dumps({"dt": f"d{i % 3}", "id": i, "v": (b * 10 + i) * (-1 if b and i % 3 == 0 else 1),
                            "name": f"b{b}"}) for i in range(b * 5, b * 5 + 10)]

    def run() -> Any:
        merge = MergeBatches(table.location, checkpoint, crash_after=1, marker=str(marker))
        return run_crashing(connect, source, schema, merge, checkpoint)

    expected: dict[tuple[str, int], tuple[Any, Any]] = {}
    for b in range(3):
        add_file(source, f"batch-{b}.json", upserts(b), b)
        for row in map(json.loads, upserts(b)):
            if row["v"] < 0:
                expected.pop((row["dt"], row["id"]), None)
            else:
                expected[(row["dt"], row["id"])] = (row["v"], row["name"])
    crashed = run()
    assert not marker.exists() and crashed.exception() is not None
    restarted = run()  # replays batch 1 (its merge landed: nothing lands again), then batch 2
    assert restarted.id == crashed.id and restarted.exception() is None
    appends = [s for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    assert [s.commit_identifier for s in appends] == [0, 1, 2] and {s.commit_user for s in appends} == {crashed.id}
    assert rows_of(table) == expected

    # delete and overwrite, on the Connect server's executors (update runs as delete does)
    assert streaming.delete(connect, table, "name = 'b2' and v > 25") is not None
    expected = {k: v for k, v in expected.items() if not (v[1] == "b2" and v[0] > 25)}
    assert rows_of(table) == expected
    over = streaming.overwrite(connect.createDataFrame([("d1", 77, 1, "o")], schema), table)
    assert over is not None and over.commit_kind is cl.CommitKind.OVERWRITE
    expected = {k: v for k, v in expected.items() if k[0] != "d1"} | {("d1", 77): (1, "o")}
    assert rows_of(table) == expected
