"""TIMESTAMP(7..9) and BINARY(n) in data files as Apache Paimon stores them (INT96 and
BYTE_ARRAY; ``parquet_layout``, ``parquet_footer``), nested ones too, files of the earlier
layout (INT64 nanoseconds, FIXED_LEN_BYTE_ARRAY) read alike, and nanosecond partitions and
keys that decode, name directories, prune and compact exactly (Java Paimon's side of these
files: ``tests/integration/test_paimon_parquet_layout.py``)."""

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


NESTED = pa.schema([
    pa.field("k", pa.int64(), nullable=False), pa.field("kt", NANOS, nullable=False),
    pa.field("kb", pa.binary(2), nullable=False),
    ("ms", pa.timestamp("ms")), ("us", pa.timestamp("us", tz="UTC")), ("ns", NANOS), ("ltz", LTZ),
    ("b4", pa.binary(4)), ("bytes", pa.binary()),
    ("l", pa.list_(NANOS)), ("s", pa.struct([("t", LTZ), ("b", pa.binary(2)), ("u", pa.timestamp("us"))])),
    ("m", pa.map_(pa.binary(2), NANOS)),
])


def _nested_rows(n: int) -> pa.Table:
    stamps = [None if i % 7 == 3 else P + i * 86_400_000_000_001 * (-1) ** i for i in range(n)]
    return pa.table({
        "k": list(range(n)), "kt": [P - i for i in range(n)], "kb": [bytes([i % 256, 7]) for i in range(n)],
        "ms": pa.array([None if s is None else s // 1_000_000 for s in stamps], pa.timestamp("ms")),
        "us": pa.array([None if s is None else s // 1000 for s in stamps], pa.timestamp("us", tz="UTC")),
        "ns": pa.array(stamps, NANOS), "ltz": pa.array(stamps[::-1], LTZ),
        "b4": [None if i % 5 == 0 else bytes([i % 256, 0, 1, 2]) for i in range(n)],
        "bytes": [bytes(i % 9) for i in range(n)],
        "l": [None if i % 6 == 0 else [s for s in stamps[i:i + i % 4]] for i in range(n)],
        "s": [None if i % 8 == 0 else {"t": stamps[i], "b": b"ab", "u": 5} for i in range(n)],
        "m": [None if i % 9 == 0 else [(b"m" + bytes([j]), stamps[j]) for j in range(i % 3)] for i in range(n)],
    }, schema=NESTED)


@pytest.mark.parametrize("thin", [False, True])
def test_nanoseconds_are_int96_and_fixed_binary_is_byte_array_in_every_column(tmp_path: Path, thin: bool) -> None:
    """Keys, values and the leaves of lists, structs and maps: TIMESTAMP(9) and
    TIMESTAMP_LTZ(9) are INT96, BINARY(n) BYTE_ARRAY, TIMESTAMP(3)/(6) INT64, in files of one
    or several row groups written from sliced batches, flushed and compacted, thin or not;
    every value reads back exact."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", NESTED, primary_keys=["k", "kt", "kb"],
        options={"bucket": "2", "data-file.thin-mode": str(thin).lower(), "changelog-producer": "input",
                 "target-file-size": "64kb"})
    rows = _nested_rows(6000)
    table.write(rows.slice(17, 150))
    table.write(rows.slice(167))
    table.write(rows.slice(0, 17))
    expected = sorted(_exact(rows), key=lambda r: r["k"])
    assert sorted(_exact(table.scan().to_arrow()), key=lambda r: r["k"]) == expected
    table.compact(full=True)
    assert sorted(_exact(table.scan().to_arrow()), key=lambda r: r["k"]) == expected
    files = sorted(Path(tmp_path, "db.db", "t").glob("**/*.parquet"))
    assert any(f.name.startswith("changelog-") for f in files)
    assert any(pq.ParquetFile(f).metadata.num_row_groups > 1 for f in files)
    int96 = {"ns", "ltz", "l.list.element", "s.t", "m.key_value.value"} | (set() if thin else {"_KEY_kt"})
    byte_array = {"bytes", "b4", "s.b", "m.key_value.key"} | (set() if thin else {"_KEY_kb"})
    for path in files:
        leaves = _leaves(path)
        assert {c for c, t in leaves.items() if t == "INT96"} == int96 | {"kt"}, path.name
        assert {c for c, t in leaves.items() if t == "BYTE_ARRAY"} == byte_array | {"kb"}, path.name
        assert {leaves[c] for c in ("ms", "us", "s.u")} == {"INT64"}
        assert "FIXED_LEN_BYTE_ARRAY" not in leaves.values()


def _old_layout(path: Path, schema: pa.Schema) -> None:
    """Rewrite a data file as changelake wrote it before Paimon's layout: nanoseconds as
    INT64, BINARY(n) as FIXED_LEN_BYTE_ARRAY, the Arrow schema stored."""
    data = pq.read_table(path)
    types = {f.name: f.type for f in schema} | {f"_KEY_{f.name}": f.type for f in schema}
    data = data.cast(pa.schema([f.with_type(types.get(f.name, f.type)) for f in data.schema]))
    pq.write_table(data, path, compression="zstd", write_statistics=False, store_schema=True)


def test_files_of_the_earlier_layout_still_read(tmp_path: Path) -> None:
    """Files with INT64 nanoseconds and FIXED_LEN_BYTE_ARRAY (changelake's before) read as
    before, merge with files of Paimon's layout, and compact into Paimon's layout."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", NESTED, primary_keys=["k", "kt", "kb"],
                                                   options={"bucket": "2"})
    rows = _nested_rows(120)
    table.write(rows.slice(0, 80))
    table_dir = Path(tmp_path, "db.db", "t")
    for path in _data_files(table_dir):
        _old_layout(path, NESTED)
        assert {_leaves(path)[c] for c in ("ns", "_KEY_kt", "l.list.element")} == {"INT64"}
        assert {_leaves(path)[c] for c in ("b4", "_KEY_kb")} == {"FIXED_LEN_BYTE_ARRAY"}
    assert sorted(_exact(table.scan().to_arrow()), key=lambda r: r["k"]) == \
        sorted(_exact(rows.slice(0, 80)), key=lambda r: r["k"])
    changed = rows.slice(60).set_column(NESTED.get_field_index("bytes"), "bytes", pa.array([b"new"] * 60))
    table.write(changed)
    expected = sorted(_exact(pa.concat_tables([rows.slice(0, 60), changed])), key=lambda r: r["k"])
    assert sorted(_exact(table.scan().to_arrow()), key=lambda r: r["k"]) == expected
    table.compact(full=True)
    assert sorted(_exact(table.scan().to_arrow()), key=lambda r: r["k"]) == expected
    live = {f["file_path"].rsplit("/", 1)[-1] for f in table.system("files").to_pylist()}
    assert all(_leaves(path)["ns"] == "INT96" for path in _data_files(table_dir) if path.name in live)


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
