"""table.system(name): Paimon 1.4's system tables, column for column, and the values of a table
with known data."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pyarrow as pa
import pytest

import changelake
from changelake.api import paimon_text

# Column order of Paimon 1.4's org.apache.paimon.table.system.*Table TABLE_TYPEs.
PAIMON_COLUMNS = {
    "snapshots": ["snapshot_id", "schema_id", "commit_user", "commit_identifier", "commit_kind", "commit_time",
                  "base_manifest_list", "delta_manifest_list", "changelog_manifest_list", "total_record_count",
                  "delta_record_count", "changelog_record_count", "watermark", "next_row_id"],
    "schemas": ["schema_id", "fields", "partition_keys", "primary_keys", "options", "comment", "update_time"],
    "options": ["key", "value"],
    "tags": ["tag_name", "snapshot_id", "schema_id", "commit_time", "record_count", "create_time",
             "time_retained"],
    "consumers": ["consumer_id", "next_snapshot_id"],
    "manifests": ["file_name", "file_size", "num_added_files", "num_deleted_files", "schema_id",
                  "min_partition_stats", "max_partition_stats", "min_row_id", "max_row_id"],
    "files": ["partition", "bucket", "file_path", "file_format", "schema_id", "level", "record_count",
              "file_size_in_bytes", "min_key", "max_key", "null_value_counts", "min_value_stats",
              "max_value_stats", "min_sequence_number", "max_sequence_number", "creation_time", "deleteRowCount",
              "file_source", "first_row_id", "write_cols"],
    "partitions": ["partition", "record_count", "file_size_in_bytes", "file_count", "last_update_time",
                   "created_at", "created_by", "updated_by", "options"],
    "buckets": ["partition", "bucket", "record_count", "file_size_in_bytes", "file_count", "last_update_time"],
    "audit_log": ["rowkind", "p", "k", "v"],
}

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    ("v", pa.float64())])


def _table(tmp_path: Path) -> changelake.Table:
    table = changelake.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"], options={"bucket": "2"})
    table.write(pa.table({"p": ["b", "a", "a"], "k": [3, 9, 1], "v": [2.0, None, 1.5]}, schema=SCHEMA))
    return table


@pytest.mark.parametrize("name", list(PAIMON_COLUMNS))
def test_columns_are_paimons_on_empty_and_written_tables(tmp_path: Path, name: str) -> None:
    empty = changelake.Catalog(str(tmp_path)).create_table("db.e", SCHEMA, primary_keys=["p", "k"],
                                                             partition_keys=["p"])
    assert empty.system(name).column_names == PAIMON_COLUMNS[name]
    written = _table(tmp_path)
    assert written.system(name).column_names == PAIMON_COLUMNS[name]
    assert written.system(name).schema == empty.system(name).schema


def test_files_key_ranges_partitions_and_stats(tmp_path: Path) -> None:
    table = _table(tmp_path)
    files = sorted(table.system("files").to_pylist(), key=lambda r: (r["partition"], r["bucket"]))
    assert [r["partition"] for r in files] == sorted(r["partition"] for r in files)
    a_rows = [r for r in files if r["partition"] == "{a}"]
    keys = sorted((r["min_key"], r["max_key"]) for r in a_rows)
    # one file per bucket; keys 1 and 9 of partition a: each file's range is its own keys
    assert {k for pair in keys for k in pair} <= {"[1]", "[9]"}
    assert sum(r["record_count"] for r in a_rows) == 2
    first = files[0]
    assert first["file_format"] == "parquet"
    assert first["file_source"] == "APPEND"
    assert first["file_path"].endswith(".parquet") and "/p=" in first["file_path"]
    # value statistics (metadata.stats-mode truncate(16)) of every column: bounds leave nulls out
    stats = [(r["partition"], r["null_value_counts"], r["min_value_stats"], r["max_value_stats"]) for r in files]
    assert sorted(stats) == [
        ("{a}", "{k=0, p=0, v=0}", "{k=1, p=a, v=1.5}", "{k=1, p=a, v=1.5}"),
        ("{a}", "{k=0, p=0, v=1}", "{k=9, p=a, v=null}", "{k=9, p=a, v=null}"),
        ("{b}", "{k=0, p=0, v=0}", "{k=3, p=b, v=2.0}", "{k=3, p=b, v=2.0}"),
    ]
    assert first["creation_time"] is not None and first["deleteRowCount"] == 0


def test_a_column_added_later_counts_every_old_row_null(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.update_schema() as update:
        update.add_column("w", pa.int32())
    files = table.system("files").to_pylist()
    assert {r["null_value_counts"].rpartition(", ")[2] for r in files} == {f"w={r['record_count']}}}"
                                                                           for r in files}


def test_manifests_partitions_and_buckets(tmp_path: Path) -> None:
    table = _table(tmp_path)
    manifests = table.system("manifests").to_pylist()
    assert [(m["min_partition_stats"], m["max_partition_stats"]) for m in manifests] == [("{a}", "{b}")]
    partitions = table.system("partitions").to_pylist()
    assert [(p["partition"], p["record_count"]) for p in partitions] == [("p=a", 2), ("p=b", 1)]
    assert {p["created_by"] for p in partitions} == {None}
    buckets = table.system("buckets").to_pylist()
    assert [b["partition"] for b in buckets] == sorted(b["partition"] for b in buckets)
    assert sum(b["record_count"] for b in buckets) == 3


def test_tag_with_retention_records_creation_time(tmp_path: Path) -> None:
    table = _table(tmp_path)
    before = dt.datetime.now().replace(microsecond=0)
    table.create_tag("kept", time_retained=dt.timedelta(hours=36))
    table.create_tag("plain")
    rows = {r["tag_name"]: r for r in table.system("tags").to_pylist()}
    assert rows["kept"]["time_retained"] == "PT36H"
    assert before <= rows["kept"]["create_time"] <= dt.datetime.now()
    assert rows["plain"]["create_time"] is None and rows["plain"]["time_retained"] is None
    # Paimon's Tag JSON: LocalDateTime as an array, Duration as decimal seconds
    written = json.loads((tmp_path / "db.db" / "t" / "tag" / "tag-kept").read_text())
    assert written["tagTimeRetained"] == 129600
    assert dt.datetime(*written["tagCreateTime"][:6]) == rows["kept"]["create_time"].replace(microsecond=0)
    assert "tagCreateTime" not in json.loads((tmp_path / "db.db" / "t" / "tag" / "tag-plain").read_text())
    assert table.tag("kept").id == table.tag("plain").id == 1


def test_schemas_are_flat_json_and_snapshots_carry_next_row_id(tmp_path: Path) -> None:
    table = _table(tmp_path)
    schema = table.system("schemas").to_pylist()[0]
    assert schema["primary_keys"] == '["p","k"]'
    assert '"description"' not in schema["fields"]
    assert table.system("snapshots")["next_row_id"].to_pylist() == [None]


def test_values_render_as_java_prints_them() -> None:
    assert [paimon_text.java_floating(v, single=False) for v in (1.0, 0.001, 1e7, 1.5e-5, -2.5)] == [
        "1.0", "0.001", "1.0E7", "1.5E-5", "-2.5"]
    assert paimon_text.java_floating(0.1, single=True) == "0.1"
    assert paimon_text.local_date_time(dt.datetime(2024, 1, 2, 3, 4)) == "2024-01-02T03:04"
    assert paimon_text.local_date_time(dt.datetime(2024, 1, 2, 3, 4, 0, 500000)) == "2024-01-02T03:04:00.500"
    assert paimon_text.duration(dt.timedelta(minutes=90)) == "PT1H30M"
    assert paimon_text.duration(dt.timedelta(seconds=0.5)) == "PT0.5S"
    assert paimon_text.internal_object(dt.date(1970, 1, 11), pa.date32()) == "10"
    assert paimon_text.internal_object(decimal.Decimal("1.20"), pa.decimal128(5, 2)) == "1.20"
    assert paimon_text.cast_to_string(dt.datetime(2024, 1, 2, 3, 4, 5), pa.timestamp("ms")) == \
        "2024-01-02 03:04:05.000"
    assert paimon_text.object_array([1, "x", None], [pa.int32(), pa.string(), pa.int64()]) == "[1, x, null]"
    assert paimon_text.sorted_map([("b", "1"), ("a", "x")]) == "{a=x, b=1}"
