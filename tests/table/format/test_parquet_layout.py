"""Nanosecond partitions and keys that decode, name directories, prune and compact exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import changelake as cl

NANOS = pa.timestamp("ns")
LTZ = pa.timestamp("ns", tz="UTC")
P = 1_700_000_000_123_456_789  # 2023-11-14 22:13:20.123456789


def _leaves(path: Path) -> dict[str, str]:
    """The physical type of every leaf column of a Parquet file, by path."""
    schema = pq.ParquetFile(path).schema
    return {schema.column(i).path: schema.column(i).physical_type for i in range(len(schema))}


def _data_files(table_dir: Path) -> list[Path]:
    return sorted(table_dir.glob("**/data-*.parquet"))


def _exact(data: pa.Table) -> list[dict[str, Any]]:
    """Rows with nanosecond timestamps as ints, nested ones too (to_pylist makes them datetimes)."""
    def ints(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t) and t.unit == "ns":
            return pa.int64()
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(ints(f.type)) for f in t])
        if pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(ints(t.value_type)))
        if pa.types.is_map(t):
            return pa.map_(t.key_type, t.item_field.with_type(ints(t.item_type)))
        return t
    return data.cast(pa.schema([f.with_type(ints(f.type)) for f in data.schema])).to_pylist()


PARTED = pa.schema([pa.field("p", NANOS, nullable=False), pa.field("k", NANOS, nullable=False), ("v", pa.int64())])


def test_nanosecond_partitions_and_keys_are_exact(tmp_path: Path) -> None:
    """A TIMESTAMP(9) partition's directory is named to the nanosecond, as Java Paimon names
    it (``LocalDateTime.toString``); its value and keys read back, filter (pruned by the
    partition and by the files' key bounds) and show in the system tables to the nanosecond."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", PARTED, primary_keys=["p", "k"], partition_keys=["p"],
                                                   options={"bucket": "1"})
    table.write(pa.table({"p": pa.array([P, P], NANOS), "k": pa.array([P + 1, P + 501], NANOS), "v": [1, 2]}))
    assert [d.name for d in Path(tmp_path, "db.db", "t").glob("p=*")] == ["p=2023-11-14T22%3A13%3A20.123456789"]
    assert _exact(table.scan().to_arrow()) == [{"p": P, "k": P + 1, "v": 1}, {"p": P, "k": P + 501, "v": 2}]
    assert _exact(table.scan(filter=pc.field("k") == pa.scalar(P + 501, NANOS)).to_arrow()) == \
        [{"p": P, "k": P + 501, "v": 2}]
    assert table.scan(filter=pc.field("p") == pa.scalar(P, NANOS)).to_arrow().num_rows == 2
    assert table.scan(filter=pc.field("p") == pa.scalar(P + 1, NANOS)).to_arrow().num_rows == 0
    [file] = table.system("files").to_pylist()
    assert (file["partition"], file["min_key"], file["max_key"]) == (
        "{2023-11-14 22:13:20.123456789}", "[2023-11-14T22:13:20.123456790]", "[2023-11-14T22:13:20.123457290]")


def test_full_compaction_of_keys_nanoseconds_apart(tmp_path: Path) -> None:
    """Keys within the same microsecond are ordered by their nanoseconds: a full compaction
    that rolls them over several files does not find its own files overlapping."""
    schema = pa.schema([pa.field("k", NANOS, nullable=False), ("v", pa.string())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"],
                                                   options={"bucket": "1", "target-file-size": "1kb"})
    keys = [P + i for i in range(5000)]
    table.write(pa.table({"k": pa.array(keys, NANOS), "v": ["x" * 50] * len(keys)}))
    table.write(pa.table({"k": pa.array(keys[::7], NANOS), "v": ["y"] * len(keys[::7])}))
    table.compact(full=True)
    files = table.system("files").to_pylist()
    assert len(files) > 1 and {f["level"] for f in files} == {5}
    assert _exact(table.scan().to_arrow().sort_by("k")) == \
        [{"k": k, "v": "y" if i % 7 == 0 else "x" * 50} for i, k in enumerate(keys)]


def test_compaction_of_a_named_nanosecond_partition(tmp_path: Path) -> None:
    """``compact(partitions=...)`` finds a TIMESTAMP(9) partition by its nanoseconds (an int)
    or, for one without nanoseconds past the microsecond, by a datetime; a value of another
    type is refused, naming the partition."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", PARTED, primary_keys=["p", "k"], partition_keys=["p"],
                                                   options={"bucket": "1"})
    whole = 1_700_000_000_123_456_000
    for _ in range(2):
        table.write(pa.table({"p": pa.array([P, whole], NANOS), "k": pa.array([1, 2], NANOS), "v": [1, 2]}))

    def levels() -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for f in table.system("files").to_pylist():
            found.setdefault(f["partition"], set()).add(f["level"])
        return found

    table.compact(full=True, partitions=[{"p": P}])
    assert levels() == {"{2023-11-14 22:13:20.123456789}": {5}, "{2023-11-14 22:13:20.123456000}": {0}}
    table.compact(full=True, partitions=[{"p": pa.scalar(whole, NANOS).as_py().to_pydatetime()}])
    assert levels() == {"{2023-11-14 22:13:20.123456789}": {5}, "{2023-11-14 22:13:20.123456000}": {5}}
    with pytest.raises(cl.errors.ScanError, match="partition"):
        table.compact(full=True, partitions=[{"p": "yesterday"}])
