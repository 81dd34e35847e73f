"""Round trips through changelake primary-key tables: every supported type as value, key and
partition column, time travel, streaming reads, filters and projections, input kinds, and the
Paimon layout on disk."""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.errors import SnapshotNotFoundError
from changelake.table.read.live_files import live_entries

UTC = dt.UTC

# name -> (arrow type, distinct non-null sample values, extremes and edge cases included)
ATOMIC: dict[str, tuple[pa.DataType, list[Any]]] = {
    "bool": (pa.bool_(), [True, False]),
    "int8": (pa.int8(), [-128, 127, 0, -1]),
    "int16": (pa.int16(), [-32768, 32767, 0, 7]),
    "int32": (pa.int32(), [-(2**31), 2**31 - 1, 0, 42]),
    "int64": (pa.int64(), [-(2**63), 2**63 - 1, 0, 1 << 40]),
    "float32": (pa.float32(), [-1.5, 0.0, 3.25, 2.0**100]),
    "float64": (pa.float64(), [-1e300, 0.0, 2.5, 1e-300]),
    "string": (pa.string(), ["", "a", "a/b=c%", "more than seven bytes é 中文"]),
    "binary": (pa.binary(), [b"", b"\x00\xff", b"1234567", b"12345678 and longer"]),
    "date32": (pa.date32(), [dt.date(1970, 1, 1), dt.date(1969, 12, 31), dt.date(2024, 2, 29), dt.date(9999, 12, 31)]),
    "timestamp_ms": (
        pa.timestamp("ms"),
        [
            dt.datetime(1970, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999000),
            dt.datetime(2024, 2, 29, 12, 34, 56, 789000),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999000),
        ],
    ),
    "timestamp_us": (
        pa.timestamp("us"),
        [
            dt.datetime(1970, 1, 1),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
            dt.datetime(2024, 2, 29, 12, 34, 56, 789123),
            dt.datetime(2024, 2, 29, 12, 34, 56, 789124),
        ],
    ),
    "timestamp_ms_utc": (
        pa.timestamp("ms", tz="UTC"),
        [
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
            dt.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=UTC),
            dt.datetime(3000, 1, 1, 0, 0, 0, 1000, tzinfo=UTC),
        ],
    ),
    "timestamp_us_utc": (
        pa.timestamp("us", tz="UTC"),
        [
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(2024, 2, 29, 12, 34, 56, 789123, tzinfo=UTC),
            dt.datetime(2024, 2, 29, 12, 34, 56, 789124, tzinfo=UTC),
        ],
    ),
    "decimal_10_2": (
        pa.decimal128(10, 2),
        [Decimal("-99999999.99"), Decimal("0.00"), Decimal("12.34"), Decimal("99999999.99")],
    ),
    "decimal_38_6": (
        pa.decimal128(38, 6),
        [
            Decimal("-" + "9" * 32 + ".999999"),
            Decimal("0.000001"),
            Decimal("1.500000"),
            Decimal("9" * 32 + ".999999"),
        ],
    ),
}

NESTED: dict[str, tuple[pa.DataType, list[Any]]] = {
    "list_int64": (pa.list_(pa.int64()), [[1, 2, 3], [], [None, -(2**63)], [2**63 - 1]]),
    "struct": (
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        [{"a": 1, "b": "x"}, {"a": None, "b": None}, {"a": -5, "b": "longer than seven"}, {"a": 0, "b": ""}],
    ),
}

ALL_TYPES = {**ATOMIC, **NESTED}

PARTITIONED = pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
BUCKETS = pytest.mark.parametrize("buckets", [1, 4], ids=["bucket1", "bucket4"])


# -- helpers ----------------------------------------------------------------------------------


def sort_rows(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys]).combine_chunks()


def assert_same_rows(actual: pa.Table, expected: pa.Table, keys: list[str]) -> None:
    """Same schema as the table and the same rows, compared sorted by key."""
    expected = expected.select(actual.schema.names).cast(actual.schema)
    got, want = sort_rows(actual, keys), sort_rows(expected, keys)
    assert got.to_pylist() == want.to_pylist()
    assert got.equals(want)


