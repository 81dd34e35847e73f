"""A filtered scan returns exactly the unfiltered read filtered by Arrow, whatever files the
planner skips by key ranges, value statistics (every stats mode, per-field modes) or file
indexes (bloom filter, bitmap), for append, primary-key and deletion-vector tables of every
merge engine, over columns of every kind with their edge values (nulls, NaN, -0.0, infinities,
strings past the truncation length and at the top code point, binary, decimals, dates,
timestamps of each precision with and without a zone, booleans) and after schema evolution
(old files without a column, or with it under another name)."""

from __future__ import annotations

import datetime as dt
import decimal
import tempfile
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changelake as cl

NAN = float("nan")
POOLS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "f": (pa.float64(), [None, NAN, -0.0, 0.0, 1.5, -2.0, float("inf"), float("-inf")]),
    "g": (pa.float32(), [None, NAN, -0.0, 0.0, 0.5]),
    "s": (pa.string(), [None, "", "a", "a" * 16, "a" * 17, "a" * 16 + "b", "é" * 20, "\U0010ffff" * 17,
                        "\U0010ffff" * 16 + "a", "\ud7ff" * 17, "z"]),
    "b": (pa.binary(), [None, b"", b"\x00", b"\xff" * 20]),
    "d": (pa.decimal128(10, 2), [None, decimal.Decimal("-1.50"), decimal.Decimal("0.00"), decimal.Decimal("99.99")]),
    "day": (pa.date32(), [None, dt.date(1969, 12, 31), dt.date(2024, 2, 29)]),
    "ms": (pa.timestamp("ms"), [None, dt.datetime(1970, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 0, 1000)]),
    "us": (pa.timestamp("us", tz="UTC"), [None, dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
                                          dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)]),
    "ns": (pa.timestamp("ns"), [None, 0, 1, 1_000_000_001]),
    "flag": (pa.bool_(), [None, True, False]),
    "n": (pa.int32(), [None, -(2**31), -1, 0, 7, 2**31 - 1]),
    "tiny": (pa.int8(), [None, -128, 0, 127]),
    "big": (pa.decimal128(38, 4), [None, decimal.Decimal("-12345678901234567890.1234"), decimal.Decimal("0.0001")]),
}
PARTITIONS = ["p", "q"]
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("part", pa.string(), nullable=False)]
                   + [pa.field(name, t) for name, (t, _) in POOLS.items()])
COLUMNS = ["id", "part", *POOLS]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])


def literal(column: str, value: Any) -> pc.Expression:
    t = pa.int64() if column == "id" else pa.string() if column == "part" else POOLS[column][0]
    return pc.scalar(pa.scalar(value, t))


def pool(column: str) -> list[Any]:
    if column == "id":
        return [0, 1, 2, 3, 5, 7]
    if column == "part":
        return PARTITIONS
    return POOLS[column][1]


@st.composite
def leaf(draw: st.DrawFn) -> pc.Expression:
    column = draw(st.sampled_from(COLUMNS))
    field = pc.field(column)
    values = [v for v in pool(column) if v is not None]
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "null", "valid", "nan"]))
    if kind == "null":
        return field.is_null()
    if kind == "valid":
        return field.is_valid()
    if kind == "nan" and column in ("f", "g"):
        return pc.Expression._call("is_nan", [field])
    if kind == "in" and column not in ("flag",):
        t = pa.int64() if column == "id" else pa.string() if column == "part" else POOLS[column][0]
        chosen = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
        return field.isin(pa.array(chosen, t))
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
    right = literal(column, draw(st.sampled_from(values)))
    return {"==": field == right, "!=": field != right, "<": field < right, "<=": field <= right,
            ">": field > right, ">=": field >= right}[op]


filters = st.recursive(leaf(), lambda inner: st.one_of(
    st.tuples(inner, inner).map(lambda ab: ab[0] & ab[1]),
    st.tuples(inner, inner).map(lambda ab: ab[0] | ab[1]),
    inner.map(lambda a: ~a),
), max_leaves=4)


