"""changelake's main demo: a CDC stream written exactly once into a Paimon table on Spark, and
the table's changelog streamed back out.

1. Debezium JSON change events arrive as files in a directory (as a Kafka-to-files connector
   would leave them).
2. An ingest query (``spark.readStream.text`` → ``changelake.streaming.cdc.decode`` →
   ``changelake.streaming.write_stream``) writes them into a ``changelog-producer=lookup``
   table, one commit per micro-batch, on Spark's executors.
3. The ingest query is killed with SIGKILL right after its commit of a batch lands and before
   Spark records that batch in its checkpoint: the worst moment. Restarted from its
   checkpoint, Spark replays the batch; changelake sees the query already committed that batch
   id and commits nothing, so the table is still exactly right.
4. A second query streams the table's changelog (+I, -U, +U, -D) and prints it.

Run: ./dev demo   (or python examples/cdc_pipeline.py; needs pyspark and Java 17 or 21)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

import changelake as cl
from changelake import streaming
from changelake.streaming import cdc

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("customer", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("status", pa.string()),
])


def debezium(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, ts_ms: int) -> str:
    """One Debezium change event (no schema envelope)."""
    return json.dumps({"before": before, "after": after, "op": op, "ts_ms": ts_ms,
                       "source": {"db": "shop", "table": "orders"}})


def order(i: int, amount: float, status: str) -> dict[str, Any]:
    return {"id": i, "customer": f"customer-{i % 3}", "amount": amount, "status": status}


# Three files of events: new orders, then payments and a cancellation, then shipping.
EVENTS = [
    [debezium("c", None, order(i, 10.0 * i, "new"), 1000 + i) for i in range(1, 6)],
    [debezium("u", order(1, 10.0, "new"), order(1, 10.0, "paid"), 2001),
     debezium("u", order(2, 20.0, "new"), order(2, 25.0, "paid"), 2002),
     debezium("d", order(3, 30.0, "new"), None, 2003)],
    [debezium("u", order(1, 10.0, "paid"), order(1, 10.0, "shipped"), 3001),
     debezium("c", None, order(6, 60.0, "new"), 3002)],
]
FINAL = {1: ("customer-1", 10.0, "shipped"), 2: ("customer-2", 25.0, "paid"), 4: ("customer-1", 40.0, "new"),
         5: ("customer-2", 50.0, "new"), 6: ("customer-0", 60.0, "new")}


def spark_session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("changelake-cdc-demo")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ingest(workdir: Path) -> None:
    """The ingest query (run in its own process, so that it can be killed): CDC files → table."""
    spark = spark_session()
    table = cl.open_table(str(workdir / "warehouse" / "shop.db" / "orders"))
    events = spark.readStream.option("maxFilesPerTrigger", 1).text(str(workdir / "events"))
    rows = cdc.decode(events, "debezium-json", table.schema, event_time_column=None)
    query = streaming.write_stream(rows, table, checkpoint_location=str(workdir / "checkpoints" / "ingest"),
                                   trigger={"availableNow": True})
    query.awaitTermination()
    spark.stop()


def run_ingest(workdir: Path, *, kill_point: str | None = None) -> int:
    env = dict(os.environ)
    env.pop("CHANGELAKE_KILL_POINT", None)
    if kill_point:
        env["CHANGELAKE_KILL_POINT"] = kill_point
    return subprocess.run([sys.executable, __file__, "--ingest", str(workdir)], env=env, check=False,
                          stderr=subprocess.DEVNULL).returncode


def show_table(table: cl.Table) -> dict[int, tuple[Any, ...]]:
    rows = {r["id"]: (r["customer"], r["amount"], r["status"]) for r in table.scan().to_arrow().to_pylist()}
    for key in sorted(rows):
        print(f"  id={key}  customer={rows[key][0]}  amount={rows[key][1]}  status={rows[key][2]}")
    return rows


def main(workdir: Path) -> None:
    table = cl.Catalog(str(workdir / "warehouse")).create_table(
        "shop.orders", SCHEMA, primary_keys=["id"], options={"bucket": "2", "changelog-producer": "lookup"})
    events = workdir / "events"
    events.mkdir()
    for i, lines in enumerate(EVENTS):
        path = events / f"events-{i}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # Spark's file source reads in modification order

    print("1. ingest query: killed right after its commit of the 2nd micro-batch, before Spark logs it")
    code = run_ingest(workdir, kill_point="sink-committed:2")
    landed = [s.commit_identifier for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    print(f"   the query died (exit code {code}); batch ids committed to the table: {landed}")

    print("2. ingest query restarted from its checkpoint: Spark replays batch 1, changelake skips it")
    run_ingest(workdir)
    landed = [s.commit_identifier for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    print(f"   batch ids committed to the table: {landed} (each once)")
    print("   the table:")
    rows = show_table(table)
    assert rows == FINAL, f"the table is not exactly the source's state: {rows}"
    print("   = the source database's final state, exactly")

    print("3. the table's changelog, streamed by a second query:")
    spark = spark_session()
    streaming.register(spark)
    changes = (spark.readStream.format("changelake").option("read.changelog", "true")
               .option("scan.mode", "from-snapshot").option("scan.snapshot-id", "1").load(table.location))

    def show(batch: DataFrame, batch_id: int) -> None:
        for row in batch.collect():
            print(f"   {row['rowkind']}  id={row['id']}  customer={row['customer']}  amount={row['amount']}  "
                  f"status={row['status']}")

    query = (changes.writeStream.foreachBatch(show).option("checkpointLocation", str(workdir / "checkpoints" / "out"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--ingest":
        ingest(Path(sys.argv[2]))
    else:
        with tempfile.TemporaryDirectory(prefix="changelake-cdc-demo-") as tmp:
            main(Path(tmp))
