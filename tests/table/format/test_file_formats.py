"""ORC and Avro data files: every Paimon type round-trips through each (key-value, thin and
append layouts), each level is written in its ``file.format.per.level`` format, a table whose
format changed reads each file by its extension, and files whose extension lies are corrupt."""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.orc as orc
import pytest

import changelake as cl
from changelake.errors import CorruptMetadataError, OptionError, SchemaError
from changelake.table.format import data_file, kv
from changelake.table.format.file_format import FileFormat
from changelake.table.format.file_settings import FileSettings
from changelake.table.io.fileio import FileIO

UTC = dt.UTC
TYPES = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("b", pa.bool_()), pa.field("i8", pa.int8()), pa.field("i16", pa.int16()), pa.field("i32", pa.int32()),
    pa.field("f32", pa.float32()), pa.field("f64", pa.float64()), pa.field("s", pa.string()),
    pa.field("bin", pa.binary()), pa.field("fixed", pa.binary(3)), pa.field("date", pa.date32()),
    pa.field("ts0", pa.timestamp("s")), pa.field("ts3", pa.timestamp("ms")),
    pa.field("ts6", pa.timestamp("us")), pa.field("ltz3", pa.timestamp("ms", tz="UTC")),
    pa.field("ltz6", pa.timestamp("us", tz="UTC")),
    pa.field("dec", pa.decimal128(10, 2)), pa.field("wide", pa.decimal128(38, 6)),
    pa.field("arr", pa.list_(pa.field("element", pa.decimal128(5, 1)))),
    pa.field("smap", pa.map_(pa.string(), pa.field("value", pa.timestamp("ms")))),
    pa.field("imap", pa.map_(pa.int32(), pa.field("value", pa.string()))),
    pa.field("row", pa.struct([pa.field("x", pa.int32(), nullable=False), pa.field("d", pa.date32()),
                               pa.field("inner", pa.struct([pa.field("t", pa.timestamp("us"))]))])),
])
D = decimal.Decimal


def _rows() -> pa.Table:
    full = {
        "id": 1, "b": True, "i8": -8, "i16": 300, "i32": -70000, "f32": 1.5, "f64": -2.25, "s": "héllo",
        "bin": b"\x00\xff", "fixed": b"abc", "date": dt.date(1969, 12, 31),
        "ts0": dt.datetime(2024, 2, 29, 12, 0, 1), "ts3": dt.datetime(1960, 1, 1, 0, 0, 0, 123000),
        "ts6": dt.datetime(2030, 5, 6, 7, 8, 9, 123456), "ltz3": dt.datetime(2024, 1, 1, 0, 0, 0, 1000, tzinfo=UTC),
        "ltz6": dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "dec": D("-12345678.90"), "wide": D("-99999999999999999999999999999999.999999"),
        "arr": [D("1.5"), None, D("-0.1"), D("-1280.0")], "smap": {"a": dt.datetime(2001, 1, 1), "b": None},
        "imap": {-1: "minus", 7: None},
        "row": {"x": 5, "d": dt.date(2000, 1, 1), "inner": {"t": dt.datetime(1970, 1, 1)}},
    }
    small = {**{k: None for k in TYPES.names}, "id": 2, "dec": D("0.00"), "wide": D("128.000000"), "arr": [],
             "smap": {}, "imap": {}, "row": {"x": -1, "d": None, "inner": None}}
    edge = {**{k: None for k in TYPES.names}, "id": 3, "dec": D("-0.01"), "wide": D("-128.000001"), "arr": [D("-12.8")],
            "row": None}
    return pa.Table.from_pylist([full, small, edge], schema=TYPES)


def _table(tmp_path: Path, options: dict[str, str], *, append: bool = False) -> cl.Table:
    keys: dict[str, Any] = {} if append else {"primary_keys": ["id"]}
    settings = {"bucket": "1", **({"bucket-key": "id"} if append else {}), **options}
    return cl.Catalog(str(tmp_path)).create_table("db.t", TYPES, options=settings, **keys)


def _files(tmp_path: Path) -> list[str]:
    return sorted(Path(p).name for p in glob.glob(f"{tmp_path}/db.db/t/bucket-0/*"))


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("file_format", ["orc", "avro"])
@pytest.mark.parametrize("layout", ["key-value", "thin", "append"])
def test_every_type_round_trips(tmp_path: Path, file_format: str, layout: str) -> None:
    options = {"file.format": file_format}
    if layout == "thin":
        options["data-file.thin-mode"] = "true"
    table = _table(tmp_path, options, append=layout == "append")
    table.write(_rows())
    assert all(name.endswith(f"-0.{file_format}") for name in _files(tmp_path))
    assert _sorted(table.scan().to_arrow()) == _sorted(_rows())
    if layout != "append":
        table.write(_rows().slice(0, 1))  # a second level-0 file: the read merges both
        table.compact(full=True)
        assert _sorted(table.scan().to_arrow()) == _sorted(_rows())
    assert _sorted(table.scan(columns=["id", "row", "dec"]).to_arrow()) == \
        _sorted(_rows().select(["id", "row", "dec"]))