@st.composite
def rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 6))
    out = []
    for _ in range(n):
        row = {"id": draw(st.sampled_from(pool("id"))), "part": draw(st.sampled_from(PARTITIONS))}
        for name, (_, values) in POOLS.items():
            row[name] = draw(st.sampled_from(values))
        out.append(row)
    return out


ENGINES = [{}, {"merge-engine": "partial-update"},
           {"merge-engine": "aggregation", "fields.n.aggregate-function": "max", "fields.d.aggregate-function": "sum",
            "fields.f.aggregate-function": "max", "fields.s.aggregate-function": "min"},
           {"merge-engine": "first-row"}]


@st.composite
def table_options(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    primary = draw(st.booleans())
    options: dict[str, str] = {"metadata.stats-mode": draw(st.sampled_from(
        ["full", "counts", "none", "truncate(16)", "truncate(1)"]))}
    for name in draw(st.lists(st.sampled_from(list(POOLS)), max_size=2, unique=True)):
        options[f"fields.{name}.stats-mode"] = draw(st.sampled_from(["full", "none", "truncate(2)", "counts"]))
    bloom = draw(st.lists(st.sampled_from(["f", "g", "s", "b", "day", "ms", "us", "ns", "n"]), max_size=3, unique=True))
    if bloom:
        options["file-index.bloom-filter.columns"] = ",".join(bloom)
    bitmap = draw(st.lists(st.sampled_from(["s", "n", "day"]), max_size=2, unique=True))
    if bitmap:
        options["file-index.bitmap.columns"] = ",".join(bitmap)
    if draw(st.booleans()):
        options["metadata.stats-dense-store"] = "false"
    if not primary:
        options["bucket"] = draw(st.sampled_from(["-1", "2"]))
        if options["bucket"] != "-1":
            options["bucket-key"] = "id"
        if draw(st.booleans()):
            options["deletion-vectors.enabled"] = "true"
        return [], options
    options["bucket"] = draw(st.sampled_from(["1", "2"]))
    options.update(draw(st.sampled_from(ENGINES)))
    if options.get("merge-engine") != "first-row" and draw(st.booleans()):  # Paimon refuses the pair
        options["deletion-vectors.enabled"] = "true"
    return ["id", "part"], options


def comparable(table: pa.Table, keys: Sequence[str] = ("id", "part")) -> list[tuple[str, ...]]:
    """The rows in key order, each value by its repr (NaN equal to itself, -0.0 not 0.0)."""
    ordered = table.sort_by([(k, "ascending") for k in keys]).to_pylist()
    return [tuple(repr(v) for v in row.values()) for row in ordered]


def assert_filter_matches(table: cl.Table, expressions: list[pc.Expression]) -> None:
    full = table.scan().to_arrow()
    for expression in expressions:
        assert comparable(table.scan(filter=expression).to_arrow()) == comparable(full.filter(expression)), \
            str(expression)


@SETTINGS
@given(layout=table_options(), batches=st.lists(rows(), min_size=1, max_size=4),
       compact_after=st.sets(st.integers(0, 3)), deletes=st.lists(leaf(), max_size=2),
       expressions=st.lists(filters, min_size=1, max_size=6))
def test_filtered_scan_is_the_read_filtered(layout: tuple[list[str], dict[str, str]],
                                            batches: list[list[dict[str, Any]]], compact_after: set[int],
                                            deletes: list[pc.Expression], expressions: list[pc.Expression]) -> None:
    primary, options = layout
    with tempfile.TemporaryDirectory() as warehouse:
        table = cl.Catalog(warehouse).create_table("db.t", schema=SCHEMA, primary_keys=primary,
                                                   partition_keys=["part"], options=options)
        for i, batch in enumerate(batches):
            table.write(pa.Table.from_pylist(batch, schema=SCHEMA))
            if i in compact_after:
                table.compact(full=i % 2 == 0)
            if i < len(deletes) and "merge-engine" not in options:  # row-level deletes (deduplicate, append)
                table.delete(deletes[i])
        assert_filter_matches(table, expressions)


# -- after schema evolution --------------------------------------------------------------------

OLD = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int32()), pa.field("g", pa.float32()),
                 pa.field("s", pa.string()), pa.field("x", pa.string())])