def new_table(tmp_path: Path, schema: pa.Schema, primary_keys: list[str], partition_keys: list[str] | None = None,
              buckets: int = 1, name: str = "db.t", options: dict[str, str] | None = None) -> cl.Table:
    catalog = cl.Catalog(str(tmp_path / "warehouse"))
    return catalog.create_table(name, schema=schema, primary_keys=primary_keys, partition_keys=partition_keys or [],
                                options={"bucket": str(buckets), **(options or {})})


def data_files(table: cl.Table) -> list[Path]:
    return sorted(Path(table.location).rglob("data-*.parquet"))


def with_nulls(values: list[Any], n: int, offset: int) -> list[Any]:
    """``n`` values cycling through ``values``, with a null in every third row (shifted by offset)."""
    return [None if (i + offset) % 3 == 0 else values[i % len(values)] for i in range(n)]


# -- every type as a value column ---------------------------------------------------------------


def value_schema(partitioned: bool) -> tuple[pa.Schema, list[str], list[str]]:
    fields = [pa.field("id", pa.int64(), nullable=False)]
    if partitioned:
        fields.insert(0, pa.field("dt", pa.string(), nullable=False))
    fields += [pa.field(name, t) for name, (t, _) in ALL_TYPES.items()]
    keys = ["dt", "id"] if partitioned else ["id"]
    return pa.schema(fields), keys, (["dt"] if partitioned else [])


def value_rows(schema: pa.Schema, ids: list[int], shift: int) -> pa.Table:
    columns: dict[str, Any] = {}
    for field in schema:
        if field.name == "dt":
            columns["dt"] = pa.array(["2024-01-01" if i % 2 else "2024-01-02" for i in ids])
        elif field.name == "id":
            columns["id"] = pa.array(ids, pa.int64())
        else:
            values = ALL_TYPES[field.name][1]
            offset = list(ALL_TYPES).index(field.name) + shift
            rotated = values[shift % len(values):] + values[: shift % len(values)]
            columns[field.name] = pa.array(with_nulls(rotated, len(ids), offset), field.type)
    return pa.table(columns)


@PARTITIONED
@BUCKETS
def test_every_type_as_value_column(tmp_path: Path, partitioned: bool, buckets: int) -> None:
    schema, keys, parts = value_schema(partitioned)
    table = new_table(tmp_path, schema, keys, parts, buckets)

    first = value_rows(schema, list(range(12)), shift=0)
    table.write(first)
    assert_same_rows(table.scan().to_arrow(), first, keys)

    # Overwrite half the keys with different values (and different null positions), add new keys.
    second = value_rows(schema, list(range(6, 18)), shift=1)
    table.write(second)
    expected = pa.concat_tables([first.slice(0, 6), second])
    assert_same_rows(table.scan().to_arrow(), expected, keys)

    # Every value column came back in its table type, nullable, tz-aware ones in UTC.
    result_schema = table.scan().to_arrow().schema
    for name, (t, _) in ALL_TYPES.items():
        field = result_schema.field(name)
        assert field.nullable
        if pa.types.is_list(t):
            assert pa.types.is_list(field.type) and field.type.value_type == pa.int64()
        else:
            assert field.type == t, name

    # A fresh handle on the table (catalog and path) reads the same.
    reopened = cl.Catalog(str(tmp_path / "warehouse")).get_table("db.t")
    assert_same_rows(reopened.scan().to_arrow(), expected, keys)
    assert_same_rows(cl.open_table(table.location).scan().to_arrow(), expected, keys)


def test_non_utc_timezone_reads_back_as_utc(tmp_path: Path) -> None:
    tokyo = dt.timezone(dt.timedelta(hours=9))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ts", pa.timestamp("us", tz="Asia/Tokyo"))])
    table = new_table(tmp_path, schema, ["id"])
    instants = [dt.datetime(2024, 1, 1, 9, 0, 0, 1, tzinfo=tokyo), None, dt.datetime(1960, 6, 1, tzinfo=tokyo)]
    table.write(pa.table({"id": [1, 2, 3], "ts": pa.array(instants, pa.timestamp("us", tz="Asia/Tokyo"))}))
    result = sort_rows(table.scan().to_arrow(), ["id"])
    assert result.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert result.column("ts").to_pylist() == [
        dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC), None, dt.datetime(1960, 5, 31, 15, tzinfo=UTC)
    ]


# -- every atomic type as a key column ---------------------------------------------------------