def test_avro_files_have_paimons_schema(tmp_path: Path) -> None:
    table = _table(tmp_path, {"file.format": "avro"})
    table.write(_rows())
    (name,) = _files(tmp_path)
    with open(f"{tmp_path}/db.db/t/bucket-0/{name}", "rb") as f:
        reader = fastavro.reader(f)
        written: Any = reader.writer_schema
        assert reader.codec == "zstandard"
    fields = {f["name"]: f["type"] for f in written["fields"]}
    assert written["name"] == "org.apache.paimon.avro.generated.record"
    assert list(fields)[:3] == ["_KEY_id", kv.SEQUENCE, kv.VALUE_KIND]
    assert fields["_KEY_id"] == "long" and fields[kv.VALUE_KIND] == "int"
    assert fields["ts3"] == ["null", {"type": "long", "logicalType": "timestamp-millis"}]
    assert fields["ts6"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert fields["ltz3"] == ["null", {"type": "long", "logicalType": "local-timestamp-millis"}]
    assert fields["dec"] == ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]
    assert fields["row"][1]["name"] == "org.apache.paimon.avro.generated.record_row"
    assert fields["imap"][1]["logicalType"] == "map" and fields["smap"][1]["type"] == "map"


def test_orc_files_hold_paimons_types(tmp_path: Path) -> None:
    table = _table(tmp_path, {"file.format": "orc"})
    table.write(_rows())
    (name,) = _files(tmp_path)
    stored = orc.ORCFile(f"{tmp_path}/db.db/t/bucket-0/{name}")
    assert stored.compression == "ZSTD"
    assert stored.schema.field("ltz3").type.tz is not None  # timestamp with local time zone
    assert stored.schema.field("dec").type == pa.decimal128(10, 2)


def test_each_level_is_written_in_its_format(tmp_path: Path) -> None:
    table = _table(tmp_path, {"file.format.per.level": "0:avro,5:orc", "file.compression.per.level": "0:none",
                              "changelog-producer": "input", "changelog-file.format": "orc"})
    table.write(_rows())
    live = table.system("files").to_pylist()
    assert [(r["level"], r["file_path"].rsplit(".", 1)[1]) for r in live] == [(0, "avro")]
    assert any(n.startswith("changelog-") and n.endswith(".orc") for n in _files(tmp_path))
    table.write(_rows().slice(0, 1))  # a second level-0 file, so the compaction rewrites both
    table.compact(full=True)
    assert [(r["level"], r["file_path"].rsplit(".", 1)[1]) for r in table.system("files").to_pylist()] == [(5, "orc")]
    assert _sorted(table.scan().to_arrow()) == _sorted(_rows())


def test_a_table_whose_format_changed_reads_each_file_by_its_own(tmp_path: Path) -> None:
    table = _table(tmp_path, {"bucket": "1", "num-sorted-run.compaction-trigger": "10"})
    rows = _rows()
    table.write(rows.slice(0, 1))
    for file_format in ("orc", "avro"):
        table.set_options({"file.format": file_format})
        table.refresh()
        table.write(rows.slice(1 if file_format == "orc" else 2, 1))
    assert {n.rsplit(".", 1)[1] for n in _files(tmp_path)} == {"parquet", "orc", "avro"}
    assert _sorted(table.scan().to_arrow()) == _sorted(rows)
    table.set_options({"file.format": "parquet"})
    table.refresh()
    table.compact(full=True)
    assert _sorted(table.scan().to_arrow()) == _sorted(rows)


def _written(tmp_path: Path, file_format: FileFormat) -> tuple[FileIO, str, str]:
    schema = kv.file_schema(pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("v", pa.string())]), ("a",))
    rows = pa.table({"_KEY_a": [1, 2], kv.SEQUENCE: [1, 2], kv.VALUE_KIND: [0, 0], "a": [1, 2], "v": ["x", "y"]},
                    schema=schema)
    file_io, root = FileIO.for_url(str(tmp_path))
    settings = FileSettings(schema_id=0, key_names=("a",), compression="zstd", zstd_level=1,
                            target_file_size=1 << 20, file_format=file_format)
    (meta,) = data_file.write(file_io, f"{root}/b", [rows], settings, level=0)
    assert meta.file_name.endswith(f".{file_format.value}") and meta.row_count == 2
    assert Path(f"{root}/b/{meta.file_name}").stat().st_size == meta.file_size
    assert (meta.min_sequence_number, meta.max_sequence_number) == (1, 2)
    return file_io, f"{root}/b/{meta.file_name}", root


@pytest.mark.parametrize(("written", "named"), [(FileFormat.PARQUET, "orc"), (FileFormat.ORC, "avro"),
                                                (FileFormat.AVRO, "parquet"), (FileFormat.PARQUET, "csv")])
