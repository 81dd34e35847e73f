"""Schema evolution: column changes and option changes as new schema files, and every read
path (merge-on-read, compaction, lookup changelog, change streams) mapping files of older
schemas to the current one by field id."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import changelake
from changelake.errors import DataError, OptionError, ScanError, SchemaError, SchemaMismatchError

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("a", pa.int32()), ("b", pa.string()),
                    ("c", pa.float32()), ("d", pa.decimal128(5, 2))])


def _table(tmp_path: Path, **options: str) -> changelake.Table:
    return changelake.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["id", "p"], partition_keys=["p"], options={"bucket": "1", **options})


def _first_rows() -> pa.Table:
    return pa.table({"id": [1, 2, 3], "p": ["x", "x", "y"], "a": pa.array([1, 2, 3], pa.int32()),
                     "b": ["b1", "b2", "b3"], "c": pa.array([1.5, 2.5, 3.5], pa.float32()),
                     "d": pa.array([1, 2, 3], pa.decimal128(5, 2))})


def _evolve(table: changelake.Table) -> None:
    with table.update_schema() as u:
        u.add_column("e", pa.string(), after="a", doc="added")
        u.drop_column("b")
        u.rename_column("c", "cc")
        u.update_column("a", pa.int64())
        u.update_column("cc", pa.float64())
        u.update_column("d", pa.decimal128(9, 2))


def _schema_files(table: changelake.Table) -> list[str]:
    return sorted(n for n in os.listdir(f"{table.location}/schema") if n.startswith("schema-"))


def _rows(table: changelake.Table, **kwargs: Any) -> list[dict[str, Any]]:
    return sorted(table.scan(**kwargs).to_arrow().to_pylist(), key=lambda r: r["id"])


EVOLVED = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False),
                     ("a", pa.int64()), ("e", pa.string()), ("cc", pa.float64()), ("d", pa.decimal128(9, 2))])


def _old_rows_evolved() -> list[dict[str, Any]]:
    old = _first_rows().to_pylist()
    return [{"id": r["id"], "p": r["p"], "a": r["a"], "e": None, "cc": r["c"], "d": r["d"]} for r in old]


def test_one_block_lands_as_one_schema_with_paimon_field_ids(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_first_rows())
    _evolve(table)
    assert _schema_files(table) == ["schema-0", "schema-1"]
    stored = json.loads(Path(f"{table.location}/schema/schema-1").read_text())
    assert stored["id"] == 1
    assert [(f["id"], f["name"], f["type"]) for f in stored["fields"]] == [
        (0, "id", "BIGINT NOT NULL"), (1, "p", "STRING NOT NULL"), (2, "a", "BIGINT"), (6, "e", "STRING"),
        (4, "cc", "DOUBLE"), (5, "d", "DECIMAL(9, 2)")]
    assert stored["fields"][3]["description"] == "added"
    assert stored["highestFieldId"] == 6
    assert stored["primaryKeys"] == ["id", "p"] and stored["partitionKeys"] == ["p"]
    assert table.schema == EVOLVED
    # the user's Table works on the new schema; another handle sees it after refresh
    assert _rows(table) == _old_rows_evolved()
    other = changelake.Catalog(str(tmp_path)).get_table("db.t")
    assert other.schema == EVOLVED


def test_merge_on_read_compaction_and_old_shaped_writes(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"write-only": "true"})
    table.write(_first_rows())
    _evolve(table)
    table.write(pa.table({"id": [2, 4], "p": ["x", "y"], "a": [20, 2**40], "e": ["e2", "e4"],
                          "cc": [9.25, 1e300], "d": pa.array([1, 2], pa.decimal128(9, 2))}))
    # an input without the added column: it is null, as Paimon fills it
    table.write(pa.table({"id": [5], "p": ["x"], "a": [50], "cc": [0.5], "d": pa.array([5], pa.decimal128(9, 2))}))
    files = [f for split in table.scan().plan() for f in split.files]
    assert sorted({f.schema_id for f in files}) == [0, 1]  # old and new files merged on read
    expected = {r["id"]: r for r in _old_rows_evolved()}
    expected[2] = {**expected[2], "a": 20, "e": "e2", "cc": 9.25, "d": Decimal("1.00")}
    expected[4] = {"id": 4, "p": "y", "a": 2**40, "e": "e4", "cc": 1e300, "d": Decimal("2.00")}
    expected[5] = {"id": 5, "p": "x", "a": 50, "e": None, "cc": 0.5, "d": Decimal("5.00")}
    want = [expected[k] for k in sorted(expected)]
    assert _rows(table) == want
    assert table.compact(full=True) is not None
    assert {f.schema_id for split in table.scan().plan() for f in split.files} == {1}
    assert _rows(table) == want
    # time travel reads a snapshot of the old schema in that schema, as Paimon; or in the current one
    assert _rows(table, snapshot_id=1) == _first_rows().to_pylist()
    assert _rows(table, snapshot_id=1, time_travel_schema="latest") == _old_rows_evolved()


def test_writes_shaped_wrongly_name_the_difference(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_first_rows())
    _evolve(table)
    with pytest.raises(SchemaMismatchError, match=r"not in the table: \['b'\]") as dropped:
        table.write(_first_rows().rename_columns(["id", "p", "a", "b", "cc", "d"]))
    assert dropped.value.table == "db.t"
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['cc'\]"):
        table.write(pa.table({"id": [9], "p": ["x"], "a": [1], "e": ["v"], "d": pa.array([1], pa.decimal128(9, 2))}))


def test_writer_opened_before_the_change_keeps_its_schema(tmp_path: Path) -> None:
    table = _table(tmp_path)
    writer = table.writer(commit_user="early")
    _evolve(table)
    writer.write(_first_rows())
    [landed] = writer.commit(1)
    writer.close()
    assert landed.schema_id == 1  # as Paimon, the snapshot names the newest schema
    assert {f.schema_id for split in table.scan().plan() for f in split.files} == {0}
    assert _rows(table) == _old_rows_evolved()


def test_failing_block_writes_nothing(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_first_rows())
    with pytest.raises(SchemaError, match="primary-key column") as refused, table.update_schema() as u:
        u.add_column("e", pa.string())
        u.rename_column("id", "key")
        u.drop_column("key")
    assert refused.value.column == "key"
    with pytest.raises(RuntimeError, match="boom"), table.update_schema() as u:
        u.add_column("e", pa.string())
        raise RuntimeError("boom")
    assert _schema_files(table) == ["schema-0"]
    assert table.schema == SCHEMA.set(0, SCHEMA.field(0).with_nullable(False)).set(
        1, SCHEMA.field(1).with_nullable(False))


@pytest.mark.parametrize(("change", "message", "column"), [
    (lambda u: u.drop_column("id"), "primary-key column", "id"),
    (lambda u: u.drop_column("p"), "partition column", "p"),
    (lambda u: u.rename_column("p", "q"), "partition column", "p"),
    (lambda u: u.update_column("id", pa.int32()), "primary-key column", "id"),
    (lambda u: u.rename_column("id", "key").update_column("key", pa.int32()), "primary-key column", "key"),
    (lambda u: u.drop_column("nope"), "is not a column", "nope"),
    (lambda u: u.rename_column("a", "b"), "already a column", "b"),
    (lambda u: u.add_column("a", pa.int64()), "already a column", "a"),
    (lambda u: u.add_column("_KEY_x", pa.int64()), "reserves", "_KEY_x"),
    (lambda u: u.update_column("a", pa.int16()), "only widenings", "a"),
    (lambda u: u.update_column("a", pa.float64()), "only widenings", "a"),
    (lambda u: u.update_column("b", pa.int64()), "only widenings", "b"),
    (lambda u: u.update_column("d", pa.decimal128(9, 3)), "only widenings", "d"),
    (lambda u: u.update_column("c", pa.float32()), "only widenings", "c"),
])
def test_refused_column_changes(tmp_path: Path, change: Any, message: str, column: str) -> None:
    table = _table(tmp_path)
    with pytest.raises(SchemaError, match=message) as refused, table.update_schema() as u:
        change(u)
    assert refused.value.column == column
    assert _schema_files(table) == ["schema-0"]


def test_columns_named_by_options_stay(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"sequence.field": "a", "fields.b.stats-mode": "full"})
    with pytest.raises(SchemaError, match=r"option 'sequence\.field'"), table.update_schema() as u:
        u.drop_column("a")
    # what Paimon's rename does not follow stays refused
    with pytest.raises(SchemaError, match=r"option 'fields\.b\.stats-mode'") as refused, table.update_schema() as u:
        u.rename_column("b", "z")
    assert refused.value.column == "b"
    assert _schema_files(table) == ["schema-0"]


@pytest.mark.parametrize("options", [
    {"changelog-producer": "lookup"},
    {"deletion-vectors.enabled": "true"},
    {"changelog-producer": "input", "data-file.thin-mode": "true"},
], ids=["lookup", "deletion-vectors", "thin"])
def test_a_renamed_primary_key_merges_old_and_new_files(tmp_path: Path, options: dict[str, str]) -> None:
    """Paimon renames primary keys too: files written before keep ``_KEY_id``, later ones have
    ``_KEY_key``, and every path that reads keys (merge on read, compaction, lookups, changes)
    takes both as one key."""
    table = _table(tmp_path, **options)
    table.write(_first_rows())
    first = table.latest_snapshot().id  # (its COMPACT, where level 0 goes up at once)
    with table.update_schema() as u:
        u.rename_column("id", "key")
    table = changelake.Catalog(str(tmp_path)).get_table("db.t")
    assert table.primary_keys == ["key", "p"] and table.schema.names[0] == "key"
    renamed = pa.schema([table.schema.field(i) for i in range(len(SCHEMA))])
    later = pa.table({"key": [2, 4], "p": ["x", "x"], "a": pa.array([20, 40], pa.int32()), "b": ["u2", "n4"],
                      "c": pa.array([0.5, 0.5], pa.float32()), "d": pa.array([2, 4], pa.decimal128(5, 2))},
                     schema=renamed)
    table.write(later)
    table.delete("key = 3")
    expected = [{**r, "key": r.pop("id")} for r in _first_rows().to_pylist() if r["id"] == 1] + later.to_pylist()
    expected = [{n: r[n] for n in renamed.names} for r in expected]

    def rows() -> list[dict[str, Any]]:
        return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["key"])

    assert rows() == expected
    table.compact(full=True)
    assert rows() == expected
    assert table.scan(snapshot_id=first).to_arrow().column_names[0] == "id"
    # the changes after the first write, folded over its rows (old name, old files), are the table
    state = {(r["id"], r["p"]): {"key": r["id"], **{n: r[n] for n in renamed.names[1:]}}
             for r in table.scan(snapshot_id=first).to_arrow().to_pylist()}
    for change in table.changes(first, table.latest_snapshot().id).to_arrow().to_pylist():
        kind = change.pop("rowkind")
        if kind in ("+I", "+U"):
            state[(change["key"], change["p"])] = change
        else:
            state.pop((change["key"], change["p"]))
    assert sorted(state.values(), key=lambda r: r["key"]) == expected


def test_columns_the_merge_options_name_widen_and_a_bucket_key_does_not(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("total", pa.int32()), ("ts", pa.int32())])
    catalog = changelake.Catalog(str(tmp_path))
    table = catalog.create_table("db.agg", schema, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "aggregation", "sequence.field": "ts", "fields.total.aggregate-function": "sum"})
    table.write(pa.table({"id": [1, 2], "total": [2**31 - 1, 5], "ts": [7, 7]}, schema=schema))
    with table.update_schema() as u:
        u.update_column("total", pa.int64())
        u.update_column("ts", pa.int64())
    table = catalog.get_table("db.agg")
    table.write(pa.table({"id": [1, 2], "total": [2**31, 1], "ts": [2**32, 3]}))
    expected = [{"id": 1, "total": 2**32 - 1, "ts": 2**32}, {"id": 2, "total": 6, "ts": 7}]
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    table.compact(full=True)
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    keyed = pa.schema([("k", pa.int32()), ("v", pa.string())])
    append = catalog.create_table("db.app", keyed, options={"bucket": "2", "bucket-key": "k"})
    with pytest.raises(SchemaError, match=r"option 'bucket-key'"), append.update_schema() as u:
        u.update_column("k", pa.int64())


def test_a_rename_follows_the_options_naming_the_column_as_paimon_does(tmp_path: Path) -> None:
    """Paimon's rename rewrites ``sequence.field``, ``bucket-key``, a column's aggregation settings
    and both sides of a sequence group; merges go on by the new names over files of both."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("total", pa.int64()), ("tags", pa.string()),
                        ("ts", pa.int64()), ("g", pa.int64()), ("a", pa.string())])
    catalog = changelake.Catalog(str(tmp_path))
    table = catalog.create_table("db.agg", schema, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "aggregation", "sequence.field": "ts",
        "fields.total.aggregate-function": "sum", "fields.tags.aggregate-function": "listagg",
        "fields.tags.list-agg-delimiter": ";", "fields.a.ignore-retract": "true",
        "fields.g.aggregate-function": "max", "fields.a.aggregate-function": "last_non_null_value"})
    table.write(pa.table({"id": [1, 2], "total": [10, 20], "tags": ["x", "y"], "ts": [1, 1], "g": [1, 1],
                          "a": ["a1", "a2"]}, schema=schema))
    with table.update_schema() as u:
        u.rename_column("total", "amount")
        u.rename_column("tags", "labels")
        u.rename_column("ts", "version")
        u.rename_column("a", "aa")
    table = catalog.get_table("db.agg")
    options = table.options
    assert options["sequence.field"] == "version"
    assert {k for k in options if k.startswith("fields.")} == {
        "fields.amount.aggregate-function", "fields.labels.aggregate-function", "fields.labels.list-agg-delimiter",
        "fields.aa.ignore-retract", "fields.g.aggregate-function", "fields.aa.aggregate-function"}
    renamed = pa.schema([schema.field(0), ("amount", pa.int64()), ("labels", pa.string()), ("version", pa.int64()),
                         ("g", pa.int64()), ("aa", pa.string())])
    table.write(pa.table({"id": [1, 2], "amount": [5, 7], "labels": ["z", None], "version": [2, 0], "g": [0, 3],
                          "aa": [None, "b2"]}, schema=renamed))
    expected = [{"id": 1, "amount": 15, "labels": "x;z", "version": 2, "g": 1, "aa": "a1"},
                {"id": 2, "amount": 27, "labels": "y", "version": 1, "g": 3, "aa": "a2"}]  # version 0 is older
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    table.compact(full=True)
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected

    groups = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.int64()), ("a", pa.string()),
                        ("b", pa.string())])
    partial = catalog.create_table("db.pu", groups, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "partial-update", "fields.s.sequence-group": "a,b"})
    partial.write(pa.table({"id": [1], "s": [5], "a": ["new"], "b": ["new"]}, schema=groups))
    with partial.update_schema() as u:
        u.rename_column("s", "seq")
        u.rename_column("a", "first")
    partial = catalog.get_table("db.pu")
    assert partial.options["fields.seq.sequence-group"] == "first,b"
    assert "fields.s.sequence-group" not in partial.options
    # an older version of the group loses to the newer one written before the rename
    older = pa.schema([groups.field(0), ("seq", pa.int64()), ("first", pa.string()), ("b", pa.string())])
    partial.write(pa.table({"id": [1], "seq": [3], "first": ["old"], "b": ["old"]}, schema=older))
    assert partial.scan().to_arrow().to_pylist() == [{"id": 1, "seq": 5, "first": "new", "b": "new"}]

    keyed = pa.schema([("k", pa.int64()), ("v", pa.string())])
    append = catalog.create_table("db.app", keyed, options={"bucket": "2", "bucket-key": "k"})
    append.write(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}, schema=keyed))
    with append.update_schema() as u:
        u.rename_column("k", "key")
    append = catalog.get_table("db.app")
    assert append.options["bucket-key"] == "key"
    append.write(pa.table({"key": [1, 4], "v": ["d", "e"]}))
    scan = append.scan()
    buckets = {split.bucket: scan.read_split(split).column("key").to_pylist() for split in scan.plan()}
    assert sorted(k for keys in buckets.values() for k in keys) == [1, 1, 2, 3, 4]
    # a key hashes to its bucket by its value, whatever the column's name
    assert any(keys.count(1) == 2 for keys in buckets.values())


