"""ORC and Avro data files across engines: Java Paimon 0.9 writes ORC and Avro tables
(``file.format = orc``, ``file.format.per.level = 0:avro``; primary-key and append) and changelake
reads them at every snapshot (and Java's ORC manifests); changelake writes them and Java Paimon
0.9, pypaimon 2.1 and pypaimon-rust 0.4 read them."""

from __future__ import annotations

import datetime as dt
import decimal
import glob
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import EPOCH, JavaPaimon

import changelake as cl
from changelake.errors import OptionError
from pypaimon_oracle import Pypaimon

D = decimal.Decimal
JAVA_FIELDS = [("id", "BIGINT"), ("v", "STRING"), ("d", "DOUBLE"), ("n", "INT")]
FORMATS = [{"file.format": "orc"}, {"file.format": "avro"}, {"file.format.per.level": "0:avro,5:orc"}]
SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()), pa.field("d", pa.float64()),
    pa.field("n", pa.int32()), pa.field("dec", pa.decimal128(10, 2)), pa.field("big", pa.decimal128(30, 4)),
    pa.field("ts", pa.timestamp("ms")), pa.field("ts6", pa.timestamp("us")), pa.field("day", pa.date32()),
    pa.field("b", pa.binary()),
])


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def _extensions(warehouse: str) -> set[str]:
    return {p.rsplit(".", 1)[1] for p in glob.glob(f"{warehouse}/db.db/t/bucket-*/data-*")}


@pytest.mark.parametrize("primary_key", [True, False], ids=["pk", "append"])
@pytest.mark.parametrize("options", [{"file.format": "orc"}, {"file.format": "avro"},
                                     {"file.format.per.level": "0:avro"}], ids=["orc", "avro", "level0-avro"])
def test_changelake_reads_java_orc_and_avro_tables_at_every_snapshot(tmp_path: Path, java: JavaPaimon,
                                                                     options: dict[str, str],
                                                                     primary_key: bool) -> None:
    warehouse = str(tmp_path)
    keys = ["id"] if primary_key else []
    bucketing = {"bucket": "2"} if primary_key else {"bucket": "-1"}
    java.create_table(warehouse, "db.t", JAVA_FIELDS, primary_keys=keys, options={**bucketing, **options})
    java.write(warehouse, "db.t", [("+I", {"id": i, "v": f"v{i}", "d": i / 4, "n": i}) for i in range(20)])
    if primary_key:
        java.write(warehouse, "db.t", [("+U", {"id": 3, "v": None, "d": -1.0, "n": None}),
                                       ("-D", {"id": 4, "v": "v4", "d": 1.0, "n": 4})])
        java.write(warehouse, "db.t", [("+I", {"id": 30, "v": "new", "d": 0.5, "n": 30})], full_compaction=True)
    else:
        java.write(warehouse, "db.t", [("+I", {"id": i, "v": None, "d": None, "n": i}) for i in range(20, 25)])
    expected_formats = {"orc"} if options.get("file.format") == "orc" else {"avro"}
    if "file.format.per.level" in options:
        # Java's append writers ignore per-level formats (as changelake's do)
        expected_formats = {"avro", "parquet"} if primary_key else {"parquet"}
    assert _extensions(warehouse) == expected_formats
    table = cl.Catalog(warehouse).get_table("db.t")
    for snapshot in table.snapshots():
        ours = _sorted(table.scan(snapshot.id).to_arrow().to_pylist())
        assert ours == _sorted(java.read(warehouse, "db.t", snapshot.id)), f"snapshot {snapshot.id}"


def _rows(start: int, count: int) -> pa.Table:
    ids = range(start, start + count)
    return pa.Table.from_pylist([{
        "id": i, "v": None if i % 7 == 0 else f"v{i}", "d": i * 1.5, "n": i if i % 5 else None,
        "dec": D(i) / 100 - 5, "big": D(f"-{i}12345678901234567890.1234"),
        "ts": dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i * 1001),
        "ts6": dt.datetime(2001, 12, 31, 23) + dt.timedelta(microseconds=i * 999_999),
        "day": dt.date(2000, 1, 1) + dt.timedelta(days=i), "b": bytes([i % 256, 0, 255]),
    } for i in ids], schema=SCHEMA)


def _as_java(row: dict[str, Any]) -> dict[str, Any]:
    """A row as java_paimon reads it: DATE as days, TIMESTAMP as microseconds since the epoch."""
    out = dict(row)
    out["ts"] = (row["ts"] - EPOCH) // dt.timedelta(microseconds=1)
    out["ts6"] = (row["ts6"] - EPOCH) // dt.timedelta(microseconds=1)
    out["day"] = (row["day"] - dt.date(1970, 1, 1)).days
    return out