def test_a_file_whose_extension_lies_is_corrupt(tmp_path: Path, written: FileFormat, named: str) -> None:
    file_io, path, _ = _written(tmp_path, written)
    schema = kv.file_schema(pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("v", pa.string())]), ("a",))
    assert data_file.read(file_io, path, schema).num_rows == 2
    lying = path.rsplit(".", 1)[0] + f".{named}"
    shutil.copy(path, lying)
    with pytest.raises(CorruptMetadataError) as info:
        data_file.read(file_io, lying, schema)
    assert info.value.file == lying
    with pytest.raises(CorruptMetadataError):
        list(data_file.read_batches(file_io, lying, schema, ["a", "v"], 1))


@pytest.mark.parametrize("file_format", [FileFormat.ORC, FileFormat.AVRO])
def test_row_ranges_and_batches_of_other_formats(tmp_path: Path, file_format: FileFormat) -> None:
    file_io, path, _ = _written(tmp_path, file_format)
    schema = kv.file_schema(pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("v", pa.string())]), ("a",))
    assert data_file.read(file_io, path, schema, ["v"], rows=(1, 2)).to_pylist() == [{"v": "y"}]
    batches: Iterator[pa.Table] = data_file.read_batches(file_io, path, schema, ["_KEY_a", "v"], 1)
    assert [b.to_pylist() for b in batches] == [[{"_KEY_a": 1, "v": "x"}], [{"_KEY_a": 2, "v": "y"}]]


@pytest.mark.parametrize(("options", "option"), [
    ({"file.format": "avro", "file.compression": "lz4"}, "file.compression"),
    ({"file.format.per.level": "0:avro", "file.compression": "brotli"}, "file.compression"),
    ({"changelog-producer": "input", "changelog-file.format": "avro", "changelog-file.compression": "lz4"},
     "changelog-file.compression"),
])
def test_a_compression_a_format_cannot_write_is_refused(tmp_path: Path, options: dict[str, str], option: str) -> None:
    table = _table(tmp_path, options)
    with pytest.raises(OptionError, match="not written with") as info:
        table.write(_rows())
    assert info.value.option == option
    assert table.latest_snapshot() is None and _files(tmp_path) == []


def test_avro_refuses_nanosecond_timestamps(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("ns"))])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["id"],
                                                   options={"bucket": "1", "file.format": "avro"})
    with pytest.raises(SchemaError, match="Avro data files cannot hold") as info:
        table.write(pa.table({"id": [1], "ts": [1]}, schema=schema))
    assert info.value.column == "ts"
    assert table.latest_snapshot() is None and _files(tmp_path) == []


def test_manifest_format_orc_opens_and_refuses_writes(tmp_path: Path) -> None:
    table = _table(tmp_path, {})
    table.write(_rows())
    table.set_options({"manifest.format": "orc"})
    table.refresh()
    assert _sorted(table.scan().to_arrow()) == _sorted(_rows())  # Avro manifests read by their content
    with pytest.raises(OptionError, match="Avro manifests only") as info:
        table.write(_rows())
    assert info.value.option == "manifest.format"
    assert len(table.snapshots()) == 1


@pytest.mark.parametrize("file_format", ["orc", "avro"])
def test_deletion_vectors_and_lookup_changelog_over_other_formats(tmp_path: Path, file_format: str) -> None:
    table = _table(tmp_path, {"file.format": file_format, "deletion-vectors.enabled": "true",
                              "changelog-producer": "lookup"})
    rows = _rows()
    table.write(rows)
    table.write(rows.slice(0, 2).set_column(7, "s", pa.array(["new", "newer"])))  # updates marked in vectors
    table.delete("id = 3")
    expected = _sorted(rows.slice(0, 2).set_column(7, "s", pa.array(["new", "newer"])))
    assert _sorted(table.scan().to_arrow()) == expected
    assert any(n.startswith("index-") for n in (p.name for p in (tmp_path / "db.db" / "t" / "index").iterdir()))
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.changes(1, latest.id, columns=["id", "s"]).to_arrow().to_pylist()
    assert {"id": 2, "s": "newer"} in [{"id": r["id"], "s": r["s"]} for r in changes]
    assert 3 in [r["id"] for r in changes]  # the lookup changelog's -D of the deleted key


@pytest.mark.parametrize("file_format", [FileFormat.ORC, FileFormat.AVRO])
def test_files_roll_at_the_target_size(tmp_path: Path, file_format: FileFormat) -> None:
    schema = kv.file_schema(pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("v", pa.string())]), ("a",))
    n = 120_000
    rows = pa.table({"_KEY_a": range(n), kv.SEQUENCE: range(n), kv.VALUE_KIND: pa.array([0] * n, pa.int8()),
                     "a": range(n), "v": [f"value-{i * 7919 % 1000003}" for i in range(n)]}, schema=schema)
    file_io, root = FileIO.for_url(str(tmp_path))
    settings = FileSettings(schema_id=0, key_names=("a",), compression="none", zstd_level=1,
                            target_file_size=1 << 20, file_format=file_format)
    metas = data_file.write(file_io, f"{root}/b", [rows], settings, level=0)
    assert len(metas) > 1 and sum(m.row_count for m in metas) == n
    back = pa.concat_tables(data_file.read(file_io, f"{root}/b/{m.file_name}", schema) for m in metas)
    assert back.equals(rows)
