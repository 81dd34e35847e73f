"""Merge engines: hand-built key-value tables merged with ``MergeEngine.merge``, checked against
Apache Paimon's documented examples and unit tests, against a row-by-row reference model (a
plain-Python port of Paimon's merge functions), and for the associativity compaction relies on."""

from __future__ import annotations

import copy
import decimal
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.errors import DataError, OptionError, RowKindError
from changelake.options import MergeEngineKind, SortOrder, TableOptions
from changelake.table.format import kv
from changelake.table.format import schema as schema_module
from changelake.table.merge.engines import Aggregation, Deduplicate, FirstRow, MergeEngine, PartialUpdate
from changelake.table.merge.parse import merge_engine

KIND_CODES = {"+I": kv.INSERT, "-U": kv.UPDATE_BEFORE, "+U": kv.UPDATE_AFTER, "-D": kv.DELETE}
KEYS = ["_KEY_k"]
Row = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# helpers


def table_schema(fields: Sequence[tuple[str, pa.DataType]], options: dict[str, str],
                 not_null: Sequence[str] = ()) -> schema_module.TableSchema:
    arrow = pa.schema([pa.field("k", pa.int64(), nullable=False),
                       *(pa.field(n, t, nullable=n not in not_null) for n, t in fields)])
    return schema_module.from_arrow("db.t", arrow, ["k"], [], options, None)


_OPTION_NAMES = {
    "merge__engine": "merge-engine",
    "ignore__delete": "ignore-delete",
    "sequence__field": "sequence.field",
    "sequence__field__sort_order": "sequence.field.sort-order",
    "partial_update__remove_record_on_delete": "partial-update.remove-record-on-delete",
    "partial_update__remove_record_on_sequence_group": "partial-update.remove-record-on-sequence-group",
    "fields__g_1__sequence_group": "fields.g_1.sequence-group",
    "fields__g_2__sequence_group": "fields.g_2.sequence-group",
}


def engine_of(fields: Sequence[tuple[str, pa.DataType]], **options: str) -> MergeEngine:
    opts = {_OPTION_NAMES[k]: v for k, v in options.items()}
    return merge_engine(table_schema(fields, opts), TableOptions.parse(opts, table="db.t"))


def make_engine(fields: Sequence[tuple[str, pa.DataType]], options: dict[str, str],
                not_null: Sequence[str] = ()) -> MergeEngine:
    return merge_engine(table_schema(fields, options, not_null), TableOptions.parse(options, table="db.t"))


def kv_table(fields: Sequence[tuple[str, pa.DataType]], rows: Sequence[Row]) -> pa.Table:
    """Rows given as dicts with k, seq, kind ('+I'...) and column values (missing: null)."""
    value_schema = pa.schema([pa.field("k", pa.int64(), nullable=False), *(pa.field(n, t) for n, t in fields)])
    schema = kv.file_schema(value_schema, ["k"])
    columns: dict[str, list[Any]] = {
        "_KEY_k": [r["k"] for r in rows],
        kv.SEQUENCE: [r["seq"] for r in rows],
        kv.VALUE_KIND: [KIND_CODES[r.get("kind", "+I")] for r in rows],
        "k": [r["k"] for r in rows],
    }
    for name, _ in fields:
        columns[name] = [r.get(name) for r in rows]
    return pa.Table.from_pydict(columns, schema=schema)


def as_rows(table: pa.Table) -> list[Row]:
    names = {v: k for k, v in KIND_CODES.items()}
    out = []
    for r in table.to_pylist():
        assert r["_KEY_k"] == r["k"]
        row = {"k": r["k"], "seq": r[kv.SEQUENCE], "kind": names[r[kv.VALUE_KIND]]}
        row.update({n: v for n, v in r.items() if n not in ("_KEY_k", "k", kv.SEQUENCE, kv.VALUE_KIND)})
        out.append(row)
    return out


def merged(
    engine: MergeEngine, fields: Sequence[tuple[str, pa.DataType]], rows: Sequence[Row], drop: bool = True
) -> list[Row]:
    result = engine.merge(kv_table(fields, rows), KEYS, drop_deletes=drop)
    assert result.schema == kv_table(fields, []).schema
    return as_rows(result)


def values(rows: list[Row], *names: str) -> list[tuple[Any, ...]]:
    return [tuple(r[n] for n in names) for r in rows]


def seq_rows(*specs: tuple[Any, ...], names: Sequence[str], k: int = 1) -> list[Row]:
    """Rows of one key with sequence numbers 0, 1, ...: each spec is (kind, *values)."""
    return [{"k": k, "seq": i, "kind": s[0], **dict(zip(names, s[1:], strict=True))} for i, s in enumerate(specs)]


INT = pa.int64()


# ---------------------------------------------------------------------------------------------
# deduplicate


def test_deduplicate_last_row_wins_and_deletes_delete() -> None:
    fields = [("v", INT)]
    e = engine_of(fields)
    rows = [
        {"k": 2, "seq": 1, "v": 20},
        {"k": 1, "seq": 3, "v": 13},
        {"k": 1, "seq": 2, "v": 12},
        {"k": 2, "seq": 4, "kind": "-D", "v": 20},
        {"k": 3, "seq": 5, "kind": "+U", "v": None},
    ]
    assert merged(e, fields, rows) == [
        {"k": 1, "seq": 3, "kind": "+I", "v": 13},
        {"k": 3, "seq": 5, "kind": "+U", "v": None},
    ]
    kept = merged(e, fields, rows, drop=False)
    assert [(r["k"], r["kind"]) for r in kept] == [(1, "+I"), (2, "-D"), (3, "+U")]


def test_deduplicate_ignore_delete_keeps_the_last_add() -> None:
    fields = [("v", INT)]
    e = engine_of(fields, ignore__delete="true")
    rows = seq_rows(("+I", 1), ("-D", 1), ("-U", 1), names=["v"]) + seq_rows(("-D", 5), names=["v"], k=2)
    assert values(merged(e, fields, rows, drop=False), "k", "v", "kind") == [(1, 1, "+I")]
    assert e.input_mask(np.array([0, 3, 1, 2], dtype=np.int8)).tolist() == [True, False, False, True]
    e.check_input(np.array([3, 1], dtype=np.int8), "db.t")  # no error: they are ignored


def test_sequence_field_orders_rows_before_the_sequence_number() -> None:
    fields = [("v", INT), ("ts", INT)]
    e = engine_of(fields, sequence__field="ts")
    rows = [
        {"k": 1, "seq": 1, "v": 1, "ts": 30},
        {"k": 1, "seq": 2, "v": 2, "ts": 10},  # newer sequence number, older ts: loses
        {"k": 2, "seq": 3, "v": 3, "ts": 5},
        {"k": 2, "seq": 4, "v": 4, "ts": 5},  # tie on ts: the sequence number decides
        {"k": 3, "seq": 5, "v": 5, "ts": 1},
        {"k": 3, "seq": 6, "v": 6, "ts": None},  # nulls order first
    ]
    out = merged(e, fields, rows)
    assert values(out, "k", "v", "seq") == [(1, 1, 2), (2, 4, 4), (3, 5, 6)]  # sequence: the key's max


def test_sequence_field_descending_and_several_fields() -> None:
    fields = [("v", INT), ("a", INT), ("b", pa.string())]
    desc = engine_of(fields, sequence__field="a", sequence__field__sort_order="descending")
    rows = seq_rows(
        ("+I", 1, 5, None), ("+I", 2, 3, None), ("+I", 3, 9, None), ("+I", 4, None, None), names=["v", "a", "b"]
    )
    assert values(merged(desc, fields, rows), "v") == [(2,)]  # smallest a is last; null first
    two = engine_of(fields, sequence__field="a,b")
    rows = seq_rows(("+I", 1, 5, "b"), ("+I", 2, 5, "a"), ("+I", 3, 4, "z"), ("+I", 4, 5, None), names=["v", "a", "b"])
    assert values(merged(two, fields, rows), "v") == [(1,)]


def test_equal_sequence_numbers_keep_input_order() -> None:
    fields = [("v", INT)]
    rows = [{"k": 1, "seq": 7, "v": v} for v in (1, 2, 3)]
    assert values(merged(engine_of(fields), fields, rows), "v") == [(3,)]
    assert values(merged(engine_of(fields, merge__engine="first-row"), fields, rows), "v") == [(1,)]