@pytest.mark.parametrize("type_name", list(ATOMIC))
@PARTITIONED
@BUCKETS
def test_atomic_type_as_key_column(tmp_path: Path, type_name: str, partitioned: bool, buckets: int) -> None:
    t, values = ATOMIC[type_name]
    fields = [pa.field("k", t, nullable=False), pa.field("v", pa.int64()), pa.field("s", pa.string())]
    if partitioned:
        fields.insert(0, pa.field("dt", pa.string(), nullable=False))
    keys = ["dt", "k"] if partitioned else ["k"]
    table = new_table(tmp_path, pa.schema(fields), keys, ["dt"] if partitioned else [], buckets)

    def rows(key_values: list[Any], v: list[int | None], dts: list[str]) -> pa.Table:
        data = {"k": pa.array(key_values, t), "v": pa.array(v, pa.int64()), "s": [f"s{x}" for x in v]}
        return pa.table({"dt": dts, **data} if partitioned else data)

    n = len(values)
    dts = ["p1"] * n
    first = rows(values, list(range(n)), dts)
    table.write(first)
    assert_same_rows(table.scan().to_arrow(), first, keys)

    # Update every key in reverse order in a second commit: the merge must see the keys as equal
    # across files, whatever the type.
    second = rows(values[::-1], [100 + i for i in range(n)], dts)
    table.write(second)
    assert_same_rows(table.scan().to_arrow(), second, keys)

    # The same keys in another partition are other rows.
    if partitioned:
        other = rows(values, [200 + i for i in range(n)], ["p2"] * n)
        table.write(other)
        assert_same_rows(table.scan().to_arrow(), pa.concat_tables([second, other]), keys)

    # Delete the first key of p1; a filter on each key value finds exactly its rows (key-stats
    # pruning must not drop files whose key range holds the value).
    table.write(rows(values[:1], [0], dts[:1]).append_column("rowkind", pa.array(["-D"])))
    model = {("p1", k): v for k, v in zip(values[::-1], range(100, 100 + n), strict=True)}
    if partitioned:
        model |= {("p2", k): 200 + i for i, k in enumerate(values)}
    del model[("p1", values[0])]
    latest = table.scan().to_arrow()
    assert latest.num_rows == len(model)
    for value in values:
        found = table.scan(filter=pc.field("k") == pa.scalar(value, t)).to_arrow()
        assert sorted(found.column("v").to_pylist()) == sorted(v for (_, k), v in model.items() if k == value)
        assert set(found.column("k").to_pylist()) <= {value}


def test_composite_key_of_many_types(tmp_path: Path) -> None:
    names = [n for n in ATOMIC if n != "bool"]
    fields = [pa.field(n, ATOMIC[n][0], nullable=False) for n in names] + [pa.field("v", pa.int64())]
    table = new_table(tmp_path, pa.schema(fields), names, buckets=4)
    n = 4
    data = pa.table({**{name: pa.array(ATOMIC[name][1], ATOMIC[name][0]) for name in names}, "v": range(n)})
    table.write(data)
    table.write(data.set_column(len(names), "v", pa.array(range(10, 10 + n), pa.int64())))
    result = table.scan().to_arrow()
    assert sorted(result.column("v").to_pylist()) == list(range(10, 10 + n))
    assert_same_rows(result, data.set_column(len(names), "v", pa.array(range(10, 10 + n), pa.int64())), ["v"])


def test_nan_float_key_is_a_single_key(tmp_path: Path) -> None:
    """NaN is a value like any other for a primary key: writing it twice keeps one row, and it
    can be deleted."""
    schema = pa.schema([pa.field("k", pa.float64(), nullable=False), pa.field("v", pa.int64())])
    table = new_table(tmp_path, schema, ["k"])
    table.write(pa.table({"k": [float("nan"), float("nan"), 1.0], "v": [1, 2, 3]}))
    assert sorted(table.scan().to_arrow().column("v").to_pylist()) == [2, 3]
    table.write(pa.table({"k": [float("nan")], "v": [4]}))
    assert sorted(table.scan().to_arrow().column("v").to_pylist()) == [3, 4]
    table.write(pa.table({"k": [float("nan")], "v": [None], "rowkind": ["-D"]}))
    assert table.scan().to_arrow().column("v").to_pylist() == [3]


# -- every atomic type as a partition column ---------------------------------------------------