@pytest.mark.parametrize("options", FORMATS, ids=["orc", "avro", "avro-then-orc"])
def test_java_and_pypaimon_read_changelake_orc_and_avro_tables(tmp_path: Path, java: JavaPaimon, pypaimon: Pypaimon,
                                                              options: dict[str, str]) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["id"],
                                               options={"bucket": "2", **options})
    table.write(_rows(0, 300))
    table.write(_rows(250, 100))  # overlaps: Java and pypaimon merge level-0 files of our format
    table.delete("id < 10")
    checkpoints = [table.latest_snapshot()]
    table.compact(full=True)
    checkpoints.append(table.latest_snapshot())
    wanted = {"orc"} if options.get("file.format") == "orc" else {"avro"}
    assert _extensions(warehouse) >= wanted
    for snapshot in checkpoints:
        assert snapshot is not None
        ours = _sorted(table.scan(snapshot.id).to_arrow().to_pylist())
        assert len(ours) == 340
        assert _sorted(java.read(warehouse, "db.t", snapshot.id)) == [_as_java(r) for r in ours], snapshot.id
        theirs = pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(snapshot.id)})
        assert _sorted(theirs.cast(SCHEMA).to_pylist()) == ours, snapshot.id


@pytest.mark.parametrize("file_format", ["orc", "avro"])
def test_java_and_pypaimon_read_changelake_append_tables(tmp_path: Path, java: JavaPaimon, pypaimon: Pypaimon,
                                                         file_format: str) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, options={"bucket": "-1", "file.format": file_format})
    table.write(_rows(0, 50))
    table.write(_rows(50, 50))
    assert _extensions(warehouse) == {file_format}
    ours = _sorted(table.scan().to_arrow().to_pylist())
    assert _sorted(java.read(warehouse, "db.t")) == [_as_java(r) for r in ours]
    assert _sorted(pypaimon.read(warehouse, "db.t").cast(SCHEMA).to_pylist()) == ours


def test_changelake_reads_java_orc_manifests_and_refuses_to_write_them(tmp_path: Path, java: JavaPaimon) -> None:
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", JAVA_FIELDS, primary_keys=["id"],
                      options={"bucket": "1", "manifest.format": "orc", "file.format": "orc"})
    java.write(warehouse, "db.t", [("+I", {"id": i, "v": f"v{i}", "d": i / 4, "n": i}) for i in range(5)])
    java.write(warehouse, "db.t", [("-D", {"id": 2, "v": "v2", "d": 0.5, "n": 2})], full_compaction=True)
    manifests = glob.glob(f"{warehouse}/db.db/t/manifest/manifest-*")
    assert manifests and all(Path(p).read_bytes()[:3] == b"ORC" for p in manifests)
    table = cl.Catalog(warehouse).get_table("db.t")
    snapshots = table.snapshots()
    for snapshot in snapshots:
        ours = _sorted(table.scan(snapshot.id).to_arrow().to_pylist())
        assert ours == _sorted(java.read(warehouse, "db.t", snapshot.id)), f"snapshot {snapshot.id}"
    with pytest.raises(OptionError, match="Avro manifests only") as info:
        table.write(pa.table({"id": [9], "v": ["x"], "d": [1.0], "n": [9]}, schema=table.schema))
    assert info.value.option == "manifest.format"
    assert table.snapshots() == snapshots


@pytest.mark.parametrize("primary_key", [True, False], ids=["pk", "append"])
@pytest.mark.parametrize("file_format", ["orc", "avro"])
def test_pypaimon_rust_reads_changelake_orc_and_avro_tables(tmp_path: Path, file_format: str,
                                                            primary_key: bool) -> None:
    rust = pytest.importorskip("pypaimon_rust.datafusion")
    warehouse = str(tmp_path)
    keys: dict[str, Any] = {"primary_keys": ["id"]} if primary_key else {}
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, options={"bucket": "1" if primary_key else "-1", "file.format": file_format}, **keys)
    table.write(_rows(0, 60))
    table.write(_rows(40, 60))  # overlapping keys: pypaimon-rust merges two level-0 files of the format
    builder = rust.PaimonCatalog({"warehouse": warehouse}).get_table("db.t").new_read_builder(None)
    batches = builder.new_read().read(builder.new_scan().plan().splits())
    theirs = _sorted([row for batch in batches for row in batch.to_pylist()])
    assert theirs == _sorted(table.scan().to_arrow().to_pylist())