NEW = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("n", pa.int64()), pa.field("g", pa.float64()),
                 pa.field("t", pa.string()), pa.field("e", pa.int64())])
EVOLVED: dict[str, list[Any]] = {
    "id": [0, 1, 2, 3], "n": [None, -1, 0, 2**31 - 1, 2**40], "g": [None, NAN, -0.0, 0.5, 1e300],
    "t": [None, "", "a" * 17, "b"], "e": [None, 0, 5], "x": [None, "q"], "s": [None, "a"],
}


def evolved_leaf(schema: pa.Schema, column: str, kind: str, value: Any) -> pc.Expression:
    field, t = pc.field(column), schema.field(column).type
    literal = pc.scalar(pa.scalar(value, t))
    return {"==": field == literal, "!=": field != literal, "<": field < literal, ">=": field >= literal,
            "null": field.is_null(), "in": field.isin(pa.array([value], t))}[kind]


def filters_over(schema: pa.Schema) -> st.SearchStrategy[pc.Expression]:
    @st.composite
    def leaves(draw: st.DrawFn) -> pc.Expression:
        column = draw(st.sampled_from(schema.names))
        kind = draw(st.sampled_from(["==", "!=", "<", ">=", "null", "in"]))
        values = [v for v in EVOLVED[column] if v is not None and (schema.field(column).type != pa.int32() or
                                                                    abs(v) < 2**31)]
        return evolved_leaf(schema, column, kind, draw(st.sampled_from(values)))

    return st.recursive(leaves(), lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda ab: ab[0] & ab[1]),
        st.tuples(inner, inner).map(lambda ab: ab[0] | ab[1]), inner.map(lambda a: ~a)), max_leaves=3)


def evolved_rows(schema: pa.Schema) -> st.SearchStrategy[list[dict[str, Any]]]:
    def fits(name: str, value: Any) -> bool:
        return not (schema.field(name).type == pa.int32() and value is not None and abs(value) >= 2**31)
    return st.lists(st.fixed_dictionaries({f.name: st.sampled_from([v for v in EVOLVED[f.name] if fits(f.name, v)])
                                           for f in schema}), min_size=1, max_size=4)


@SETTINGS
@given(layout=table_options(), before=st.lists(evolved_rows(OLD), min_size=1, max_size=2),
       after=st.lists(evolved_rows(NEW), max_size=2), expressions=st.lists(filters_over(NEW), min_size=1, max_size=4),
       old_expressions=st.lists(filters_over(OLD), min_size=1, max_size=3))
def test_filtered_scan_after_schema_evolution(layout: tuple[list[str], dict[str, str]],
                                              before: list[list[dict[str, Any]]], after: list[list[dict[str, Any]]],
                                              expressions: list[pc.Expression],
                                              old_expressions: list[pc.Expression]) -> None:
    primary, drawn = layout
    # the drawn per-column options name columns of the other schema: keep the table-wide ones
    options = {k: v for k, v in drawn.items() if not k.startswith(("fields.", "file-index."))}
    options["file-index.bloom-filter.columns"] = "n,g"  # their type widens: old indexes unused
    with tempfile.TemporaryDirectory() as warehouse:
        table = cl.Catalog(warehouse).create_table("db.t", schema=OLD, primary_keys=primary[:1], options=options)
        for batch in before:
            table.write(pa.Table.from_pylist(batch, schema=OLD))
        (table.update_schema().rename_column("s", "t").update_column("n", pa.int64())
         .update_column("g", pa.float64()).add_column("e", pa.int64()).drop_column("x").commit())
        for batch in after:
            table.write(pa.Table.from_pylist(batch, schema=NEW))
        # every write made one snapshot or more: snapshot len(before) is one from before the change
        scans = [(table.scan(), expressions), (table.scan(snapshot_id=len(before)), old_expressions),
                 # the snapshot before the change read in the latest schema
                 (table.scan(snapshot_id=len(before), time_travel_schema="latest"), expressions)]
        for scan, filters in scans:
            full = scan.to_arrow()
            for expression in filters:
                assert comparable(scan.filter(expression).to_arrow(), ["id"]) == comparable(
                    full.filter(expression), ["id"]), str(expression)