# Paimon's directory names for some partition values (Hive escaping; blank -> default name).
PARTITION_DIR_NAMES = {
    "bool": {"p=true", "p=false"},
    "int32": {"p=-2147483648", "p=2147483647", "p=0", "p=42"},
    "string": {"p=__DEFAULT_PARTITION__", "p=a", "p=a%2Fb%3Dc%25", "p=more than seven bytes é 中文"},
    # partition.legacy-name (default true): dates are day numbers, as Java Paimon names them.
    "date32": {"p=0", "p=-1", "p=19782", "p=2932896"},
    "decimal_10_2": {"p=-99999999.99", "p=0.00", "p=12.34", "p=99999999.99"},
}


@pytest.mark.parametrize("type_name", list(ATOMIC))
@BUCKETS
def test_atomic_type_as_partition_column(tmp_path: Path, type_name: str, buckets: int) -> None:
    t, values = ATOMIC[type_name]
    schema = pa.schema([pa.field("p", t, nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.string())])
    table = new_table(tmp_path, schema, ["p", "id"], ["p"], buckets)
    n = 3 * len(values)
    part_values = [values[i % len(values)] for i in range(n)]
    first = pa.table({"p": pa.array(part_values, t), "id": pa.array([i // len(values) for i in range(n)], pa.int64()),
                      "v": with_nulls([f"v{i}" for i in range(n)], n, 0)})
    table.write(first)
    assert_same_rows(table.scan().to_arrow(), first, ["p", "id"])

    # One partition directory per partition value, with the bucket directories inside it.
    partition_dirs = {f.parent.parent for f in data_files(table)}
    assert all(d.name.startswith("p=") for d in partition_dirs)
    assert all(re.fullmatch(r"bucket-\d+", f.parent.name) for f in data_files(table))
    assert len(partition_dirs) == len(values)
    if type_name in PARTITION_DIR_NAMES:
        assert {d.name for d in partition_dirs} == PARTITION_DIR_NAMES[type_name]

    # Upsert one id in every partition; read it back, and filter one partition.
    update = pa.table({"p": pa.array(values, t), "id": pa.array([0] * len(values), pa.int64()),
                       "v": [f"new{i}" for i in range(len(values))]})
    table.write(update)
    expected = pa.concat_tables([first.filter(pc.field("id") != 0), update])
    assert_same_rows(table.scan().to_arrow(), expected, ["p", "id"])
    for value in values:
        chosen = table.scan(filter=pc.field("p") == pa.scalar(value, t)).to_arrow()
        assert_same_rows(chosen, expected.filter(pc.field("p") == pa.scalar(value, t)), ["p", "id"])


# -- time travel ---------------------------------------------------------------------------------


def test_time_travel_by_snapshot_tag_and_timestamp(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.string())])
    table = new_table(tmp_path, schema, ["dt", "id"], ["dt"], buckets=4)
    assert table.latest_snapshot() is None
    assert table.scan().to_arrow().num_rows == 0
    assert table.scan().to_arrow().schema == table.schema

    batches = [
        pa.table({"dt": ["a", "a", "b"], "id": [1, 2, 1], "v": ["a1", "a2", "b1"]}),
        pa.table({"dt": ["a", "b"], "id": [1, 2], "v": ["a1'", "b2"]}),
        pa.table({"dt": ["a", "b"], "id": [2, 1], "v": [None, None], "rowkind": ["-D", "-D"]}),
        pa.table({"dt": ["c"], "id": [9], "v": ["c9"]}),
    ]
    states: list[dict[tuple[str, int], str | None]] = []
    state: dict[tuple[str, int], str | None] = {}
    for i, batch in enumerate(batches, start=1):
        kinds = batch.column("rowkind").to_pylist() if "rowkind" in batch.column_names else ["+I"] * batch.num_rows
        for row, kind in zip(batch.drop_columns([c for c in ["rowkind"] if c in batch.column_names]).to_pylist(),
                             kinds, strict=True):
            if kind == "-D":
                state.pop((row["dt"], row["id"]), None)
            else:
                state[(row["dt"], row["id"])] = row["v"]
        snap = table.write(batch)
        assert snap is not None and snap.id == i
        states.append(dict(state))

    def as_dict(result: pa.Table) -> dict[tuple[str, int], str | None]:
        return {(r["dt"], r["id"]): r["v"] for r in result.to_pylist()}

    assert [s.id for s in table.snapshots()] == [1, 2, 3, 4]
    assert table.latest_snapshot() == table.snapshot(4)
    assert as_dict(table.scan().to_arrow()) == states[-1]
    for snapshot_id, expected in enumerate(states, start=1):
        assert as_dict(table.scan(snapshot_id=snapshot_id).to_arrow()) == expected
        assert table.snapshot(snapshot_id).id == snapshot_id

    assert table.create_tag("t1", snapshot_id=2).id == 2
    assert table.create_tag("newest").id == 4
    assert as_dict(table.scan(tag="t1").to_arrow()) == states[1]
    assert as_dict(table.scan(tag="newest").to_arrow()) == states[3]
    assert set(table.tags()) == {"t1", "newest"}

    # Tags also survive reopening the table.
    reopened = cl.open_table(table.location)
    assert as_dict(reopened.scan(tag="t1").to_arrow()) == states[1]

    # By time: the newest snapshot committed at or before the timestamp (commits in the same
    # millisecond share a time, so compute which one that is).
    snaps = table.snapshots()
    assert [s.time_millis for s in snaps] == sorted(s.time_millis for s in snaps)
    for snap in snaps:
        newest = max(s.id for s in snaps if s.time_millis <= snap.time_millis)
        assert as_dict(table.scan(timestamp_ms=snap.time_millis).to_arrow()) == states[newest - 1]
    assert as_dict(table.scan(timestamp_ms=snaps[-1].time_millis + 10**9).to_arrow()) == states[-1]
    with pytest.raises(SnapshotNotFoundError):
        table.scan(timestamp_ms=snaps[0].time_millis - 1).to_arrow()

    # Time travel composes with filters and projections.
    old = table.scan(snapshot_id=2, filter=pc.field("dt") == "a", columns=["v"]).to_arrow()
    assert old.schema.names == ["v"]
    assert sorted(old.column("v").to_pylist()) == sorted(v for (d, _), v in states[1].items() if d == "a")