def test_set_and_reset_options(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.write(_first_rows())
    table.set_options({"file.compression": "lz4", "target-file-size": "64 mb"})
    assert table.options["file.compression"] == "lz4"
    table.write(_first_rows())
    table.reset_options(["file.compression"])
    assert "file.compression" not in table.options and table.options["target-file-size"] == "64 mb"
    assert _schema_files(table) == ["schema-0", "schema-1", "schema-2"]
    for options, option in (({"bucket": "-1"}, "bucket"), ({"merge-engine": "first-row"}, "merge-engine"),
                            ({"sequence.field": "a"}, "sequence.field"), ({"bucket-key": "id"}, "bucket-key"),
                            ({"no-such-option": "1"}, "no-such-option"), ({"file.format": "csv"}, "file.format"),
                            ({"target-file-size": "lots"}, "target-file-size")):
        with pytest.raises(OptionError) as refused:
            table.set_options(options)
        assert refused.value.option == option
    with pytest.raises(OptionError) as refused:
        table.reset_options(["bucket"])
    assert refused.value.option == "bucket"
    assert _schema_files(table) == ["schema-0", "schema-1", "schema-2"]
    assert _rows(table) == sorted(_first_rows().to_pylist(), key=lambda r: r["id"])


def test_immutable_options_change_while_the_table_is_empty(tmp_path: Path) -> None:
    table = _table(tmp_path)
    table.set_options({"merge-engine": "first-row"})
    assert table.options["merge-engine"] == "first-row"


def test_concurrent_schema_changes_both_land(tmp_path: Path) -> None:
    first = _table(tmp_path)
    second = changelake.Catalog(str(tmp_path)).get_table("db.t")
    with first.update_schema() as u:
        u.add_column("x", pa.int64())
    with second.update_schema() as u:  # written on top of schema-1, which it had not seen
        u.add_column("y", pa.int64())
    assert _schema_files(first) == ["schema-0", "schema-1", "schema-2"]
    assert second.schema.names[-2:] == ["x", "y"]
    assert "y" not in first.schema.names
    first.refresh()
    assert first.schema == second.schema


def test_change_stream_across_the_change(tmp_path: Path) -> None:
    table = _table(tmp_path)
    before = table.write(_first_rows())
    assert before is not None
    _evolve(table)
    table.write(pa.table({"id": [2], "p": ["x"], "a": [20], "e": ["e2"], "cc": [9.0],
                          "d": pa.array([1], pa.decimal128(9, 2))}))
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.changes(0, latest.id).to_arrow()
    assert changes.schema.names == ["rowkind", *EVOLVED.names]
    rows = changes.to_pylist()
    assert {(r["rowkind"], r["id"], r["e"], r["cc"]) for r in rows} == {
        ("+I", 1, None, 1.5), ("+I", 2, None, 2.5), ("+I", 3, None, 3.5), ("+I", 2, "e2", 9.0)}


def test_lookup_changelog_reads_old_files_in_the_new_schema(tmp_path: Path) -> None:
    table = _table(tmp_path, **{"changelog-producer": "lookup"})
    start = table.write(_first_rows())
    assert start is not None
    _evolve(table)
    table.write(pa.table({"id": [2], "p": ["x"], "a": [20], "e": ["e2"], "cc": [2.5],
                          "d": pa.array([2], pa.decimal128(9, 2))}))
    latest = table.latest_snapshot()
    assert latest is not None
    rows = table.changes(start.id, latest.id).to_arrow().to_pylist()
    by_kind = {r["rowkind"]: r for r in rows if r["id"] == 2}
    assert by_kind["-U"]["a"] == 2 and by_kind["-U"]["e"] is None and by_kind["-U"]["cc"] == 2.5
    assert by_kind["+U"]["a"] == 20 and by_kind["+U"]["e"] == "e2"


def test_a_writer_on_an_older_schema_does_not_compact_newer_files(tmp_path: Path) -> None:
    stale = _table(tmp_path, **{"write-only": "true"})
    stale.write(_first_rows())
    current = changelake.Catalog(str(tmp_path)).get_table("db.t")
    _evolve(current)
    current.write(pa.table({"id": [1], "p": ["x"], "a": [10], "e": ["e1"], "cc": [1.0],
                            "d": pa.array([1], pa.decimal128(9, 2))}))
    with pytest.raises(SchemaError, match="newer than this writer's schema 0") as refused:
        stale.compact(full=True)
    assert refused.value.file is not None and refused.value.table == "db.t"
    stale.refresh()
    stale.compact(full=True)
    assert [r for r in _rows(stale) if r["id"] == 1] == [{"id": 1, "p": "x", "a": 10, "e": "e1", "cc": 1.0,
                                                          "d": Decimal("1.00")}]


def test_time_travel_reads_the_snapshots_schema_as_paimon(tmp_path: Path) -> None:
    """A snapshot chosen by id, tag or time (a scan, or where a stream starts) is read in the
    schema it was committed with; ``scan.time-travel.schema = latest`` keeps the table's."""
    table = _table(tmp_path)
    first = table.write(_first_rows())
    assert first is not None
    table.create_tag("t1", first.id)
    _evolve(table)
    table.write(pa.table({"id": [2], "p": ["x"], "a": [20], "e": ["e2"], "cc": [9.25],
                          "d": pa.array([1], pa.decimal128(9, 2))}))
    old = _first_rows().to_pylist()
    for travel in ({"snapshot_id": first.id}, {"tag": "t1"}, {"timestamp_ms": first.time_millis}):
        scan = table.scan(**travel)
        assert scan.output_schema == SCHEMA.remove(0).insert(0, EVOLVED.field("id")).set(
            1, EVOLVED.field("p")), travel
        assert _rows(table, **travel) == old
    # columns and filters name the snapshot's columns, also when the snapshot is chosen last
    assert table.scan(snapshot_id=first.id, columns=["b", "c"], filter="c > 2").to_arrow().to_pylist() == [
        {"b": "b2", "c": 2.5}, {"b": "b3", "c": 3.5}]
    assert table.scan().at_tag("t1").select("id", "b").to_arrow().num_rows == 3
    with pytest.raises(ScanError, match=r"unknown columns \['b'\]"):
        table.scan(tag="t1", columns=["id", "b"]).at_snapshot(2)
    assert _rows(table, tag="t1", time_travel_schema="latest") == _old_rows_evolved()
    with pytest.raises(OptionError, match=r"scan\.time-travel\.schema") as bad:
        table.scan(snapshot_id=1, time_travel_schema="newest")
    assert bad.value.table == "db.t"
    # a stream from snapshot 1 reads the newer file in snapshot 1's schema: the renamed column
    # under its old name, the dropped one null, the widened ones cast back
    stream = table.stream(snapshot_id=first.id, mode="from-snapshot-full")
    assert stream.schema.names == ["rowkind", *SCHEMA.names]
    rows = [r for batch in stream for r in batch.data.to_pylist()]
    assert rows[-1] == {"rowkind": "+I", "id": 2, "p": "x", "a": 20, "b": None, "c": 9.25, "d": Decimal("1.00")}
    assert len(rows) == 4
    # the table option keeps the table's schema for every time travel
    table.set_options({"scan.time-travel.schema": "latest"})
    assert _rows(table, snapshot_id=first.id) == _old_rows_evolved()
    assert table.stream(tag="t1", mode="from-snapshot-full").schema.names == ["rowkind", *EVOLVED.names]


def test_type_changes_only_paimon_makes_read_older_values_as_paimon_casts_them(tmp_path: Path) -> None:
    """Java Paimon's ALTER TABLE changes types ``update_column`` refuses (DOUBLE to STRING or
    DECIMAL, STRING to INT); files written before are read through Paimon's cast rules, and a
    value the rule cannot cast fails the read naming the column, as Java's read fails."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.float64()), ("w", pa.float64()),
                        ("s", pa.string())])
    table = changelake.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["id"],
                                                           options={"bucket": "1"})
    table.write(pa.table({"id": [1, 2, 3], "v": [1.0, 1e20, 0.125], "w": [0.125, -2.675, 1e20],
                          "s": ["12", "-7.9", "x"]}, schema=schema))

    def alter(changed: dict[str, str]) -> None:  # the schema file Java's ALTER TABLE writes
        latest = max(int(n.removeprefix("schema-")) for n in _schema_files(table))
        stored = json.loads(Path(f"{table.location}/schema/schema-{latest}").read_text())
        stored["id"] = latest + 1
        stored["fields"] = [{**f, "type": changed.get(f["name"], f["type"])} for f in stored["fields"]]
        Path(f"{table.location}/schema/schema-{latest + 1}").write_text(json.dumps(stored))
        table.refresh()

    alter({"v": "STRING", "w": "DECIMAL(10, 2)"})
    rows = _rows(table, columns=["id", "v", "w"])
    assert [(r["v"], r["w"]) for r in rows] == [("1.0", Decimal("0.13")), ("1.0E20", Decimal("-2.68")),
                                                ("0.125", None)]
    alter({"s": "INT"})
    with pytest.raises(DataError, match="'x' is not a whole number") as failed:
        table.scan().to_arrow()
    assert (failed.value.table, failed.value.column) == ("db.t", "s")


def test_a_stream_in_an_older_schema_never_wraps_a_wider_value(tmp_path: Path) -> None:
    """A stream keeps the schema it began with (a snapshot's, or the table's when it was made):
    values written after a widening that fit the old type read as they are; one that does not
    is a DataError naming the column, not a wrapped number; in the newest schema it reads."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int32())])
    table = changelake.Catalog(str(tmp_path)).create_table(
        "db.s", schema, primary_keys=["id"], options={"bucket": "1", "changelog-producer": "input"})
    table.write(pa.table({"id": [1], "v": pa.array([5], pa.int32())}, schema=schema))
    follower = table.stream(mode="latest-full")
    assert [r["v"] for b in follower for r in b.data.to_pylist()] == [5]
    with table.update_schema() as u:
        u.update_column("v", pa.int64())
    table = changelake.Catalog(str(tmp_path)).get_table("db.s")
    table.write(pa.table({"id": [2], "v": [7]}))
    assert [r["v"] for b in follower for r in b.data.to_pylist()] == [7]  # fits: read as it is
    table.write(pa.table({"id": [3], "v": [2**40]}))
    with pytest.raises(DataError, match=r"does not fit INT.*scan\.time-travel\.schema=latest") as raised:
        list(follower)
    assert raised.value.column == "v"
    from_first = table.stream(mode="from-snapshot", snapshot_id=1)
    with pytest.raises(DataError, match="does not fit INT"):
        list(from_first)
    newest = table.stream(mode="from-snapshot", snapshot_id=1, options={"scan.time-travel.schema": "latest"})
    assert [r["v"] for b in newest for r in b.data.to_pylist()] == [5, 7, 2**40]
