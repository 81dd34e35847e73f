"""Issue 26 benchmark: table operations on a 10M-row table against delta-rs on the same rows, in
one run, each engine's result checked against the other's.

The table: ``--rows`` rows of the ``ingest_read.py`` schema (4 partitions, ids 0..N-1, amounts
uniform in [0, 100)), written in one commit; changelake as a primary-key table (bucket 4,
deletion vectors off, compacted) and as an append table, delta-rs as a partitioned Delta table.
Timed, each on fresh copies:

* delete 1% of the rows by a non-key predicate (``amount < 1``);
* a dynamic overwrite of one partition of four with as many new rows
  (delta-rs: ``write_deltalake(mode="overwrite", predicate="dt = ...")``);
* truncate (delta-rs: ``DeltaTable.delete()`` of every row);
* merge 100k source rows (half updates of existing keys, half new keys) into the primary-key
  table: update matched, insert the rest (delta-rs: ``merge(...).when_matched_update_all()
  .when_not_matched_insert_all()``).

Run: ./dev bench table_operations [--rows 10000000] (delta-rs: ``pip install deltalake``).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from ingest_read import SCHEMA

import changelake as cl

PARTITIONS = ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")


def rows(n: int, first_id: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    return pa.table({
        "dt": pa.array(np.array(PARTITIONS)[ids % 4]),
        "id": ids,
        "name": pa.array(np.char.add("n", (ids % 1000).astype(str))),
        "amount": rng.uniform(0, 100, n),
        "qty": rng.integers(0, 100, n, dtype=np.int32),
    }, schema=SCHEMA)


def timed(label: str, action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    seconds = time.perf_counter() - start
    print(f"  {label}: {seconds:.2f} s")
    return seconds


def checksum(table: pa.Table) -> tuple[int, int]:
    return table.num_rows, int(pc.sum(table["id"]).as_py() or 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="changelake-ops-"))
    data = rows(args.rows, 0, 1)
    fresh = rows(args.rows // 4, args.rows, 2)
    replacement = fresh.set_column(0, SCHEMA.field("dt"), pa.repeat(pa.scalar(PARTITIONS[0]), fresh.num_rows))
    try:
        catalog = cl.Catalog(str(root / "warehouse"))
        pk = catalog.create_table("bench.pk", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
                                  options={"bucket": "4"})
        pk.write(data)
        pk.compact(full=True)
        log = catalog.create_table("bench.log", SCHEMA, partition_keys=["dt"])
        log.write(data)
        delta_root = str(root / "delta")
        deltalake = None
        if importlib.util.find_spec("deltalake") is not None:
            import deltalake  # optional, benchmark-only: imported when installed
            deltalake.write_deltalake(delta_root, data, partition_by=["dt"])

        def copy(location: str, name: str) -> str:
            target = root / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(location, target)
            return str(target)

        results: dict[str, dict[str, float]] = {}
        want_after_delete = checksum(data.filter(pc.field("amount") >= 1))
        kept = data.filter(pc.field("dt") != PARTITIONS[0])
        want_after_overwrite = checksum(pa.concat_tables([kept, replacement]))
        merge_size = min(100_000, args.rows // 10)
        existing = rows(merge_size // 2, args.rows - merge_size // 2, 3)  # the last keys, new values
        source = pa.concat_tables([existing, rows(merge_size - merge_size // 2, 2 * args.rows, 4)])
        want_after_merge = (data.num_rows + source.num_rows - existing.num_rows,
                            int(pc.sum(data["id"]).as_py()) + int(pc.sum(source["id"]).as_py())
                            - int(pc.sum(existing["id"]).as_py()))
        print(f"{args.rows:,} rows, 4 partitions")
        for engine, location in (("changelake primary key", pk.location), ("changelake append", log.location)):
            print(engine)
            times = results.setdefault(engine, {})
            t = cl.open_table(copy(location, "work"))
            times["delete 1%"] = timed("delete 1% (amount < 1)", lambda t=t: t.delete("amount < 1"))
            assert checksum(t.scan().to_arrow()) == want_after_delete
            t = cl.open_table(copy(location, "work"))
            times["overwrite 1 of 4"] = timed("dynamic overwrite of one partition",
                                              lambda t=t: t.overwrite(replacement))
            assert checksum(t.scan().to_arrow()) == want_after_overwrite
            t = cl.open_table(copy(location, "work"))
            times["truncate"] = timed("truncate", t.truncate)
            assert t.scan().to_arrow().num_rows == 0
            if engine == "changelake primary key":
                t = cl.open_table(copy(location, "work"))
                times["merge 100k"] = timed("merge 100k rows", lambda t=t: t.merge(source).when_matched_update()
                                            .when_not_matched_insert().execute())
                assert checksum(t.scan().to_arrow()) == want_after_merge
        if deltalake is not None:
            print(f"delta-rs {deltalake.__version__}")
            times = results.setdefault("delta-rs", {})
            d = deltalake.DeltaTable(copy(delta_root, "work"))
            times["delete 1%"] = timed("delete 1% (amount < 1)", lambda d=d: d.delete("amount < 1"))
            assert checksum(deltalake.DeltaTable(str(root / "work")).to_pyarrow_table()) == want_after_delete
            work = copy(delta_root, "work")
            times["overwrite 1 of 4"] = timed("dynamic overwrite of one partition", lambda: deltalake.write_deltalake(
                work, replacement, mode="overwrite", predicate=f"dt = '{PARTITIONS[0]}'"))
            assert checksum(deltalake.DeltaTable(work).to_pyarrow_table()) == want_after_overwrite
            d = deltalake.DeltaTable(copy(delta_root, "work"))
            times["truncate"] = timed("truncate", lambda d=d: d.delete())
            d = deltalake.DeltaTable(copy(delta_root, "work"))
            times["merge 100k"] = timed("merge 100k rows", lambda d=d: d.merge(
                source, predicate="t.id = s.id AND t.dt = s.dt", source_alias="s", target_alias="t")
                .when_matched_update_all().when_not_matched_insert_all().execute())
            assert checksum(deltalake.DeltaTable(str(root / "work")).to_pyarrow_table()) == want_after_merge
        else:
            print("delta-rs: not installed (pip install deltalake to compare)")
        if "delta-rs" in results:
            print("time against delta-rs (below 1: faster)")
            for engine in ("changelake primary key", "changelake append"):
                print(f"  {engine}: " + ", ".join(f"{op} {results[engine][op] / results['delta-rs'][op]:.2f}"
                                                 for op in results[engine]))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