# -- reading: batches, filters, projections ----------------------------------------------------------


def many_rows_table(tmp_path: Path) -> tuple[cl.Table, dict[tuple[str, int], int | None]]:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.int64()), pa.field("s", pa.string())])
    table = new_table(tmp_path, schema, ["dt", "id"], ["dt"], buckets=4)
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]
    model: dict[tuple[str, int], int | None] = {}
    for commit in range(3):
        ids = list(range(commit * 50, commit * 50 + 120))
        dts = [days[i % 3] for i in ids]
        vs = [None if i % 7 == 0 else i * 10 + commit for i in ids]
        table.write(pa.table({"dt": dts, "id": ids, "v": pa.array(vs, pa.int64()), "s": [f"s{i}" for i in ids]}))
        model.update({(d, i): v for d, i, v in zip(dts, ids, vs, strict=True)})
    return table, model


def test_to_batches_equals_to_arrow(tmp_path: Path) -> None:
    table, model = many_rows_table(tmp_path)
    for scan in [table.scan(), table.scan(snapshot_id=1), table.scan(columns=["v", "id"]),
                 table.scan(filter=pc.field("v") > 500, columns=["id"])]:
        whole = scan.to_arrow()
        batches = list(scan.to_batches())
        assert len(batches) > 1 or scan.columns == ["id"]
        assert all(b.schema == whole.schema for b in batches)
        assert pa.Table.from_batches(batches, schema=whole.schema).equals(whole)
    assert table.scan().to_arrow().num_rows == len(model)
    assert table.scan().to_pandas().shape == (len(model), 4)


