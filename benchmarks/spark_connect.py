"""Issue 25 benchmark: the sink over Spark Connect against classic Spark, in one run.

The same micro-batches go through ``changelake.streaming``'s sink (``changelog-producer =
lookup``, 4 partitions x bucket 4) on a classic local[2] session and on a Spark Connect session
to pyspark's own Connect server (local[2] on loopback, four shuffle partitions on both):

* per-batch overhead: 30 micro-batches of 1,000 rows, the sink's per-batch p50 against a no-op
  ``foreachBatch``'s on the same session (what a Connect foreachBatch costs by itself shows in
  the no-op);
* ingest: ``--batches`` micro-batches of ``--batch`` rows (default 20 x 100,000), rows/s.

Each table's rows are checked against the same stream written the other way.

Run: ./dev bench spark_connect [--batches 20] [--batch 100000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession
from spark_sink import input_files, new_table, run_query, session, stream_of

import changelake as cl
from changelake import streaming

# The Connect server the test suite starts (pyspark's sbin/start-connect-server.sh on loopback).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from spark_support import connect_server


def measure(spark: SparkSession, root: Path, label: str, small: Path, big: Path) -> tuple[list[float], list[float],
                                                                                        float, cl.Table]:
    """No-op and sink per-batch times (ms) on the small batches, the sink's seconds on the big
    ones, and the table it wrote."""
    def sink(name: str, checkpoint: Path) -> streaming.ForeachBatchSink:
        return streaming.ForeachBatchSink(new_table(root, f"{label}_{name}"), checkpoint_location=str(checkpoint))

    warm = root / f"ck-{label}-warm"
    run_query(stream_of(spark, input_files(root / label, 2, 1000)), sink("warm", warm), warm)
    _, noop = run_query(stream_of(spark, small), lambda df, batch_id: None, root / f"ck-{label}-noop")
    tiny_ck = root / f"ck-{label}-tiny"
    _, tiny = run_query(stream_of(spark, small), sink("tiny", tiny_ck), tiny_ck)
    big_ck = root / f"ck-{label}-big"
    big_sink = sink("big", big_ck)
    seconds, _ = run_query(stream_of(spark, big), big_sink, big_ck)
    return noop, tiny, seconds, big_sink.table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="changelake-connect-"))
    try:
        small = input_files(root, 30, 1000)
        big = input_files(root, args.batches, args.batch)
        for label in ("classic", "connect"):
            (root / label).mkdir()
        spark = session()
        try:
            classic = measure(spark, root, "classic", small, big)
        finally:
            spark.stop()
        with connect_server(root / "server") as url:
            remote = SparkSession.builder.remote(url).create()
            remote.conf.set("spark.sql.shuffle.partitions", "4")
            try:
                connect = measure(remote, root, "connect", small, big)
            finally:
                remote.stop()
        total = args.batches * args.batch
        expected = classic[3].scan().to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")])
        got = connect[3].scan().to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")])
        assert got.equals(expected), "the Connect sink's table differs from the classic sink's"
        print(f"1,000-row micro-batches (30), then {total:,} rows in {args.batches}; lookup producer, "
              "4 partitions x bucket 4, local[2]")
        for label, (noop, tiny, seconds, _) in (("classic", classic), ("connect", connect)):
            sink_ms, noop_ms = statistics.median(tiny), statistics.median(noop)
            print(f"{label:8} per-batch p50: sink {sink_ms:5.0f} ms   no-op foreachBatch {noop_ms:5.0f} ms   "
                  f"sink - no-op {sink_ms - noop_ms:5.0f} ms   ingest {total / seconds:>9,.0f} rows/s")
        ratio = statistics.median(connect[1]) / statistics.median(classic[1])
        print(f"Connect / classic: per-batch sink p50 {ratio:.2f}   ingest time {connect[2] / classic[2]:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
