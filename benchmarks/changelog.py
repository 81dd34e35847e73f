"""Issue 9 benchmark: ingest with each changelog producer, then consume the whole changelog.

5,000,000 rows in 50 commits of 100,000 (70% new keys, 25% updates, 5% deletes), 4 partitions,
bucket 4, one long-lived writer per producer (``none``, ``input``, ``lookup``,
``full-compaction`` with ``full-compaction.delta-commits=1``), each in a fresh process for its
own peak RSS. Then a change stream from the first snapshot reads every change.

Run: ./dev bench changelog [--commits 50] [--batch 100000] [--producers none,input,lookup,full-compaction]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from ingest_read import SCHEMA, batches

import changelake as cl
from changelake.changelog import producers

PRODUCERS = ["none", "input", "lookup", "full-compaction"]


def run(producer: str, commits: int, size: int) -> dict[str, Any]:
    """One producer's ingest and changelog read (in this process)."""
    root = tempfile.mkdtemp(prefix="changelake-changelog-bench-")
    try:
        options = {"bucket": "4", "changelog-producer": producer}
        if producer == "full-compaction":
            options["full-compaction.delta-commits"] = "1"
        table = cl.Catalog(root).create_table("bench.orders", SCHEMA, primary_keys=["dt", "id"],
                                              partition_keys=["dt"], options=options)
        ingest_s = 0.0
        with table.writer(commit_user="bench") as writer:
            for identifier, batch in enumerate(batches(commits, size), start=1):
                start = time.perf_counter()
                writer.write(batch)
                writer.commit(identifier=identifier)
                ingest_s += time.perf_counter() - start
        start = time.perf_counter()
        emitted = 0
        kinds: dict[str, int] = {}
        for change in table.stream(mode="from-snapshot", snapshot_id=1):
            emitted += change.data.num_rows
            for item in change.data.column("rowkind").value_counts().to_pylist():
                kinds[item["values"]] = kinds.get(item["values"], 0) + item["counts"]
        read_s = time.perf_counter() - start
        cache = producers.lookup_cache(table.context)
        assert cache is not None  # a lookup producer's table
        return {"hit_rate": cache.hit_rate, "lookups": cache.hits + cache.misses,
                "ingest": commits * size / ingest_s, "read": emitted / read_s if read_s else 0.0,
                "emitted": emitted, "read_s": read_s, "kinds": kinds,
                "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--producers", default=",".join(PRODUCERS))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run(args.one, args.commits, args.batch)))
        return
    results = {}
    for producer in args.producers.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", producer, "--commits", str(args.commits),
                              "--batch", str(args.batch)], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(f"{producer}: failed\n{out.stderr.strip().splitlines()[-1]}")
            continue
        results[producer] = json.loads(out.stdout.strip().splitlines()[-1])
    total = args.commits * args.batch
    print(f"{total:,} rows in {args.commits} commits of {args.batch:,}, 4 partitions x bucket 4")
    for producer, r in results.items():
        print(f"{producer:<16} ingest {r['ingest']:>11,.0f} rows/s   changelog read {r['read']:>11,.0f} rows/s "
              f"({r['emitted']:,} rows emitted: {r['kinds']})   peak RSS {r['rss']:,.0f} MB"
              + (f"   lookup cache hit rate {r['hit_rate']:.0%} of {r['lookups']:,}" if r["lookups"] else ""))
    if "none" in results and "lookup" in results:
        print(f"lookup ingest = {results['lookup']['ingest'] / results['none']['ingest']:.0%} of none "
              "(target >= 40%)")


if __name__ == "__main__":
    main()