def test_filter_and_projection(tmp_path: Path) -> None:
    table, model = many_rows_table(tmp_path)

    def check(expr: pc.Expression, keep: Any, columns: list[str] | None = None) -> None:
        result = table.scan(filter=expr, columns=columns).to_arrow()
        assert result.schema.names == (columns or table.schema.names)
        want = sorted((d, i, v) for (d, i), v in model.items() if keep(d, i, v))
        if columns is None:
            got = sorted((r["dt"], r["id"], r["v"]) for r in result.to_pylist())
            assert got == want
            assert all(r["s"] == f"s{r['id']}" for r in result.to_pylist())
        else:
            full = {"dt": 0, "id": 1, "v": 2}
            got = sorted(tuple(r[c] for c in columns) for r in result.to_pylist())
            assert got == sorted(tuple(w[full[c]] for c in columns) for w in want)

    check(pc.field("dt") == "2024-01-02", lambda d, i, v: d == "2024-01-02")
    check(pc.field("dt") != "2024-01-02", lambda d, i, v: d != "2024-01-02")
    check(pc.field("id") == 77, lambda d, i, v: i == 77)
    check((pc.field("id") >= 100) & (pc.field("id") < 130), lambda d, i, v: 100 <= i < 130)
    check(pc.field("id").isin([3, 151, 999]), lambda d, i, v: i in (3, 151, 999))
    check(pc.field("v").is_null(), lambda d, i, v: v is None)
    check((pc.field("dt") == "2024-01-03") & (pc.field("v") > 1000), lambda d, i, v: d == "2024-01-03" and
          v is not None and v > 1000, columns=["v", "id"])
    check(pc.field("dt") == "nope", lambda d, i, v: False, columns=["id"])
    check(pc.scalar(True), lambda d, i, v: True, columns=["dt"])

    # A filter applies to the merged row: a key whose old version matched but whose latest
    # version does not is absent.
    assert model[("2024-01-01", 60)] == 601
    assert table.scan(filter=pc.field("v") == 600).to_arrow().num_rows == 0
    assert table.scan(filter=pc.field("v") == 601).to_arrow().column("id").to_pylist() == [60]

    projected = table.scan(columns=["s", "dt"]).to_arrow()
    assert projected.schema == pa.schema([table.schema.field("s"), table.schema.field("dt")])
    assert projected.num_rows == len(model)


# -- input kinds ----------------------------------------------------------------------------------


def test_pandas_recordbatch_and_reader_inputs(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.int32()), pa.field("ts", pa.timestamp("ms")), pa.field("d", pa.float64())])
    table = new_table(tmp_path, schema, ["dt", "id"], ["dt"], buckets=2)

    frame = pd.DataFrame({
        "dt": ["x", "x", "y"],
        "id": [1, 2, 3],
        "v": pd.array([10, None, 30], dtype="Int32"),
        "ts": pd.to_datetime(["2024-01-01 00:00:00.123", None, "1969-07-20 20:17:40.000"]),
        "d": [1.5, None, 2.5],
    })
    table.write(frame)
    batch = pa.RecordBatch.from_pydict(
        {"dt": ["y", "z"], "id": [3, 4], "v": pa.array([33, None], pa.int32()),
         "ts": pa.array([dt.datetime(2000, 1, 1), None], pa.timestamp("ms")), "d": [None, 4.0]}
    )
    table.write(batch)
    reader_batches = [
        pa.RecordBatch.from_pydict({"rowkind": ["+U"], "id": [1], "dt": ["x"], "v": [11], "d": [0.5],
                                    "ts": pa.array([None], pa.timestamp("ms"))}),
        pa.RecordBatch.from_pydict({"rowkind": ["-D"], "id": [4], "dt": ["z"], "v": [None], "d": [None],
                                    "ts": pa.array([None], pa.timestamp("ms"))}),
    ]
    reader_schema = pa.schema([("rowkind", pa.string()), ("id", pa.int64()), ("dt", pa.string()),
                               ("v", pa.int64()), ("d", pa.float64()), ("ts", pa.timestamp("ms"))])
    reader_batches = [b.cast(reader_schema) for b in reader_batches]
    snap = table.write(pa.RecordBatchReader.from_batches(reader_schema, reader_batches))
    assert snap is not None and snap.id == 3

    expected = pa.table({
        "dt": ["x", "x", "y"],
        "id": [1, 2, 3],
        "v": pa.array([11, None, 33], pa.int32()),
        "ts": pa.array([None, None, dt.datetime(2000, 1, 1)], pa.timestamp("ms")),
        "d": [0.5, None, None],
    })
    assert_same_rows(table.scan().to_arrow(), expected, ["dt", "id"])
    at_one = table.scan(snapshot_id=1).to_pandas().sort_values("id").reset_index(drop=True)
    assert at_one["v"].tolist()[0] == 10 and pd.isna(at_one["v"].tolist()[1])
    assert at_one["ts"].tolist()[2] == pd.Timestamp("1969-07-20 20:17:40")


