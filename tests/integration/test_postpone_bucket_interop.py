"""Postpone-bucket tables (``bucket = -2``) between changelake and the other engines.

* pypaimon 2.1 writes them as Java Paimon does: its batch writer puts Avro files into
  ``bucket-postpone/`` (``data--u-<user>-s-<id>-w-...avro``), its fixed-bucket batch writer puts
  rows straight into real buckets, and its reads skip ``bucket-postpone/``. changelake reads such
  a table as pypaimon does, streams its Avro postpone rows (no changelog producer), compacts
  them into real buckets, and pypaimon reads the result.
* What changelake writes and compacts, pypaimon 2.1 and pypaimon-rust 0.4 read as changelake
  does at every snapshot: nothing of ``bucket-postpone/``, then an ordinary fixed-bucket layout.
* Java Paimon 0.9 predates postpone buckets (Paimon 1.1): it refuses to open a table with
  ``bucket = -2``, so it is no oracle here; pypaimon 2.1 writes Java's layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
Row = tuple[str, int, Any]


def _rows(dt: str, keys: range | list[int], v: str) -> pa.Table:
    keys = list(keys)
    return pa.table({"dt": [dt] * len(keys), "k": pa.array(keys, pa.int64()), "v": [v] * len(keys)}, schema=SCHEMA)


def _sorted(table: pa.Table) -> list[Row]:
    return sorted((r["dt"], r["k"], r["v"]) for r in table.to_pylist())


def _ours(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    return _sorted(table.scan(snapshot_id=snapshot_id).to_arrow())


def test_changelake_reads_streams_and_compacts_pypaimon_postpone_tables(tmp_path: Path, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    pypaimon.create_table(warehouse, "db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                          options={"bucket": "-2", "postpone.default-bucket-num": "2"})
    pypaimon.write(warehouse, "db.t", _rows("a", range(10), "p1"))
    pypaimon.write(warehouse, "db.t", pa.concat_tables([_rows("a", [3, 4], "p2"), _rows("b", [1], "p2")]))
    pypaimon.write_fixed_buckets(warehouse, "db.t", _rows("c", range(4), "fixed"))
    table = cl.Catalog(warehouse).get_table("db.t")
    postpone_files = list((tmp_path / "db.db" / "t" / "dt=a" / "bucket-postpone").iterdir())
    assert len(postpone_files) == 2 and all(p.name.endswith(".avro") for p in postpone_files)
    for snapshot_id in (1, 2, 3):
        theirs = pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot_id)})
        assert _ours(table, snapshot_id) == _sorted(theirs)
    assert _ours(table) == [("c", k, "fixed") for k in range(4)]
    # Without a changelog producer a stream reads the postpone files as they are, Avro or not.
    streamed = [(r["rowkind"], r["dt"], r["k"], r["v"]) for b in table.stream() for r in b.data.to_pylist()]
    assert sorted(streamed) == sorted([("+I", "a", k, "p1") for k in range(10)] + [("+I", "a", 3, "p2"),
                                      ("+I", "a", 4, "p2"), ("+I", "b", 1, "p2")] + [("+I", "c", k, "fixed")
                                                                                       for k in range(4)])
    compacted = table.compact()
    assert compacted is not None
    expected = sorted([("a", k, "p2" if k in (3, 4) else "p1") for k in range(10)] + [("b", 1, "p2")]
                      + [("c", k, "fixed") for k in range(4)])
    assert _ours(table) == expected == _sorted(pypaimon.read(warehouse, "db.t"))
    # pypaimon writes on after the compaction; both read the same again once compacted.
    pypaimon.write(warehouse, "db.t", _rows("a", [0], "p3"))
    assert _ours(table) == _sorted(pypaimon.read(warehouse, "db.t")) == expected
    table.compact()
    expected = sorted([*(r for r in expected if r[:2] != ("a", 0)), ("a", 0, "p3")])
    assert _ours(table) == expected == _sorted(pypaimon.read(warehouse, "db.t"))


def test_pypaimon_and_pypaimon_rust_read_what_changelake_writes_and_compacts(tmp_path: Path,
                                                                             pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options={"bucket": "-2", "postpone.target-row-num-per-bucket": "8"})
    with table.writer() as writer:
        writer.write(_rows("a", range(20), "w1"))
        writer.write(_rows("b", range(3), "w1"))
        writer.commit(1)
        writer.write(pa.table({"dt": ["a", "a"], "k": pa.array([1, 2], pa.int64()), "v": ["w2", None],
                               "rowkind": ["+U", "-D"]}))
        writer.commit(2)
    table.write(_rows("c", range(5), "batch"))  # straight into fixed buckets
    table.compact()
    with table.writer() as writer:
        writer.write(_rows("a", [5], "w3"))
        writer.commit(3)
    table.compact()
    rust = _rust_reader()
    for snapshot in table.snapshots():
        theirs = _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot.id)}))
        assert _ours(table, snapshot.id) == theirs, f"snapshot {snapshot.id}"
        if rust is not None:
            assert _ours(table, snapshot.id) == rust(warehouse, snapshot.id), f"snapshot {snapshot.id}"
    final = _ours(table)
    assert len(final) == 20 - 1 + 3 + 5 and ("a", 1, "w2") in final and ("a", 5, "w3") in final
    # After compaction each partition is an ordinary fixed-bucket layout (a: 3 buckets of 8 rows).
    assert {e.bucket for e in table.inspect().buckets if e.partition == (("dt", "a"),)} <= {0, 1, 2}


def _rust_reader() -> Any:
    try:
        from pypaimon_rust.datafusion import PaimonCatalog
    except ImportError:
        return None

    def read(warehouse: str, snapshot_id: int) -> list[Row]:
        builder = PaimonCatalog({"warehouse": warehouse}).get_table("db.t").new_read_builder(
            {"scan.snapshot-id": str(snapshot_id)})
        batches = builder.new_read().read(builder.new_scan().plan().splits())
        return sorted((r["dt"], r["k"], r["v"]) for b in batches for r in b.to_pylist())

    return read


@pytest.mark.parametrize("producer", ["input", "lookup"])
def test_pypaimon_streams_the_compactions_changelog(tmp_path: Path, pypaimon: Pypaimon, producer: str) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
        options={"bucket": "-2", "postpone.default-bucket-num": "2", "changelog-producer": producer})
    with table.writer() as writer:
        writer.write(_rows("a", range(4), "v1"))
        writer.commit(1)
    compacted = table.compact()
    assert compacted is not None
    ours = sorted((r["rowkind"], r["k"], r["v"]) for b in table.stream() for r in b.data.to_pylist())
    theirs = pypaimon.stream_changelog(warehouse, "db.t", compacted.id)
    assert ours == sorted((kind, k, v) for batch in theirs.values()
                          for kind, k, v in zip(batch.column("_row_kind").to_pylist(), batch.column("k").to_pylist(),
                                                batch.column("v").to_pylist(), strict=True))
    assert len(ours) == 4


def test_java_paimon_0_9_refuses_postpone_tables(tmp_path: Path, java: JavaPaimon) -> None:
    """Java Paimon 0.9 predates postpone buckets: it refuses to open a table with ``bucket = -2``
    (its ``SchemaValidation``), also once a compaction left only real buckets, so it is no
    oracle here; pypaimon 2.1 writes the Java layout (Avro ``bucket-postpone/`` files)."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                               options={"bucket": "-2", "postpone.default-bucket-num": "2"})
    with table.writer() as writer:
        writer.write(_rows("a", range(6), "w1"))
        writer.commit(1)
    table.compact()
    with pytest.raises(Exception, match="number of buckets needs to be greater than 0"):
        java.read(warehouse, "db.t")
