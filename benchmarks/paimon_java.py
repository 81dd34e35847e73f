"""Apache Paimon's own Java engine on issue 13's workload, beside changelake and the floor.

The 2M-row upsert ingest of compaction_ingest.py (20 commits of 100,000 rows: 70% new keys,
25% updates, 5% deletes; 4 partitions, bucket 4) written three ways in every round, in a
rotating order after os.sync(): the floor (the batches as plain Parquet files), changelake,
and Apache Paimon 0.9.0 itself (the jar ``./dev test`` fetches into ``.cache/paimon-java``; a
JVM driven over py4j, as tests/integration/java_paimon.py does). Paimon writes as one Flink
subtask would: one writer (a long-lived stream writer committing every batch, waiting for
compaction where Paimon's ``lookup-wait`` says so, or ``--one-shot``: a batch write per
commit), its compaction on its own thread. Rows reach it as
Arrow IPC bytes, converted to rows in the JVM; their row kinds come from a stored ``rowkind``
column (``rowkind.field``), which changelake's tables do not store. Sending the bytes over
py4j's socket is timed apart (the same bytes sent to a no-op) and left out of Paimon's ingest.
Every table is then read by changelake, and its live rows must be the floor's.

Prints each engine's rows/s, CPU per row and ratio to the floor: the median round and every
round. The JVM's first round includes its JIT warm-up (a short warm-up ingest runs first).

Run: ./dev bench paimon_java [--commits 20] [--batch 100000] [--rounds 3] [--one-shot] [--option K=V]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))

from compaction_ingest import run as run_changelake
from ingest_read import batches, run_floor
from java_paimon import JavaPaimon, jar_path, jar_reason

import changelake as cl

TICKS = os.sysconf("SC_CLK_TCK")


def jvm_cpu_s(pid: int) -> float:
    """CPU seconds the JVM has used (every thread's, user and system)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class PaimonIngest:
    """The workload written by Java Paimon into a table of its own, timed."""

    def __init__(self, java: JavaPaimon) -> None:
        self.java = java
        self.jvm: Any = java.jvm
        self.pid = int(self.jvm.java.lang.ProcessHandle.current().pid())

    def create(self, warehouse: str, options: dict[str, str]) -> Any:
        fields = [("dt", "STRING"), ("id", "BIGINT"), ("name", "STRING"), ("amount", "DOUBLE"), ("qty", "INT"),
                  ("rowkind", "STRING")]
        self.java.create_table(warehouse, "bench.orders", fields, primary_keys=["dt", "id"], partition_keys=["dt"],
                               options={"bucket": "4", "rowkind.field": "rowkind", **options})
        return self.java.table(warehouse, "bench.orders")

    def _stream_builder(self, table: Any) -> Any:
        # a default method of Table, which py4j does not find by name
        no_types = self.java.gateway.new_array(self.jvm.java.lang.Class, 0)
        method = self.jvm.java.lang.Class.forName("org.apache.paimon.table.Table").getMethod(
            "newStreamWriteBuilder", no_types)
        return method.invoke(table, self.java.gateway.new_array(self.jvm.java.lang.Object, 0))

    def run(self, warehouse: str, data: list[bytes], *, one_shot: bool, options: dict[str, str]) -> dict[str, Any]:
        paimon = self.jvm.org.apache.paimon
        util = paimon.python.InvocationUtil
        table = self.create(warehouse, options)
        row_type = table.rowType()
        durations, sending = [], 0.0
        for payload in data:  # py4j's cost of carrying the bytes, measured on a no-op
            start = time.perf_counter()
            self.jvm.java.util.Arrays.hashCode(payload)
            sending += time.perf_counter() - start
        cpu_started = jvm_cpu_s(self.pid)
        stream = None if one_shot else self._stream_builder(table)
        writer = committer = None
        if stream is not None:
            writer, committer = stream.newWrite(), stream.newCommit()
            writer.withIOManager(paimon.disk.IOManager.create(self.java.spill))
        for identifier, payload in enumerate(data):
            start = time.perf_counter()
            if stream is None:
                builder = util.getBatchWriteBuilder(table)
                write, commit = builder.newWrite(), builder.newCommit()
                write.withIOManager(paimon.disk.IOManager.create(self.java.spill))
                util.createBytesWriter(write, row_type).write(payload)
                commit.commit(write.prepareCommit())
                write.close()
                commit.close()
            else:
                util.createBytesWriter(writer, row_type).write(payload)
                committer.commit(identifier, writer.prepareCommit(waits_for_lookup(options), identifier))
            durations.append(time.perf_counter() - start)
        if writer is not None:
            start = time.perf_counter()
            writer.close()  # waits for a compaction still running
            committer.close()
            durations[-1] += time.perf_counter() - start
        cpu = jvm_cpu_s(self.pid) - cpu_started
        rows = cl.open_table(f"{warehouse}/bench.db/orders").scan().to_arrow().num_rows
        return {"wall": sum(durations) - sending, "sending": sending, "cpu": cpu, "rows": rows,
                "durations": durations}


def waits_for_lookup(options: dict[str, str]) -> bool:
    """Whether Paimon's stream writer waits for compaction at every commit: for tables that
    look keys up (deletion vectors, first-row, the lookup producer), unless ``lookup-wait``
    is false (Paimon's ``CoreOptions.prepareCommitWaitCompaction``), as changelake's do."""
    looks_up = options.get("deletion-vectors.enabled") == "true" or options.get("merge-engine") == "first-row" \
        or options.get("changelog-producer") == "lookup"
    return looks_up and options.get("lookup-wait", options.get("changelog-producer.lookup-wait")) != "false"


def ipc_bytes(batch: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as stream:
        stream.write_table(batch)
    return sink.getvalue().to_pybytes()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one-shot", action="store_true", help="a batch write per commit, not one writer")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a table option beyond bucket 4, for both engines")
    args = parser.parse_args()
    reason = jar_reason()
    if reason is not None:
        sys.exit(reason)
    options = dict(o.split("=", 1) for o in args.option)
    total = args.commits * args.batch
    data = [ipc_bytes(b) for b in batches(args.commits, args.batch)]
    java = JavaPaimon(jar_path(), heap="4g")
    paimon = PaimonIngest(java)
    rounds: list[dict[str, Any]] = []
    try:
        warm = tempfile.mkdtemp(prefix="changelake-bench-")
        paimon.run(warm, data[:3], one_shot=args.one_shot, options=options)  # JIT warm-up
        shutil.rmtree(warm, ignore_errors=True)
        for index in range(args.rounds):
            work = tempfile.mkdtemp(prefix="changelake-bench-")
            order = ["floor", "changelake", "paimon"]
            order = order[index % 3:] + order[:index % 3]
            result: dict[str, Any] = {}
            try:
                for engine in order:
                    os.sync()
                    if engine == "floor":
                        result[engine] = run_floor(f"{work}/floor", args.commits, args.batch)
                    elif engine == "changelake":
                        result[engine] = run_changelake(f"{work}/ours", args.commits, args.batch,
                                                        one_shot=args.one_shot, options=options, profiles=None)
                    else:
                        result[engine] = paimon.run(f"{work}/paimon", data, one_shot=args.one_shot, options=options)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            floor = result["floor"]
            for engine in ("changelake", "paimon"):
                if result[engine]["rows"] != floor.rows:
                    sys.exit(f"{engine}: {result[engine]['rows']} live rows, the floor has {floor.rows}")
            rounds.append(result)
    finally:
        java.close()
    mode = "a batch write per commit" if args.one_shot else "one writer, a commit per batch"
    print(f"rows written: {total:,} in {args.commits} commits ({mode}); options: {options or 'defaults'}; "
          f"live rows at the end: {rounds[0]['floor'].rows:,}")

    def ingest_s(result: dict[str, Any], engine: str) -> float:
        """The ingest's seconds: changelake's commits (as compaction_ingest.py times them), or
        Paimon's less py4j's carrying of the bytes."""
        run = result[engine]
        return float(sum(run["durations"]) if engine == "changelake" else run["wall"])

    def ratio(result: dict[str, Any], engine: str) -> float:
        return float(result["floor"].write_s / ingest_s(result, engine))

    for engine, label in (("changelake", "changelake"), ("paimon", "Apache Paimon 0.9.0 (Java)")):
        ratios = [ratio(r, engine) for r in rounds]
        median = rounds[ratios.index(statistics.median_low(ratios))]
        run, floor = median[engine], median["floor"]
        wall = ingest_s(median, engine)
        extra = f", py4j carrying the bytes {run['sending']:.2f} s left out" if engine == "paimon" else ""
        print(f"{label}: {total / wall:,.0f} rows/s ({wall:.2f} s wall, {run['cpu']:.2f} s CPU{extra}); "
              f"CPU per row {run['cpu'] / total * 1e6:.2f} us ({run['cpu'] / floor.write_cpu_s:.1f}x the floor's); "
              f"{ratios[rounds.index(median)]:.2f}x of the floor; every round: "
              + ", ".join(f"{x:.2f}x" for x in ratios))
    floors = [r["floor"].write_s for r in rounds]
    print(f"plain parquet write (floor): {total / statistics.median(floors):,.0f} rows/s (median round)")


if __name__ == "__main__":
    main()