def test_empty_input_commits_nothing(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = new_table(tmp_path, schema, ["id"])
    assert table.write(schema.empty_table()) is None
    assert table.write(pd.DataFrame({"id": pd.Series([], dtype="int64"), "v": pd.Series([], dtype=object)})) is None
    assert table.latest_snapshot() is None
    assert data_files(table) == []


def test_last_row_per_key_in_a_batch_wins(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = new_table(tmp_path, schema, ["id"], buckets=4)
    table.write(pa.table({
        "id": [1, 2, 1, 3, 2, 3, 4, 4],
        "v": ["a", "b", "c", "d", None, "e", "f", "g"],
        "rowkind": ["+I", "+I", "+U", "+I", "-U", "-D", "-D", "+I"],
    }))
    result = sort_rows(table.scan().to_arrow(), ["id"])
    assert result.to_pylist() == [{"id": 1, "v": "c"}, {"id": 4, "v": "g"}]


# -- on-disk layout --------------------------------------------------------------------------------


def read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@PARTITIONED
def test_paimon_layout_on_disk(tmp_path: Path, partitioned: bool) -> None:
    fields = [pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int32()),
              pa.field("amount", pa.decimal128(10, 2)), pa.field("ts", pa.timestamp("us", tz="UTC")),
              pa.field("tags", pa.list_(pa.string()))]
    if partitioned:
        fields.insert(0, pa.field("dt", pa.string(), nullable=False))
    keys = ["dt", "id"] if partitioned else ["id"]
    table = new_table(tmp_path, pa.schema(fields), keys, ["dt"] if partitioned else [], buckets=4)
    root = Path(table.location)
    assert root == tmp_path / "warehouse" / "db.db" / "t"

    schema_json = read_json(root / "schema" / "schema-0")
    types = {f["name"]: f["type"] for f in schema_json["fields"]}
    assert types["id"] == "BIGINT NOT NULL"
    assert types["v"] == "INT"
    assert types["amount"] == "DECIMAL(10, 2)"
    assert types["ts"] == "TIMESTAMP(6) WITH LOCAL TIME ZONE"
    assert types["tags"] == {"type": "ARRAY", "element": "STRING"}
    assert [f["id"] for f in schema_json["fields"]] == list(range(len(fields)))
    assert schema_json["primaryKeys"] == keys
    assert schema_json["partitionKeys"] == (["dt"] if partitioned else [])
    assert schema_json["options"] == {"bucket": "4"}
    assert schema_json["id"] == 0
    # unset, they are left out, as Java Paimon leaves them (it reads a JSON null as "null")
    assert "comment" not in schema_json and not any("description" in f for f in schema_json["fields"])
    if partitioned:
        assert types["dt"] == "STRING NOT NULL"
    assert not (root / "snapshot").exists() or not any((root / "snapshot").iterdir())

    def rows(ids: list[int], v: int, kinds: list[str] | None = None) -> pa.Table:
        data: dict[str, Any] = {
            "id": ids, "v": pa.array([v] * len(ids), pa.int32()),
            "amount": pa.array([Decimal("1.25")] * len(ids), pa.decimal128(10, 2)),
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=UTC)] * len(ids), pa.timestamp("us", tz="UTC")),
            "tags": [["a", "b"]] * len(ids),
        }
        if partitioned:
            data = {"dt": ["2024-01-01" if i % 2 else "2024-01-02" for i in ids], **data}
        if kinds:
            data["rowkind"] = kinds
        return pa.table(data)

    table.write(rows(list(range(40, 0, -1)), 1))
    table.write(rows(list(range(20, 60)), 2))
    table.write(rows([1, 2, 3], 3, ["-D", "-U", "+U"]))

    snapshot_dir = root / "snapshot"
    assert (snapshot_dir / "LATEST").read_text().strip() == "3"
    assert (snapshot_dir / "EARLIEST").read_text().strip() == "1"
    manifest_dir = root / "manifest"
    manifest_names = {p.name for p in manifest_dir.iterdir()}
    assert any(n.startswith("manifest-list-") for n in manifest_names)
    assert any(n.startswith("manifest-") and not n.startswith("manifest-list-") for n in manifest_names)
    total = 0
    for snapshot_id in (1, 2, 3):
        snap = read_json(snapshot_dir / f"snapshot-{snapshot_id}")
        assert snap["version"] == 3
        assert snap["id"] == snapshot_id
        assert snap["schemaId"] == 0
        assert snap["commitKind"] == "APPEND"
        assert snap["baseManifestList"] in manifest_names
        assert snap["deltaManifestList"] in manifest_names
        assert isinstance(snap["commitUser"], str) and snap["commitUser"]
        assert isinstance(snap["timeMillis"], int)
        total += snap["deltaRecordCount"]
        assert snap["totalRecordCount"] == total

    files = data_files(table)
    assert files
    pattern = (r"dt=2024-01-0[12]/" if partitioned else "") + r"bucket-[0-3]/data-[0-9a-f-]{36}-0\.parquet"
    key_bucket: dict[tuple[Any, ...], str] = {}
    kinds_seen: set[int] = set()
    for path in files:
        assert re.fullmatch(pattern, path.relative_to(root).as_posix())
        content = pq.ParquetFile(path).read()
        assert content.schema.names == ["_KEY_id", "_SEQUENCE_NUMBER", "_VALUE_KIND", *[f.name for f in fields]]
        assert content.schema.field("_KEY_id").type == pa.int64()
        assert content.schema.field("_SEQUENCE_NUMBER").type == pa.int64()
        assert content.schema.field("_VALUE_KIND").type == pa.int8()
        key = content.column("_KEY_id").to_pylist()
        assert key == content.column("id").to_pylist()
        assert key == sorted(key) and len(set(key)) == len(key)  # sorted, one row per key in a file
        kinds_seen |= set(content.column("_VALUE_KIND").to_pylist())
        bucket_dir = path.parent.relative_to(root).as_posix()
        for row in content.select(["dt", "id"] if partitioned else ["id"]).to_pylist():
            # the same key always lands in the same bucket
            assert key_bucket.setdefault(tuple(row.values()), bucket_dir) == bucket_dir
    assert kinds_seen == {0, 1, 2, 3}  # +I, -U, +U and -D rows are all stored as written

    result = sort_rows(table.scan().to_arrow(), keys)
    ids = sorted(result.column("id").to_pylist())
    assert ids == [3, *range(4, 60)]
    assert {r["id"]: r["v"] for r in result.to_pylist()}[3] == 3


