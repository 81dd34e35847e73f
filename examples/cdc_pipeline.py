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

Run: ./dev demo   (or python examples/cdc_pipeline.py; needs pyspark and Java 17 or 21). By
default it runs on local[2] with a temporary warehouse; ``--master``, ``--warehouse`` (a path or
an ``s3://`` URL) with Paimon's S3 options (``--option s3.endpoint=...``), ``--driver-host`` and
``--workdir`` (a directory the executors share, for the event files) run it on a cluster against
object storage, as docker-compose.yml does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

import changelake as cl
from changelake import streaming
from changelake.streaming import cdc, storage_options

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


@dataclass(frozen=True)
class Setup:
    """Where the demo runs: the Spark master, the warehouse and its storage options, and the
    working directory for the event files and checkpoints (shared with the executors)."""

    workdir: str
    warehouse: str
    options: dict[str, str] = field(default_factory=dict)  # Paimon's S3 options (s3.endpoint, ...)
    master: str = "local[2]"
    driver_host: str = "127.0.0.1"

    @property
    def table_location(self) -> str:
        return f"{self.warehouse.rstrip('/')}/shop.db/orders"

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options as fsspec's (s3fs's) storage options."""
        return storage_options.split(self.options)[1]

    def open_table(self) -> cl.Table:
        return cl.open_table(self.table_location, storage_options=self.storage_options)


def spark_session(setup: Setup) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # On a cluster the driver listens on every interface; executors reach it as driver_host.
    bind = "0.0.0.0" if setup.master.startswith("spark://") else setup.driver_host
    spark = (SparkSession.builder.master(setup.master).appName("changelake-cdc-demo")
             .config("spark.driver.host", setup.driver_host).config("spark.driver.bindAddress", bind)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def ingest(setup: Setup) -> None:
    """The ingest query (run in its own process, so that it can be killed): CDC files → table."""
    spark = spark_session(setup)
    table = setup.open_table()
    events = spark.readStream.option("maxFilesPerTrigger", 1).text(f"{setup.workdir}/events")
    rows = cdc.decode(events, "debezium-json", table.schema, event_time_column=None)
    query = streaming.write_stream(rows, table, checkpoint_location=f"{setup.workdir}/checkpoints/ingest",
                                   trigger={"availableNow": True})
    query.awaitTermination()
    spark.stop()


def changelog(setup: Setup) -> None:
    """The second query (its own process): stream the table's changelog and print it."""
    spark = spark_session(setup)
    table = setup.open_table()
    streaming.register(spark)
    changes = (spark.readStream.format("changelake").option("read.changelog", "true")
               .option("scan.mode", "from-snapshot").option("scan.snapshot-id", "1").options(**setup.options)
               .load(table.location))

    def show(batch: DataFrame, batch_id: int) -> None:
        for row in batch.collect():
            print(f"   {row['rowkind']}  id={row['id']}  customer={row['customer']}  amount={row['amount']}  "
                  f"status={row['status']}", flush=True)

    query = (changes.writeStream.foreachBatch(show).option("checkpointLocation", f"{setup.workdir}/checkpoints/out")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()


def run_query(setup: Setup, query: str, *, kill_point: str | None = None) -> int:
    """Run ``query`` (ingest or changelog) in a process of its own; its exit code. Spark's own log
    lines (the JVM's stderr) stay out of the demo's output unless the query fails unexpectedly."""
    env = dict(os.environ)
    env.pop("CHANGELAKE_KILL_POINT", None)
    if kill_point:
        env["CHANGELAKE_KILL_POINT"] = kill_point
    done = subprocess.run([sys.executable, __file__, f"--{query}", json.dumps(asdict(setup))], env=env, check=False,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != (-signal.SIGKILL if kill_point else 0):
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the {query} query failed (exit code {done.returncode})")
    return done.returncode


def show_table(table: cl.Table) -> dict[int, tuple[Any, ...]]:
    rows = {r["id"]: (r["customer"], r["amount"], r["status"]) for r in table.scan().to_arrow().to_pylist()}
    for key in sorted(rows):
        print(f"  id={key}  customer={rows[key][0]}  amount={rows[key][1]}  status={rows[key][2]}")
    return rows


def main(setup: Setup) -> None:
    table = cl.Catalog(setup.warehouse, storage_options=setup.storage_options).create_table(
        "shop.orders", SCHEMA, primary_keys=["id"], options={"bucket": "2", "changelog-producer": "lookup"})
    print(f"the table: {table.location} (Spark: {setup.master})")
    events = Path(setup.workdir) / "events"
    events.mkdir(parents=True)
    for i, lines in enumerate(EVENTS):
        path = events / f"events-{i}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # Spark's file source reads in modification order

    print("1. ingest query: killed right after its commit of the 2nd micro-batch, before Spark logs it")
    code = run_query(setup, "ingest", kill_point="sink-committed:2")
    landed = [s.commit_identifier for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    print(f"   the query died (exit code {code}); batch ids committed to the table: {landed}")

    print("2. ingest query restarted from its checkpoint: Spark replays batch 1, changelake skips it")
    run_query(setup, "ingest")
    landed = [s.commit_identifier for s in table.snapshots() if s.commit_kind is cl.CommitKind.APPEND]
    print(f"   batch ids committed to the table: {landed} (each once)")
    print("   the table:")
    rows = show_table(table)
    assert rows == FINAL, f"the table is not exactly the source's state: {rows}"
    print("   = the source database's final state, exactly")

    print("3. the table's changelog, streamed by a second query:", flush=True)
    run_query(setup, "changelog")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", default="local[2]", help="the Spark master URL (default local[2])")
    parser.add_argument("--driver-host", default="127.0.0.1", help="the name executors reach the driver by")
    parser.add_argument("--warehouse", help="the warehouse URL (default: a temporary directory); each run "
                                            "makes its own run-<time> warehouse under it")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a Paimon S3 option for an s3:// warehouse (repeatable): "
                             f"{', '.join(storage_options.KEYS)}")
    parser.add_argument("--workdir", help="a directory for the event files and checkpoints, shared with the "
                                          "executors on a cluster (default: a temporary directory)")
    parser.add_argument("--ingest", help=argparse.SUPPRESS)  # the ingest query's own process
    parser.add_argument("--changelog", help=argparse.SUPPRESS)  # the changelog query's own process
    args = parser.parse_args(argv)
    for option in args.option:
        if "=" not in option:
            parser.error(f"--option {option!r} is not KEY=VALUE")
    try:
        storage_options.split(dict(option.split("=", 1) for option in args.option))
    except cl.errors.OptionError as error:
        parser.error(str(error))
    return args


def run(args: argparse.Namespace, tmp: str) -> None:
    run_id = time.strftime("run-%Y%m%d-%H%M%S")
    main(Setup(
        workdir=f"{args.workdir}/{run_id}" if args.workdir else f"{tmp}/work",
        warehouse=f"{args.warehouse.rstrip('/')}/{run_id}" if args.warehouse else f"{tmp}/warehouse",
        options=dict(option.split("=", 1) for option in args.option),
        master=args.master, driver_host=args.driver_host))


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    if arguments.ingest:
        ingest(Setup(**json.loads(arguments.ingest)))
    elif arguments.changelog:
        changelog(Setup(**json.loads(arguments.changelog)))
    else:
        with tempfile.TemporaryDirectory(prefix="changelake-cdc-demo-") as scratch:
            run(arguments, scratch)