def test_string_and_composite_keys() -> None:
    arrow = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("q", INT, nullable=False), ("v", INT)])
    options = {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"}
    schema = schema_module.from_arrow("db.t", arrow, ["p", "q"], [], options, None)
    e = merge_engine(schema, TableOptions.parse(options, table="db.t"))
    schema = kv.file_schema(arrow, ["p", "q"])
    data = {"_KEY_p": ["b", "a", "b", "a"], "_KEY_q": [1, 2, 1, 1], kv.SEQUENCE: [0, 1, 2, 3], kv.VALUE_KIND: [0] * 4}
    data |= {"p": data["_KEY_p"], "q": data["_KEY_q"], "v": [1, 2, 3, 4]}
    out = e.merge(pa.Table.from_pydict(data, schema=schema), ["_KEY_p", "_KEY_q"], drop_deletes=True)
    assert [(r["p"], r["q"], r["v"]) for r in out.to_pylist()] == [("a", 1, 4), ("a", 2, 2), ("b", 1, 4)]


# ---------------------------------------------------------------------------------------------
# first-row


def test_first_row_keeps_the_first_row() -> None:
    fields = [("v", INT)]
    e = engine_of(fields, merge__engine="first-row")
    rows = seq_rows(("+I", 1), ("+U", 2), ("+I", 3), names=["v"])
    assert merged(e, fields, rows) == [{"k": 1, "seq": 2, "kind": "+I", "v": 1}]


def test_first_row_rejects_retractions_unless_ignore_delete() -> None:
    fields = [("v", INT)]
    e = engine_of(fields, merge__engine="first-row")
    with pytest.raises(RowKindError, match=r"first-row.*ignore-delete"):
        e.check_input(np.array([0, 3], dtype=np.int8), "db.t")
    with pytest.raises(RowKindError, match="first-row"):
        merged(e, fields, seq_rows(("+I", 1), ("-D", 1), names=["v"]))
    # A key with a single row is never merged (Paimon passes it through).
    assert values(merged(e, fields, seq_rows(("-D", 1), names=["v"]), drop=False), "kind") == [("-D",)]
    ignoring = engine_of(fields, merge__engine="first-row", ignore__delete="true")
    ignoring.check_input(np.array([0, 3], dtype=np.int8), "db.t")
    rows = seq_rows(("-D", 9), ("+I", 1), ("-U", 1), ("+I", 2), names=["v"])
    assert values(merged(ignoring, fields, rows), "v") == [(1,)]


def test_first_row_has_no_sequence_field() -> None:
    with pytest.raises(OptionError, match=r"sequence\.field"):
        engine_of([("v", INT)], merge__engine="first-row", sequence__field="v")


# ---------------------------------------------------------------------------------------------
# partial-update

PU4 = [("a", pa.float64()), ("b", INT), ("c", pa.string())]


def test_partial_update_documented_example() -> None:
    e = engine_of(PU4, merge__engine="partial-update")
    rows = seq_rows(
        ("+I", 23.0, 10, None), ("+I", None, None, "This is a book"), ("+I", 25.2, None, None), names=["a", "b", "c"]
    )
    assert values(merged(e, PU4, rows), "a", "b", "c", "kind") == [(25.2, 10, "This is a book", "+I")]


def test_partial_update_rejects_deletes_by_default() -> None:
    e = engine_of(PU4, merge__engine="partial-update")
    with pytest.raises(RowKindError, match="remove-record-on-delete"):
        e.check_input(np.array([0, 1], dtype=np.int8), "db.t")
    with pytest.raises(RowKindError):
        merged(e, PU4, seq_rows(("+I", 1.0, 1, "x"), ("-D", 1.0, 1, "x"), names=["a", "b", "c"]))
    ignoring = engine_of(PU4, merge__engine="partial-update", ignore__delete="true")
    rows = seq_rows(("+I", 1.0, None, "x"), ("-D", 1.0, 1, "x"), ("+I", None, 2, None), names=["a", "b", "c"])
    assert values(merged(ignoring, PU4, rows), "a", "b", "c") == [(1.0, 2, "x")]


def test_partial_update_remove_record_on_delete() -> None:
    e = engine_of(PU4, merge__engine="partial-update", partial_update__remove_record_on_delete="true")
    e.check_input(np.array([0, 3, 1], dtype=np.int8), "db.t")
    names = ["a", "b", "c"]
    deleted = seq_rows(("+I", 1.0, 1, "x"), ("-D", 1.0, 1, "x"), names=names)
    assert merged(e, PU4, deleted) == []
    assert values(merged(e, PU4, deleted, drop=False), "kind", "a") == [("-D", None)]
    # After a -D the record restarts from the -D's NOT NULL values only (Paimon's initRow; none
    # here), then updates apply: the deleted row's values do not come back.
    rows = seq_rows(("+I", 1.0, 1, "x"), ("-D", 2.0, None, "y"), ("+I", None, 3, None), names=names)
    assert values(merged(e, PU4, rows), "kind", "a", "b", "c") == [("+I", None, 3, None)]
    # -U is ignored (when it comes first it initialises the record, with its NOT NULL values).
    rows = seq_rows(("-U", 5.0, 5, "u"), ("+I", None, 1, None), ("-U", 7.0, 7, "w"), names=names)
    assert values(merged(e, PU4, rows), "kind", "a", "b", "c") == [("+I", None, 1, None)]
    with pytest.raises(OptionError, match="ignore-delete"):
        engine_of(
            PU4, merge__engine="partial-update", partial_update__remove_record_on_delete="true", ignore__delete="true"
        )


SG = [("a", INT), ("b", INT), ("g_1", INT), ("c", INT), ("d", INT), ("g_2", INT)]
SG_NAMES = [n for n, _ in SG]


def test_sequence_groups_documented_example() -> None:
    e = engine_of(
        SG, merge__engine="partial-update", fields__g_1__sequence_group="a,b", fields__g_2__sequence_group="c,d"
    )
    rows = seq_rows(("+I", 1, 1, 1, 1, 1, 1), ("+I", 2, 2, 2, 2, 2, None), names=SG_NAMES)
    assert values(merged(e, SG, rows), *SG_NAMES) == [(2, 2, 2, 1, 1, 1)]
    rows.append({"k": 1, "seq": 2, "kind": "+I", **dict(zip(SG_NAMES, (3, 3, 1, 3, 3, 3), strict=True))})
    assert values(merged(e, SG, rows), *SG_NAMES) == [(2, 2, 2, 3, 3, 3)]


def test_sequence_group_with_several_sequence_fields_documented_example() -> None:
    fields = [*SG, ("g_3", INT)]
    names = [n for n, _ in fields]
    e = make_engine(
        fields,
        {"merge-engine": "partial-update", "fields.g_1.sequence-group": "a,b", "fields.g_2,g_3.sequence-group": "c,d"},
    )
    rows = seq_rows(("+I", 1, 1, 1, 1, 1, 1, 1), ("+I", 2, 2, 2, 2, 2, 1, None), names=names)
    assert values(merged(e, fields, rows), *names) == [(2, 2, 2, 1, 1, 1, 1)]
    rows = seq_rows(
        ("+I", 1, 1, 1, 1, 1, 1, 1), ("+I", 2, 2, 2, 2, 2, 1, None), ("+I", 3, 3, 1, 3, 3, 3, 1), names=names
    )
    assert values(merged(e, fields, rows), *names) == [(2, 2, 2, 3, 3, 3, 1)]


def test_sequence_group_older_value_arriving_later_and_nulls() -> None:
    e = engine_of(
        SG, merge__engine="partial-update", fields__g_1__sequence_group="a,b", fields__g_2__sequence_group="c,d"
    )
    rows = seq_rows(
        ("+I", 1, 1, 5, None, None, None),
        ("+I", 9, 9, 3, 7, None, 2),  # older g_1 arrives later: a, b untouched; g_2 new: c, d (null too) set
        ("+I", None, 4, 5, None, 8, None),  # equal g_1: the group is replaced, a becomes null
        ("+I", 6, 6, None, 1, 1, None),  # null sequences: both groups skipped
        names=SG_NAMES,
    )
    assert values(merged(e, SG, rows), *SG_NAMES) == [(None, 4, 5, 7, None, 2)]


def test_sequence_group_retractions() -> None:
    e = engine_of(
        SG, merge__engine="partial-update", fields__g_1__sequence_group="a,b", fields__g_2__sequence_group="c,d"
    )
    e.check_input(np.array([0, 1, 3], dtype=np.int8), "db.t")
    rows = seq_rows(
        ("+I", 1, 1, 1, 1, 1, 1),
        ("-U", 1, 1, 2, 9, 9, 0),  # retracts group 1 (newer sequence), not group 2 (older)
        names=SG_NAMES,
    )
    assert merged(e, SG, rows)[0] | {"seq": 0} == {
        "k": 1,
        "seq": 0,
        "kind": "+I",
        "a": None,
        "b": None,
        "g_1": 2,
        "c": 1,
        "d": 1,
        "g_2": 1,
    }
    only_retractions = seq_rows(("-U", 1, 1, 2, 9, 9, None), ("-D", 1, 1, 1, 9, 9, None), names=SG_NAMES)
    out = merged(e, SG, only_retractions, drop=False)
    # The first retraction initialises the record with its NOT NULL values (none here), then
    # retracts group 1; no add: the result is a delete.
    assert values(out, "kind", *SG_NAMES) == [("-D", None, None, 2, None, None, None)]


def test_remove_record_on_sequence_group() -> None:
    e = engine_of(
        SG,
        merge__engine="partial-update",
        fields__g_1__sequence_group="a,b",
        fields__g_2__sequence_group="c,d",
        partial_update__remove_record_on_sequence_group="g_1",
    )
    rows = seq_rows(("+I", 1, 1, 1, 1, 1, 1), ("-D", None, None, 2, None, None, None), names=SG_NAMES)
    assert merged(e, SG, rows) == []
    assert values(merged(e, SG, rows, drop=False), "kind", "g_1", "c") == [("-D", None, None)]
    # The delete restarts the record: g_1 is null again, so a row of an older g_1 sets the group.
    again = [*rows, *seq_rows(("+I", 7, 7, 1, None, None, None), names=SG_NAMES)]
    again[-1]["seq"] = 2
    assert values(merged(e, SG, again), "kind", *SG_NAMES) == [("+I", 7, 7, 1, None, None, None)]
    # So a delete of an older g_1 after it restarts the record again, and so on.
    chain = seq_rows(("+I", 1, 1, 1, 1, 1, 1), ("-D", None, None, 3, None, None, None),
                     ("-D", None, None, 2, None, None, None), ("+I", 5, 5, 1, None, None, None), names=SG_NAMES)
    assert values(merged(e, SG, chain), "kind", *SG_NAMES) == [("+I", 5, 5, 1, None, None, None)]
    older = seq_rows(("+I", 1, 1, 3, 1, 1, 1), ("-D", None, None, 2, None, None, None), names=SG_NAMES)
    assert values(merged(e, SG, older), "kind", *SG_NAMES) == [("+I", 1, 1, 3, 1, 1, 1)]
    group_2 = seq_rows(("+I", 1, 1, 1, 1, 1, 1), ("-D", None, None, None, 5, 5, 2), names=SG_NAMES)
    assert values(merged(e, SG, group_2), "kind", *SG_NAMES) == [("+I", 1, 1, 1, None, None, 2)]
    with pytest.raises(OptionError, match="sequence group"):
        engine_of(
            SG,
            merge__engine="partial-update",
            fields__g_1__sequence_group="a,b",
            partial_update__remove_record_on_sequence_group="a",
        )


def test_partial_update_aggregation_in_sequence_groups_documented_example() -> None:
    fields = [("a", INT), ("b", INT), ("c", INT), ("d", INT)]
    names = ["a", "b", "c", "d"]
    e = make_engine(
        fields,
        {
            "merge-engine": "partial-update",
            "fields.a.sequence-group": "b",
            "fields.c.sequence-group": "d",
            "fields.default-aggregate-function": "last_non_null_value",
            "fields.d.aggregate-function": "sum",
        },
    )
    rows = seq_rows(
        ("+I", 1, 1, None, None),
        ("+I", None, None, 1, 1),
        ("+I", 2, 2, None, None),
        ("+I", None, None, 2, 2),
        names=names,
    )
    assert values(merged(e, fields, rows), *names) == [(2, 2, 2, 3)]
    # sum keeps aggregating rows of an older sequence, and retracts
    rows = seq_rows(("+I", None, None, 5, 10), ("+I", None, None, 3, 1), ("-U", None, None, 1, 4), names=names)
    assert values(merged(e, fields, rows), "c", "d") == [(5, 7)]


def test_partial_update_option_errors() -> None:
    pu = {"merge-engine": "partial-update"}
    with pytest.raises(OptionError, match="'zz' is not in the table"):
        make_engine(SG, pu | {"fields.g_1.sequence-group": "a,zz"})
    with pytest.raises(OptionError, match="not in the table"):
        make_engine(SG, pu | {"fields.nope.sequence-group": "a"})
    with pytest.raises(OptionError, match="primary-key"):
        make_engine(SG, pu | {"fields.g_1.sequence-group": "a,k"})
    with pytest.raises(OptionError, match="multiple sequence groups"):
        make_engine(SG, pu | {"fields.g_1.sequence-group": "a,b", "fields.g_2.sequence-group": "b,c"})
    with pytest.raises(OptionError, match="not in a sequence group"):
        make_engine(SG, pu | {"fields.c.aggregate-function": "sum"})
    with pytest.raises(OptionError, match="conflicts with sequence groups"):
        make_engine(SG, pu | {"fields.g_1.sequence-group": "a", "partial-update.remove-record-on-delete": "true"})
    with pytest.raises(OptionError, match="changelake supports only"):
        make_engine(SG, pu | {"fields.g_1.sequence-group": "a", "fields.a.aggregate-function": "first_value"})


# ---------------------------------------------------------------------------------------------
# aggregation


def agg_engine(fields: Sequence[tuple[str, pa.DataType]], **functions: str) -> Aggregation:
    options = {"merge-engine": "aggregation"}
    for key, value in functions.items():
        options[key if "." in key else f"fields.{key}.aggregate-function"] = value
    e = make_engine(fields, options)
    assert isinstance(e, Aggregation)
    return e


def test_aggregation_documented_example() -> None:
    fields = [("price", pa.float64()), ("sales", INT)]
    e = agg_engine(fields, price="max", sales="sum")
    rows = seq_rows(("+I", 23.0, 15), ("+I", 30.2, 20), names=["price", "sales"])
    assert values(merged(e, fields, rows), "price", "sales", "kind") == [(30.2, 35, "+I")]


def test_aggregation_default_function_paimon_test() -> None:
    fields = [("a", INT), ("b", INT), ("c", INT), ("d", INT)]
    e = make_engine(
        fields,
        {
            "merge-engine": "aggregation",
            "fields.default-aggregate-function": "first_non_null_value",
            "fields.b.aggregate-function": "sum",
        },
    )
    names = ["a", "b", "c", "d"]
    rows = seq_rows(
        ("+I", None, 1, 1, 1),
        ("+I", 2, None, 2, 2),
        ("+I", 3, 3, None, 3),
        ("+I", 4, 4, 4, None),
        ("+I", 5, 5, 5, 5),
        names=names,
    )
    assert values(merged(e, fields, rows), *names) == [(2, 13, 1, 1)]
    # without any option every column is last_non_null_value
    plain = make_engine(fields, {"merge-engine": "aggregation"})
    assert values(merged(plain, fields, rows[:4]), *names) == [(4, 4, 4, 3)]


def test_listagg_delimiters_paimon_test() -> None:
    fields = [("a", pa.string()), ("b", pa.string()), ("c", INT), ("d", pa.string())]
    e = make_engine(fields, {
        "merge-engine": "aggregation",
        "fields.a.aggregate-function": "listagg",
        "fields.b.aggregate-function": "listagg", "fields.b.list-agg-delimiter": "-",
        "fields.d.aggregate-function": "listagg", "fields.d.list-agg-delimiter": "/",
    })  # fmt: skip
    rows = seq_rows(*[("+I", str(i), str(i), i, str(i)) for i in range(1, 6)], names=["a", "b", "c", "d"])
    assert values(merged(e, fields, rows), "a", "b", "c", "d") == [("1,2,3,4,5", "1-2-3-4-5", 5, "1/2/3/4/5")]


def test_listagg_blank_values_and_distinct() -> None:
    fields = [("s", pa.string()), ("t", pa.string())]
    e = make_engine(fields, {
        "merge-engine": "aggregation",
        "fields.s.aggregate-function": "listagg",
        "fields.t.aggregate-function": "listagg", "fields.t.distinct": "true", "fields.t.list-agg-delimiter": ";",
    })  # fmt: skip
    rows = seq_rows(
        ("+I", None, "a;a;b"),
        ("+I", "", ""),
        ("+I", "x", "b; ;c"),
        ("+I", "  ", None),
        ("+I", "y", "c;d;a;d"),
        names=["s", "t"],
    )
    assert values(merged(e, fields, rows), "s", "t") == [("x,y", "a;a;b;c;d")]
    blanks = seq_rows(("+I", "", " "), ("+I", None, ""), names=["s", "t"])
    assert values(merged(e, fields, blanks), "s", "t") == [(None, None)]


def test_bool_and_or_with_nulls() -> None:
    fields = [("x", pa.bool_()), ("y", pa.bool_()), ("z", pa.bool_())]
    e = agg_engine(fields, x="bool_and", y="bool_or", z="bool_and")
    rows = seq_rows(
        ("+I", True, False, None), ("+I", None, None, None), ("+I", False, True, None), names=["x", "y", "z"]
    )
    assert values(merged(e, fields, rows), "x", "y", "z") == [(False, True, None)]
    rows = seq_rows(("+I", True, False, None), ("+I", True, False, None), names=["x", "y", "z"])
    assert values(merged(e, fields, rows), "x", "y") == [(True, False)]


def test_count_counts_rows_holding_a_value_paimon_test() -> None:
    fields = [("n", pa.int32())]
    e = agg_engine(fields, n="count")
    # Paimon's testFieldCountIntAgg: the stored values are never added, every row counts 1.
    rows = seq_rows(("+I", 10), ("+I", 5), ("+I", 15), ("+I", 25), names=["n"])
    assert values(merged(e, fields, rows), "n", "kind") == [(4, "+I")]
    # Nulls do not count; a key whose rows are all null counts 0 (not null).
    rows = seq_rows(("+I", None), ("+I", 7), ("+I", None), ("+I", 0), names=["n"])
    assert values(merged(e, fields, rows), "n") == [(2,)]
    assert values(merged(e, fields, seq_rows(("+I", None), ("+I", None), names=["n"])), "n") == [(0,)]
    # A key with a single row is never merged: its value stays as it is (Paimon passes it through).
    assert values(merged(e, fields, seq_rows(("+I", 42), names=["n"])), "n") == [(42,)]
    assert values(merged(e, fields, seq_rows(("+I", None), names=["n"])), "n") == [(None,)]
    # Several keys at once.
    rows = seq_rows(("+I", 1), ("+I", 1), names=["n"]) + seq_rows(("+I", 3), ("+I", None), ("+I", 3), names=["n"], k=2)
    assert values(merged(e, fields, rows), "k", "n") == [(1, 2), (2, 2)]


def test_count_retractions_and_ignore_retract() -> None:
    fields = [("n", INT), ("m", INT)]
    e = agg_engine(fields, n="count", m="count")
    e.check_input(np.array([0, 1, 3], dtype=np.int8), "db.t")  # count accepts retractions
    rows = seq_rows(
        ("+I", 5, 5), ("+I", 6, 6), ("-U", 5, 5), ("+U", 9, None), ("-D", None, 1), ("+I", 1, 1), names=["n", "m"]
    )
    assert values(merged(e, fields, rows), "n", "m", "kind") == [(3, 1, "+I")]
    # Retracting from nothing counts down from 0; a null retraction of nothing starts at 0.
    rows = seq_rows(("-U", 5, None), ("-D", 6, None), names=["n", "m"])
    assert values(merged(e, fields, rows), "n", "m", "kind") == [(-2, 0, "+I")]
    ignoring = make_engine(fields, {
        "merge-engine": "aggregation",
        "fields.n.aggregate-function": "count", "fields.n.ignore-retract": "true",
        "fields.m.aggregate-function": "count",
    })  # fmt: skip
    rows = seq_rows(("+I", 1, 1), ("-U", 1, 1), ("+I", 1, 1), ("-D", 1, 1), names=["n", "m"])
    assert values(merged(ignoring, fields, rows), "n", "m") == [(2, 0)]
    # Ignored retractions do not start the count either.
    rows = seq_rows(("-U", 1, 1), ("-D", 1, None), names=["n", "m"])
    assert values(merged(ignoring, fields, rows), "n", "m") == [(None, -1)]


def test_count_remove_record_on_delete() -> None:
    fields = [("n", INT), ("m", INT)]
    e = make_engine(fields, {
        "merge-engine": "aggregation", "fields.default-aggregate-function": "count",
        "aggregation.remove-record-on-delete": "true",
    })  # fmt: skip
    e.check_input(np.array([0, 1, 3], dtype=np.int8), "db.t")
    rows = seq_rows(("+I", 1, 1), ("+I", 1, 1), ("-D", 7, None), names=["n", "m"])
    assert merged(e, fields, rows) == []
    assert values(merged(e, fields, rows, drop=False), "kind", "n", "m") == [("-D", None, None)]
    # Later rows count from null (a nullable column restarts as null: Paimon's initRow), which
    # any merged row turns into 0 first.
    rows = seq_rows(
        ("+I", 1, 1), ("-D", 7, None), ("+I", 1, None), ("+I", 1, 1), ("-U", 1, 1), ("+I", None, 1), names=["n", "m"]
    )
    assert values(merged(e, fields, rows), "kind", "n", "m") == [("+I", 1, 1)]
    # A NOT NULL column counts on from the delete's value.
    e = make_engine(fields, {"merge-engine": "aggregation", "fields.default-aggregate-function": "count",
                             "aggregation.remove-record-on-delete": "true"}, not_null=["n"])
    rows = seq_rows(("+I", 1, 1), ("-D", 7, 4), ("+I", 1, 1), names=["n", "m"])
    assert values(merged(e, fields, rows), "kind", "n", "m") == [("+I", 8, 1)]


@pytest.mark.parametrize("data_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_count_integer_types_and_overflow(data_type: pa.DataType) -> None:
    fields = [("n", data_type)]
    e = make_engine(fields, {
        "merge-engine": "aggregation", "fields.n.aggregate-function": "count",
        "aggregation.remove-record-on-delete": "true",
    }, not_null=["n"])  # fmt: skip
    out = e.merge(kv_table(fields, seq_rows(("+I", 3), ("+I", 5), ("+I", -4), names=["n"])), KEYS, drop_deletes=True)
    assert out.schema.field("n").type == data_type
    assert out.column("n").to_pylist() == [3]
    info = np.iinfo(data_type.to_pandas_dtype())
    top, bottom = int(info.max), int(info.min)
    # The bounds are reachable from a delete's value (of a NOT NULL column); a step past them
    # is an error, as for sum.
    at_top = seq_rows(("+I", 1), ("-D", top - 1), ("+I", 1), names=["n"])
    assert values(merged(e, fields, at_top), "n") == [(top,)]
    with pytest.raises(DataError, match=rf"table db\.t: column 'n': count {top + 1} overflows {data_type}"):
        merged(e, fields, [*at_top, {"k": 1, "seq": 3, "kind": "+I", "n": 0}])
    at_bottom = seq_rows(("+I", 1), ("-D", bottom + 1), ("-U", 5), names=["n"])
    assert values(merged(e, fields, at_bottom), "n") == [(bottom,)]
    with pytest.raises(DataError, match=rf"count {bottom - 1} overflows {data_type}"):
        merged(e, fields, [*at_bottom, {"k": 1, "seq": 3, "kind": "-U", "n": 0}])
    # A count that leaves and re-enters the range is fine: only the result is checked, as for sum.
    rows = seq_rows(("+I", 1), ("-D", top), ("+I", 1), ("-U", 1), names=["n"])
    assert values(merged(e, fields, rows), "n") == [(top,)]


def test_count_rejects_other_types() -> None:
    fields = [("n", INT), ("f", pa.float64()), ("d", pa.decimal128(10, 2)), ("s", pa.string()), ("b", pa.bool_())]
    for column in ("f", "d", "s", "b"):
        with pytest.raises(OptionError, match=rf"table db\.t: .*'count' does not apply to column '{column}'.*BIGINT"):
            agg_engine(fields, **{column: "count"})
    with pytest.raises(OptionError, match=r"'count' does not apply to column 'f'"):
        make_engine(fields, {"merge-engine": "aggregation", "fields.default-aggregate-function": "count"})
    assert agg_engine(fields, n="COUNT").aggregates[0].function == "count"
    with pytest.raises(OptionError, match="did you mean 'count'"):
        agg_engine(fields, n="cnt")


def test_count_in_partial_update_sequence_groups_is_rejected() -> None:
    # Paimon merges an older-sequence row reversed (its value as the accumulator); for count that
    # is not the simple update it is for sum, so changelake does not take count there.
    fields = [("a", INT), ("g", INT)]
    options = {"merge-engine": "partial-update", "fields.g.sequence-group": "a", "fields.a.aggregate-function": "count"}
    with pytest.raises(OptionError, match=r"changelake supports only .* not 'count'"):
        make_engine(fields, options)


def test_product_multiplies_and_retractions_divide() -> None:
    fields = [("p", INT), ("f", pa.float64())]
    e = agg_engine(fields, p="product", f="product")
    rows = seq_rows(("+I", 3, 1.5), ("+I", None, None), ("+I", 4, 2.0), names=["p", "f"])
    assert values(merged(e, fields, rows), "p", "f") == [(12, 3.0)]
    # Java integer division truncates toward zero; a retraction before any value does nothing.
    rows = seq_rows(("-U", 5, 4.0), ("+I", -7, 3.0), ("-U", 2, 2.0), ("+I", 4, 8.0), ("-D", 3, 0.5), names=["p", "f"])
    assert values(merged(e, fields, rows), "p", "f") == [(-4, 24.0)]
    with pytest.raises(DataError, match="divides by zero"):
        merged(e, fields, seq_rows(("+I", 5, 1.0), ("-U", 0, 1.0), names=["p", "f"]))


def test_retractions_per_function() -> None:
    fields = [("s", INT), ("lv", INT), ("ln", INT), ("mx", INT)]
    names = ["s", "lv", "ln", "mx"]
    e = agg_engine(fields, s="sum", lv="last_value", ln="last_non_null_value", mx="max")
    with pytest.raises(RowKindError, match=r"'mx' \(max\).*ignore-retract"):
        e.check_input(np.array([0, 1], dtype=np.int8), "db.t")
    with pytest.raises(RowKindError, match="'mx'"):
        merged(e, fields, seq_rows(("+I", 1, 1, 1, 1), ("-U", 1, 1, 1, 1), names=names))
    ignoring = make_engine(fields, {
        "merge-engine": "aggregation", "fields.s.aggregate-function": "sum",
        "fields.lv.aggregate-function": "last_value",
        "fields.mx.aggregate-function": "max", "fields.mx.ignore-retract": "true",
    })  # fmt: skip
    ignoring.check_input(np.array([0, 1, 3], dtype=np.int8), "db.t")
    rows = seq_rows(("+I", 10, 1, 1, 5), ("+I", 5, 2, 2, 7), ("-U", 3, 9, None, 9), names=names)
    assert values(merged(ignoring, fields, rows), *names, "kind") == [(12, None, 2, 7, "+I")]
    rows = seq_rows(("+I", 10, 1, 1, 5), ("-D", 5, 2, 2, 7), names=names)
    assert values(merged(ignoring, fields, rows), *names, "kind") == [(5, None, None, 5, "+I")]
    # Retracting from nothing: sum negates; a single -U row stays as it is.
    rows = seq_rows(("-U", 4, 1, 1, 1), ("-U", 3, 1, 1, 1), names=names)
    assert values(merged(ignoring, fields, rows), "s", "kind") == [(-7, "+I")]
    assert values(merged(ignoring, fields, rows[:1], drop=False), "s", "kind") == [(4, "-U")]


def test_aggregation_remove_record_on_delete() -> None:
    fields = [("a", INT), ("b", INT), ("c", INT)]
    e = make_engine(
        fields,
        {
            "merge-engine": "aggregation",
            "fields.default-aggregate-function": "sum",
            "aggregation.remove-record-on-delete": "true",
        },
        not_null=["a"],
    )
    # Paimon's AggregateMergeFunctionTest#testInitRowWithNullableFieldOnDelete, as Paimon 1.1 to
    # 1.3 merge it: initRow takes the delete's NOT NULL values only.
    rows = seq_rows(("+I", 0, 0, 5), ("-D", 2, 2, None), names=["a", "b", "c"])
    assert merged(e, fields, rows) == []
    assert values(merged(e, fields, rows, drop=False), "kind", "a", "b", "c") == [("-D", 2, None, None)]
    # Adds after the delete start from its NOT NULL values (the others from null), -U still
    # retracts.
    rows = seq_rows(("+I", 1, 1, 1), ("-D", 2, 2, None), ("+I", 10, None, 3), ("-U", 1, 1, 1), names=["a", "b", "c"])
    assert values(merged(e, fields, rows), "kind", "a", "b", "c") == [("+I", 11, -1, 2)]
    with pytest.raises(OptionError, match="ignore-retract"):
        make_engine(
            fields,
            {
                "merge-engine": "aggregation",
                "aggregation.remove-record-on-delete": "true",
                "fields.a.ignore-retract": "true",
            },
        )
    maxed = make_engine(
        fields,
        {
            "merge-engine": "aggregation",
            "fields.a.aggregate-function": "max",
            "aggregation.remove-record-on-delete": "true",
        },
    )
    maxed.check_input(np.array([0, 3], dtype=np.int8), "db.t")
    with pytest.raises(RowKindError):
        maxed.check_input(np.array([0, 1], dtype=np.int8), "db.t")


def test_first_value_after_a_removed_record() -> None:
    fields = [("f", INT), ("n", INT)]
    options = {
        "merge-engine": "aggregation",
        "fields.f.aggregate-function": "first_value",
        "fields.n.aggregate-function": "first_non_null_value",
        "aggregation.remove-record-on-delete": "true",
    }
    e = make_engine(fields, options)
    rows = seq_rows(("+I", None, None), ("+I", 2, 2), ("-D", 7, 7), ("+I", 3, 3), names=["f", "n"])
    # first_value was initialised (by the null) before the delete: it keeps the restarted
    # record's value, null (Paimon's initRow restarts nullable columns as null; a NOT NULL one
    # would keep the delete's value); first_non_null_value was initialised by 2: same.
    assert values(merged(e, fields, rows), "f", "n") == [(None, None)]
    rows = seq_rows(("-D", 7, None), ("+I", 3, 3), ("+I", 4, 4), names=["f", "n"])
    assert values(merged(e, fields, rows), "f", "n") == [(3, 3)]


def test_sum_overflow_is_an_error() -> None:
    fields = [("s", pa.int32()), ("t", INT)]
    e = agg_engine(fields, s="sum", t="sum")
    with pytest.raises(DataError, match="overflows int32"):
        merged(e, fields, seq_rows(("+I", 2**31 - 1, 0), ("+I", 1, 0), names=["s", "t"]))
    with pytest.raises(DataError, match="overflows int64"):
        merged(e, fields, seq_rows(("+I", 0, 2**63 - 1), ("+I", 0, 1), names=["s", "t"]))
    big = seq_rows(("+I", 0, 2**62), ("+I", 0, 2**62 - 1), ("+I", 0, -(2**62)), names=["s", "t"])
    assert values(merged(e, fields, big), "t") == [(2**62 - 1,)]


def test_other_types() -> None:
    fields = [
        ("d", pa.decimal128(10, 2)),
        ("ts", pa.timestamp("us")),
        ("s", pa.string()),
        ("dt", pa.date32()),
        ("x", pa.float32()),
    ]
    e = agg_engine(fields, d="sum", ts="max", s="min", dt="min", x="sum")
    D = decimal.Decimal
    import datetime as dtm

    rows = seq_rows(
        ("+I", D("1.25"), dtm.datetime(2024, 1, 2), "pear", dtm.date(2024, 3, 1), 0.5),
        ("-U", D("0.50"), None, None, None, 0.25),
        ("+I", D("2.00"), dtm.datetime(2024, 1, 1), "apple", dtm.date(2024, 1, 1), None),
        names=["d", "ts", "s", "dt", "x"],
    )
    e2 = make_engine(
        fields,
        {
            "merge-engine": "aggregation",
            "fields.d.aggregate-function": "sum",
            "fields.ts.aggregate-function": "max",
            "fields.s.aggregate-function": "min",
            "fields.dt.aggregate-function": "min",
            "fields.x.aggregate-function": "sum",
            "fields.ts.ignore-retract": "true",
            "fields.s.ignore-retract": "true",
            "fields.dt.ignore-retract": "true",
        },
    )
    assert values(merged(e2, fields, rows), "d", "ts", "s", "dt", "x") == [
        (D("2.75"), dtm.datetime(2024, 1, 2), "apple", dtm.date(2024, 1, 1), 0.25)
    ]
    with pytest.raises(RowKindError):
        e.check_input(np.array([1], dtype=np.int8), "db.t")


def test_aggregation_option_errors() -> None:
    fields = [("v", INT), ("s", pa.string()), ("b", pa.bool_())]
    with pytest.raises(OptionError, match="did you mean 'sum'"):
        agg_engine(fields, v="summ")
    with pytest.raises(OptionError, match="'sum' does not apply to column 's'"):
        agg_engine(fields, s="sum")
    with pytest.raises(OptionError, match="'listagg' does not apply"):
        agg_engine(fields, v="listagg")
    with pytest.raises(OptionError, match="'bool_or' does not apply"):
        agg_engine(fields, v="bool_or")
    with pytest.raises(OptionError, match="primary-key"):
        agg_engine(fields, k="sum")
    with pytest.raises(OptionError, match="not supported by changelake"):
        agg_engine(fields, v="theta_sketch")
    with pytest.raises(OptionError, match="sequence field"):
        make_engine(
            fields, {"merge-engine": "aggregation", "sequence.field": "v", "fields.v.aggregate-function": "max"}
        )
    with pytest.raises(OptionError, match="merge-engine"):
        make_engine(fields, {"merge-engine": "nope"})
    with pytest.raises(OptionError, match="ignore-retract"):
        make_engine(fields, {"merge-engine": "aggregation", "fields.v.ignore-retract": "maybe"})
    assert agg_engine(fields, v="first_not_null_value").aggregates[0].function == "first_non_null_value"


def test_required_columns_for_projected_reads() -> None:
    e = make_engine(
        SG,
        {
            "merge-engine": "partial-update",
            "fields.g_1.sequence-group": "a,b",
            "fields.g_2.sequence-group": "c,d",
            "sequence.field": "k",
        },
    )
    assert e.required_columns(["a", "c"]) == ["a", "c", "k", "g_1", "g_2"]
    assert e.required_columns(["k"]) == ["k"]
    projected = kv_table(SG, seq_rows(("+I", 1, 1, 1, 1, 1, 1), ("+I", 2, 2, 0, 2, 2, 2), names=SG_NAMES)).select(
        ["_KEY_k", kv.SEQUENCE, kv.VALUE_KIND, "k", "a", "g_1"]
    )
    assert e.merge(projected, KEYS, drop_deletes=True).column("a").to_pylist() == [1]
    with pytest.raises(DataError, match="g_1"):
        e.merge(projected.drop_columns(["g_1"]), KEYS, drop_deletes=True)


# ---------------------------------------------------------------------------------------------
# Reference model: Paimon's merge functions, row by row (a port of the Java classes).


class RefAgg:
    """One FieldAggregator."""

    def __init__(self, function: str, ignore_retract: bool = False, delimiter: str = ",", distinct: bool = False):
        self.function, self.ignore_retract, self.delimiter, self.distinct = (
            function,
            ignore_retract,
            delimiter,
            distinct,
        )
        self.initialized = False

    def agg(self, acc: Any, x: Any) -> Any:
        f = self.function
        if f in ("sum", "product", "max", "min", "bool_and", "bool_or"):
            if acc is None or x is None:
                return x if acc is None else acc
            return {
                "sum": lambda: acc + x,
                "product": lambda: acc * x,
                "max": lambda: x if acc < x else acc,
                "min": lambda: acc if acc < x else x,
                "bool_and": lambda: acc and x,
                "bool_or": lambda: acc or x,
            }[f]()
        if f == "count":
            if acc is None or x is None:
                return (0 if x is None else 1) if acc is None else acc
            return acc + 1
        if f in ("last_value", "primary-key"):
            return x
        if f == "last_non_null_value":
            return acc if x is None else x
        if f == "first_value":
            if not self.initialized:
                self.initialized = True
                return x
            return acc
        if f == "first_non_null_value":
            if not self.initialized and x is not None:
                self.initialized = True
                return x
            return acc
        if f == "listagg":
            if x is None or not x.strip():
                return acc
            if acc is None or not acc.strip():
                return x
            if not self.distinct:
                return acc + self.delimiter + x
            existing = set(acc.split(self.delimiter))
            out = acc
            for token in x.split(self.delimiter):
                if not token.strip() or token in existing:
                    continue
                existing.add(token)
                out += self.delimiter + token
            return out
        raise AssertionError(f)

    def retract(self, acc: Any, x: Any) -> Any:
        if self.ignore_retract:
            return acc
        f = self.function
        if f == "sum":
            if acc is None or x is None:
                return -x if acc is None and x is not None else acc
            return acc - x
        if f == "count":
            if acc is None or x is None:
                return (0 if x is None else -1) if acc is None else acc
            return acc - 1
        if f == "product":
            if acc is None or x is None:
                return acc
            if isinstance(acc, float):
                return acc / x
            if x == 0:
                raise DataError("divides by zero")
            q = abs(acc) // abs(x)
            return -q if (acc < 0) != (x < 0) else q
        if f == "last_value":
            return None
        if f == "last_non_null_value":
            return None if x is not None else acc
        if f == "primary-key":
            return x
        raise RowKindError(f"{f} cannot retract")


def ref_partial_update(e: PartialUpdate, rows: list[Row], names: list[str]) -> tuple[Row, int]:
    group_of = {c: g for g in e.sequence_groups for c in g.columns}
    aggs = {a.column: RefAgg(a.function, a.ignore_retract) for a in e.aggregates}
    delete_fields = set(e.sequence_groups[e.delete_group].sequence_fields) if e.delete_group is not None else set()
    row: Row = dict.fromkeys(names)
    state = {"meet_insert": False, "filled": False, "deleted": False}

    def init_row(kv_row: Row) -> Row:  # Paimon's initRow: the NOT NULL fields only
        return {n: kv_row[n] if n in e.not_null else None for n in names}

    def key(values: Row, g: Any) -> tuple[Any, ...]:
        return tuple((0, 0) if values[s] is None else (1, values[s]) for s in g.sequence_fields)

    def empty(kv_row: Row, g: Any) -> bool:
        return all(kv_row[s] is None for s in g.sequence_fields)

    for kv_row in rows:
        state["deleted"] = False
        retract = kv_row["kind"] in ("-U", "-D")
        if retract:
            if not state["filled"]:
                row = init_row(kv_row)
                state["filled"] = True
            if e.sequence_groups:
                updated: set[str] = set()
                processed: set[str] = set()
                for n in names:
                    g = group_of.get(n)
                    if g is None or n in processed:
                        continue
                    if empty(kv_row, g):
                        processed |= set(g.sequence_fields)
                        continue
                    agg = aggs.get(n)
                    if key(kv_row, g) >= key(row, g):
                        if n in g.sequence_fields:
                            reset = False
                            for s in g.sequence_fields:
                                if s not in updated:
                                    if kv_row["kind"] == "-D" and s in delete_fields:
                                        reset = True
                                        break
                                    row[s] = kv_row[s]
                                    updated.add(s)
                                processed.add(s)
                            if reset:
                                state["deleted"] = True
                                row = init_row(kv_row)
                                break
                        else:
                            row[n] = None if agg is None else agg.retract(row[n], kv_row[n])
                    elif agg is not None:
                        row[n] = agg.retract(row[n], kv_row[n])
                continue
            if e.remove_record_on_delete:
                if kv_row["kind"] == "-D":
                    state["deleted"] = True
                    row = init_row(kv_row)
                continue
            raise RowKindError("partial-update cannot accept deletes")
        if not e.sequence_groups:
            for n in names:
                if kv_row[n] is not None:
                    row[n] = kv_row[n]
        else:
            processed = set()
            for n in names:
                g = group_of.get(n)
                agg = aggs.get(n)
                if g is None:
                    if kv_row[n] is not None:
                        row[n] = kv_row[n]
                    continue
                if n in processed:
                    continue
                if empty(kv_row, g):
                    processed |= set(g.sequence_fields)
                    continue
                if key(kv_row, g) >= key(row, g):
                    if n in g.sequence_fields:
                        for s in g.sequence_fields:
                            row[s] = kv_row[s]
                            processed.add(s)
                        continue
                    row[n] = kv_row[n] if agg is None else agg.agg(row[n], kv_row[n])
                elif agg is not None:
                    row[n] = agg.agg(kv_row[n], row[n])
        state["meet_insert"] = True
        state["filled"] = True
    kind = kv.DELETE if state["deleted"] or not state["meet_insert"] else kv.INSERT
    return row, kind


def ref_aggregation(e: Aggregation, rows: list[Row], names: list[str]) -> tuple[Row, int]:
    by_column = {a.column: a for a in e.aggregates}
    aggs = {
        n: RefAgg(by_column[n].function, by_column[n].ignore_retract, by_column[n].delimiter, by_column[n].distinct)
        if n in by_column
        else RefAgg("primary-key")
        for n in names
    }
    row: Row = dict.fromkeys(names)
    deleted = False
    for kv_row in rows:
        deleted = e.remove_record_on_delete and kv_row["kind"] == "-D"
        if deleted:  # Paimon's initRow: the NOT NULL fields only
            row = {n: kv_row[n] if n in e.not_null else None for n in names}
            continue
        retract = kv_row["kind"] in ("-U", "-D")
        for n in names:
            row[n] = aggs[n].retract(row[n], kv_row[n]) if retract else aggs[n].agg(row[n], kv_row[n])
    return row, kv.DELETE if deleted else kv.INSERT


def reference(e: MergeEngine, rows: list[Row], names: list[str], drop: bool) -> list[Row]:
    """What Paimon merges: sort, ReducerMergeFunctionWrapper (one row: as it is), merge function."""
    if e.ignore_delete:
        rows = [r for r in rows if r["kind"] in ("+I", "+U")]
    indexed = list(enumerate(rows))

    def order(item: tuple[int, Row]) -> tuple[Any, ...]:
        position, r = item
        fields = []
        for f in e.sequence_fields:
            value = r[f]
            if value is None:
                fields.append((0, 0))
            else:
                fields.append((1, value if e.sequence_order is SortOrder.ASCENDING else -value))
        return (r["k"], *fields, r["seq"], position)

    groups: dict[int, list[Row]] = {}
    for _, r in sorted(indexed, key=order):
        groups.setdefault(r["k"], []).append(r)
    out = []
    for k, group in groups.items():
        max_seq = max(r["seq"] for r in group)
        if len(group) == 1:
            result = dict(group[0])
        elif isinstance(e, Deduplicate):
            result = dict(group[-1])
        elif isinstance(e, FirstRow):
            if any(r["kind"] in ("-U", "-D") for r in group):
                raise RowKindError("first-row")
            result = dict(group[0])
        else:
            assert isinstance(e, PartialUpdate | Aggregation)
            values_, kind = (
                ref_partial_update(e, group, names)
                if isinstance(e, PartialUpdate)
                else ref_aggregation(e, group, names)
            )
            result = {"k": k, "kind": {v: n for n, v in KIND_CODES.items()}[kind], **values_}
        result["seq"] = max_seq
        out.append(result)
    if drop:
        out = [r for r in out if r["kind"] in ("+I", "+U")]
    return out


def normalize(rows: list[Row]) -> list[Row]:
    return [{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]


def check_engine(e: MergeEngine, fields: Sequence[tuple[str, pa.DataType]], rows: list[Row], drop: bool) -> None:
    names = ["k", *(n for n, _ in fields)]
    try:
        expected: list[Row] | Exception = reference(e, copy.deepcopy(rows), names, drop)
    except (RowKindError, DataError) as exc:
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)):
            merged(e, fields, rows, drop)
        return
    assert normalize(merged(e, fields, rows, drop)) == normalize(expected)


def check_associative(
    e: MergeEngine, fields: Sequence[tuple[str, pa.DataType]], rows: list[Row], split: int, by_sort_order: bool
) -> None:
    """Merging the newest rows first, then that result with the older rows, equals one merge."""
    names = [n for n, _ in fields]
    ranked = sorted(
        range(len(rows)), key=lambda i: _merge_order(e, rows[i], i) if by_sort_order else (rows[i]["seq"], i)
    )
    newest = {i for i in ranked[len(rows) - split :]} if split else set()
    older = [r for i, r in enumerate(rows) if i not in newest]
    recent = [r for i, r in enumerate(rows) if i in newest]
    try:
        once = e.merge(kv_table(fields, rows), KEYS, drop_deletes=False)
    except (RowKindError, DataError):
        return  # rows the engine rejects (checked against the model elsewhere)
    first = e.merge(kv_table(fields, recent), KEYS, drop_deletes=False)
    step = e.merge(pa.concat_tables([kv_table(fields, older), first]), KEYS, drop_deletes=False)
    assert normalize(as_rows(step)) == normalize(as_rows(once)), names


def _merge_order(e: MergeEngine, r: Row, position: int) -> tuple[Any, ...]:
    fields = []
    for f in e.sequence_fields:
        value = r[f]
        fields.append((0, 0) if value is None else (1, value if e.sequence_order is SortOrder.ASCENDING else -value))
    return (*fields, r["seq"], position)


def first_in_merge_is_add(e: MergeEngine, rows: list[Row], subset: set[int]) -> bool:
    """Whether, for every key, the first of the subset's rows in merge order is an add."""
    firsts: dict[int, tuple[Any, str]] = {}
    for i in subset:
        r = rows[i]
        rank = _merge_order(e, r, i)
        if r["k"] not in firsts or rank < firsts[r["k"]][0]:
            firsts[r["k"]] = (rank, r["kind"])
    return all(kind in ("+I", "+U") for _, kind in firsts.values())


def newest(e: MergeEngine, rows: list[Row], split: int, by_sort_order: bool) -> set[int]:
    ranked = sorted(
        range(len(rows)), key=lambda i: _merge_order(e, rows[i], i) if by_sort_order else (rows[i]["seq"], i)
    )
    return set(ranked[len(rows) - split :]) if split else set()


# ---------------------------------------------------------------------------------------------
# hypothesis: random rows for a few keys

ADDS = ["+I", "+U"]
ALL_KINDS = ["+I", "+U", "-U", "-D"]
SETTINGS = settings(
    max_examples=int(os.environ.get("CHANGELAKE_MERGE_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


@st.composite
def row_lists(
    draw: Any, columns: dict[str, st.SearchStrategy[Any]], kinds: Sequence[str], max_size: int = 12
) -> list[Row]:
    count = draw(st.integers(1, max_size))
    out = []
    for _ in range(count):
        row = {"k": draw(st.integers(0, 2)), "seq": draw(st.integers(0, 8)), "kind": draw(st.sampled_from(kinds))}
        row.update({name: draw(strategy) for name, strategy in columns.items()})
        out.append(row)
    return out


small = st.one_of(st.none(), st.integers(-3, 3))
DEDUP_FIELDS = [("v", INT), ("ts", INT)]


@SETTINGS
@given(
    rows=row_lists({"v": small, "ts": small}, ALL_KINDS),
    options=st.sampled_from(
        [
            {},
            {"sequence.field": "ts"},
            {"sequence.field": "ts", "sequence.field.sort-order": "descending"},
            {"ignore-delete": "true"},
        ]
    ),
    drop=st.booleans(),
    split=st.integers(0, 12),
)
def test_deduplicate_matches_model_and_is_associative(
    rows: list[Row], options: dict[str, str], drop: bool, split: int
) -> None:
    e = make_engine(DEDUP_FIELDS, options)
    check_engine(e, DEDUP_FIELDS, rows, drop)
    check_associative(e, DEDUP_FIELDS, rows, min(split, len(rows)), by_sort_order=False)


@SETTINGS
@given(
    rows=row_lists({"v": small, "ts": small}, ALL_KINDS),
    drop=st.booleans(),
    split=st.integers(0, 12),
    ignore=st.booleans(),
)
def test_first_row_matches_model_and_is_associative(rows: list[Row], drop: bool, split: int, ignore: bool) -> None:
    e = make_engine(DEDUP_FIELDS, {"merge-engine": "first-row", "ignore-delete": str(ignore).lower()})
    check_engine(e, DEDUP_FIELDS, rows, drop)
    if ignore or all(r["kind"] in ADDS for r in rows):
        check_associative(e, DEDUP_FIELDS, rows, min(split, len(rows)), by_sort_order=False)


PU_FIELDS = [("a", INT), ("b", pa.string()), ("c", INT), ("ts", INT)]


@SETTINGS
@given(
    rows=row_lists({"a": small, "b": st.sampled_from([None, "x", "y"]), "c": small, "ts": small}, ALL_KINDS),
    options=st.sampled_from(
        [
            {},
            {"sequence.field": "ts"},
            {"ignore-delete": "true"},
            {"partial-update.remove-record-on-delete": "true"},
            {
                "partial-update.remove-record-on-delete": "true",
                "sequence.field": "ts",
                "sequence.field.sort-order": "descending",
            },
        ]
    ),
    drop=st.booleans(),
    split=st.integers(0, 12),
)
def test_partial_update_matches_model_and_is_associative(
    rows: list[Row], options: dict[str, str], drop: bool, split: int
) -> None:
    e = make_engine(PU_FIELDS, {"merge-engine": "partial-update"} | options)
    check_engine(e, PU_FIELDS, rows, drop)
    # Paimon's partial-update is associative for adds; retractions are not: a first-in-merge
    # retraction initialises the record (initRow), a removing -D resets it to its own values.
    if all(r["kind"] in ADDS for r in rows) or e.ignore_delete:
        check_associative(e, PU_FIELDS, rows, min(split, len(rows)), by_sort_order=bool(e.sequence_fields))


GROUP_FIELDS = [("a", INT), ("b", INT), ("g1", INT), ("c", INT), ("d", INT), ("g2", INT), ("g3", INT), ("e", INT)]
seq_values = st.one_of(st.none(), st.integers(0, 3))


@SETTINGS
@given(
    rows=row_lists(
        {
            "a": small,
            "b": small,
            "g1": seq_values,
            "c": small,
            "d": small,
            "g2": seq_values,
            "g3": seq_values,
            "e": small,
        },
        ["+I", "+U", "+I", "-U", "-D"],
    ),
    extra=st.sampled_from(
        [
            {},
            {"partial-update.remove-record-on-sequence-group": "g1"},
            {"partial-update.remove-record-on-sequence-group": "g3"},
            {"fields.b.aggregate-function": "sum"},
            {
                "fields.a.aggregate-function": "last_non_null_value",
                "fields.d.aggregate-function": "max",
                "fields.d.ignore-retract": "true",
            },
            {"fields.b.aggregate-function": "last_value", "fields.c.aggregate-function": "bool_or"},
            {
                "fields.default-aggregate-function": "last_non_null_value",
                "fields.c.aggregate-function": "min",
                "fields.c.ignore-retract": "true",
            },
            {"sequence.field": "e"},
        ]
    ),
    drop=st.booleans(),
    split=st.integers(1, 12),
)
def test_sequence_groups_match_model_and_are_associative(
    rows: list[Row], extra: dict[str, str], drop: bool, split: int
) -> None:
    if extra.get("fields.c.aggregate-function") == "bool_or":
        fields = [(n, pa.bool_() if n == "c" else t) for n, t in GROUP_FIELDS]
        rows = [r | {"c": None if r["c"] is None else r["c"] > 0} for r in rows]
    else:
        fields = GROUP_FIELDS
    options = {
        "merge-engine": "partial-update",
        "fields.g1.sequence-group": "a,b",
        "fields.g2,g3.sequence-group": "c,d",
    }
    e = make_engine(fields, options | extra)
    assert isinstance(e, PartialUpdate)
    check_engine(e, fields, rows, drop)
    subset = newest(e, rows, min(split, len(rows)), bool(e.sequence_fields))
    # Not associative in Paimon: removing a record on a group's -D (the -D's values are kept),
    # a retraction that comes first in a merge (initRow), a last_non_null_value retraction (its
    # null is lost once merged into an add).
    lnn_retraction = any(a.function == "last_non_null_value" for a in e.aggregates) and any(
        r["kind"] in ("-U", "-D") for r in rows
    )
    # Nor with aggregated group fields whose rows tie on the group's sequence: a tie counts as
    # newer (agg) within one merge, an older group sequence as older (aggReversed), so which
    # rows meet first decides the value.
    if e.aggregates and _group_sequence_ties(rows):
        return
    if e.delete_group is None and not lnn_retraction and first_in_merge_is_add(e, rows, subset):
        check_associative(e, fields, rows, min(split, len(rows)), by_sort_order=bool(e.sequence_fields))


def _group_sequence_ties(rows: list[Row]) -> bool:
    """Whether two rows of a key carry the same (not all null) sequence of a group."""
    for group in (("g1",), ("g2", "g3")):
        seen = [(r["k"], tuple(r[g] for g in group)) for r in rows if any(r[g] is not None for g in group)]
        if len(seen) != len(set(seen)):
            return True
    return False


AGG_FIELDS = [
    ("s", INT), ("p", INT), ("mx", INT), ("mn", pa.string()), ("lv", INT), ("ln", INT),
    ("fv", INT), ("fn", INT), ("la", pa.string()), ("ba", pa.bool_()), ("bo", pa.bool_()), ("f", pa.float64()),
    ("c", INT), ("c8", pa.int8()),
]  # fmt: skip
AGG_OPTIONS = {
    "merge-engine": "aggregation",
    "fields.s.aggregate-function": "sum",
    "fields.p.aggregate-function": "product",
    "fields.mx.aggregate-function": "max",
    "fields.mn.aggregate-function": "min",
    "fields.lv.aggregate-function": "last_value",
    "fields.ln.aggregate-function": "last_non_null_value",
    "fields.fv.aggregate-function": "first_value",
    "fields.fn.aggregate-function": "first_not_null_value",
    "fields.la.aggregate-function": "listagg",
    "fields.ba.aggregate-function": "bool_and",
    "fields.bo.aggregate-function": "bool_or",
    "fields.f.aggregate-function": "sum",
    "fields.c.aggregate-function": "count",
    "fields.c8.aggregate-function": "count",
}
IGNORE_RETRACT = {f"fields.{c}.ignore-retract": "true" for c in ("mx", "mn", "fv", "fn", "la", "ba", "bo", "c8")}
agg_columns = {
    "s": small,
    "p": st.one_of(st.none(), st.integers(-4, 4)),
    "mx": small,
    "mn": st.sampled_from([None, "", "b", "ab", "é"]),
    "lv": small,
    "ln": small,
    "fv": small,
    "fn": small,
    "la": st.sampled_from([None, "", " ", "a", "b,c", "a,,b"]),
    "ba": st.one_of(st.none(), st.booleans()),
    "bo": st.one_of(st.none(), st.booleans()),
    "f": st.one_of(st.none(), st.sampled_from([0.5, 2.0, -1.0, 4.0])),
    "c": st.one_of(st.none(), st.integers(-50, 50)),
    "c8": small,
}


@SETTINGS
@given(
    rows=row_lists(agg_columns, ALL_KINDS),
    variant=st.sampled_from(["adds", "retract", "remove", "distinct", "sequence", "ignore-delete"]),
    drop=st.booleans(),
    split=st.integers(0, 12),
)
def test_aggregation_matches_model_and_is_associative(rows: list[Row], variant: str, drop: bool, split: int) -> None:
    options = dict(AGG_OPTIONS)
    if variant == "adds":
        rows = [r | {"kind": "+I" if r["kind"] in ("-U", "-D") else r["kind"]} for r in rows]
    elif variant == "retract":
        options |= IGNORE_RETRACT
    elif variant == "remove":  # every retraction a -D: it removes the record, nothing retracts
        options |= {"aggregation.remove-record-on-delete": "true"}
        rows = [r | {"kind": "-D" if r["kind"] == "-U" else r["kind"]} for r in rows]
    elif variant == "distinct":
        options |= IGNORE_RETRACT | {"fields.la.distinct": "true", "fields.la.list-agg-delimiter": ","}
    elif variant == "sequence":
        options |= IGNORE_RETRACT
        options.pop("fields.fv.aggregate-function")
        options |= {"sequence.field": "fv", "sequence.field.sort-order": "descending"}
    else:
        options |= {"ignore-delete": "true"}
    e = make_engine(AGG_FIELDS, options)
    check_engine(e, AGG_FIELDS, rows, drop)
    # Associative in Paimon: adds, and retractions for sum / last_value / ignore-retract columns;
    # not product or last_non_null_value retractions, nor adds after a removing -D. Never count:
    # it adds 1 per row whatever the value, so a row that is already a merged count counts as 1
    # when merged again (merging 2 rows, then that result with a third, gives 2, not 3).
    assoc_fields = [
        (n, t)
        for n, t in AGG_FIELDS
        if n not in ("c", "c8") and (variant in ("adds", "ignore-delete") or n not in ("p", "ln"))
    ]
    if variant == "remove":
        return
    if variant == "sequence" and any(r["kind"] in ("-U", "-D") for r in rows):
        return  # a retraction nulls the sequence field (last_value), which moves the merged row
    rows_subset = [{k: v for k, v in r.items() if k in ("k", "seq", "kind") or k in dict(assoc_fields)} for r in rows]
    names = {n for n, _ in assoc_fields}
    sub = make_engine(
        assoc_fields, {k: v for k, v in options.items() if not k.startswith("fields.") or k.split(".")[1] in names}
    )
    check_associative(sub, assoc_fields, rows_subset, min(split, len(rows)), by_sort_order=bool(sub.sequence_fields))


# fields, the NOT NULL ones, a strategy per column, options
NNCase = tuple[list[tuple[str, pa.DataType]], list[str], dict[str, st.SearchStrategy[Any]], dict[str, str]]
NN_CASES: dict[str, NNCase] = {
    "partial-update": (
        [("a", INT), ("b", pa.string()), ("c", INT)], ["a"],
        {"a": st.integers(-3, 3), "b": st.sampled_from([None, "x", "y"]), "c": small},
        {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
    ),
    "sequence-groups": (
        GROUP_FIELDS, ["g2", "e"],
        {"a": small, "b": small, "g1": seq_values, "c": small, "d": small, "g2": st.integers(0, 3), "g3": seq_values,
         "e": st.integers(-3, 3)},
        {"merge-engine": "partial-update", "fields.g1.sequence-group": "a,b", "fields.g2,g3.sequence-group": "c,d",
         "fields.b.aggregate-function": "sum"},
    ),
    "aggregation": (
        [("s", INT), ("t", INT), ("l", pa.string()), ("fv", INT)], ["s", "fv"],
        {"s": st.integers(-3, 3), "t": small, "l": st.sampled_from([None, "x", "y"]), "fv": st.integers(-3, 3)},
        {"merge-engine": "aggregation", "fields.s.aggregate-function": "sum", "fields.t.aggregate-function": "sum",
         "fields.fv.aggregate-function": "first_value", "aggregation.remove-record-on-delete": "true"},
    ),
}  # fmt: skip


@SETTINGS
@given(
    data=st.data(),
    case=st.sampled_from(sorted(NN_CASES)),
    delete_group=st.sampled_from([None, "g1", "g3"]),
    drop=st.booleans(),
)
def test_restarted_records_take_only_not_null_columns_as_the_model(
    data: Any, case: str, delete_group: str | None, drop: bool
) -> None:
    """A record restarted from a row (a removing -D, a group's delete, a retraction that comes
    first) takes that row's NOT NULL values and no other (Paimon's initRow); NOT NULL columns
    always hold a value here, as writers require."""
    fields, not_null, columns, options = NN_CASES[case]
    if case == "sequence-groups" and delete_group is not None:
        options = options | {"partial-update.remove-record-on-sequence-group": delete_group}
    # aggregation: every retraction a -D, which removes the record (first_value cannot retract)
    rows = data.draw(row_lists(columns, ["+I", "+U", "-D"] if case == "aggregation" else ALL_KINDS))
    e = make_engine(fields, options, not_null)
    assert e.not_null == {"k", *not_null}
    check_engine(e, fields, rows, drop)


def test_merge_of_nothing_and_of_one_row() -> None:
    fields = [("v", INT)]
    for engine in ("deduplicate", "first-row", "partial-update", "aggregation"):
        e = make_engine(fields, {"merge-engine": engine})
        assert e.merge(kv_table(fields, []), KEYS, drop_deletes=True).num_rows == 0
        one = [{"k": 1, "seq": 5, "kind": "+U", "v": 3}]
        assert merged(e, fields, one) == [{"k": 1, "seq": 5, "kind": "+U", "v": 3}]


@pytest.mark.parametrize(
    ("options", "engine_class", "kind", "keeps_last_row", "needs_lookup"),
    [
        ({}, Deduplicate, MergeEngineKind.DEDUPLICATE, True, False),
        ({"sequence.field": "v"}, Deduplicate, MergeEngineKind.DEDUPLICATE, False, False),
        ({"merge-engine": "first-row"}, FirstRow, MergeEngineKind.FIRST_ROW, False, True),
        ({"merge-engine": " First-Row "}, FirstRow, MergeEngineKind.FIRST_ROW, False, True),
        ({"merge-engine": "partial-update"}, PartialUpdate, MergeEngineKind.PARTIAL_UPDATE, False, False),
        ({"merge-engine": "aggregation"}, Aggregation, MergeEngineKind.AGGREGATION, False, False),
    ],
)
def test_dispatch_picks_the_engine_class_with_its_kind_and_flags(
    options: dict[str, str],
    engine_class: type[MergeEngine],
    kind: MergeEngineKind,
    keeps_last_row: bool,
    needs_lookup: bool,
) -> None:
    e = make_engine([("v", INT)], options)
    assert type(e) is engine_class
    assert e.kind is kind and engine_class.kind is kind
    assert e.keeps_last_row is keeps_last_row
    # Only first-row looks keys up in compaction, which keeps keys unique across levels above 0.
    assert e.needs_lookup is needs_lookup
    assert e.keys_unique_across_levels is needs_lookup