@BUCKETS
def test_sequence_numbers_continue_per_bucket(tmp_path: Path, buckets: int) -> None:
    schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.int64())])
    # write-only: no compaction, so every commit adds level-0 files (compacted files may
    # hold sequence numbers lower than those of earlier files).
    table = new_table(tmp_path, schema, ["dt", "id"], ["dt"], buckets, options={"write-only": "true"})
    for commit in range(5):
        ids = list(range(commit * 7, commit * 7 + 30))
        table.write(pa.table({"dt": ["a" if i % 3 else "b" for i in ids], "id": ids, "v": [commit] * len(ids)}))

    # The files of each bucket in the order their commits added them.
    added: dict[tuple[bytes, int], list[Any]] = {}
    seen: set[str] = set()
    for snap in table.snapshots():
        for entry in live_entries(table.context, snap):
            if entry.file.file_name not in seen:
                seen.add(entry.file.file_name)
                added.setdefault((entry.partition, entry.bucket), []).append(entry.file)
    assert len(added) >= 2 and (buckets == 4 or len(added) == 2)
    assert any(len(files) > 1 for files in added.values())
    assert all(s.commit_kind == "APPEND" for s in table.snapshots())
    for files in added.values():
        for i, later in enumerate(files):
            assert later.level == 0
            assert later.min_sequence_number <= later.max_sequence_number
            if i:
                assert later.min_sequence_number > max(f.max_sequence_number for f in files[:i])

    # The manifest's bounds match the file's contents.
    latest = table.latest_snapshot()
    assert latest is not None
    for entry in live_entries(table.context, latest):
        bucket_dir = Path(table.context.bucket_dir(entry.partition, entry.bucket))
        sequence = pq.ParquetFile(bucket_dir / entry.file.file_name).read().column("_SEQUENCE_NUMBER")
        assert pc.min(sequence).as_py() == entry.file.min_sequence_number
        assert pc.max(sequence).as_py() == entry.file.max_sequence_number
        assert len(sequence) == entry.file.row_count
