"""Bad input gives a clear error of the right type, naming the table and the culprit (column,
option or file), and writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from fsspec.registry import known_implementations

import changelake as cl
from changelake import errors
from changelake.table.read import live_files

SCHEMA = pa.schema([
    pa.field("dt", pa.string(), nullable=False),
    pa.field("id", pa.int64(), nullable=False),
    pa.field("v", pa.int32()),
    pa.field("s", pa.string()),
])
KEYS = ["dt", "id"]


@pytest.fixture
def catalog(tmp_path: Path) -> cl.Catalog:
    return cl.Catalog(str(tmp_path / "warehouse"))


@pytest.fixture
def table(catalog: cl.Catalog) -> cl.Table:
    """db.t with one commit already in it."""
    table = catalog.create_table("db.t", schema=SCHEMA, primary_keys=KEYS, partition_keys=["dt"],
                                 options={"bucket": "2"})
    table.write(good_rows())
    return table


def good_rows(n: int = 5) -> pa.Table:
    return pa.table({
        "dt": ["2024-01-01"] * n,
        "id": pa.array(range(n), pa.int64()),
        "v": pa.array(range(n), pa.int32()),
        "s": [f"s{i}" for i in range(n)],
    })


def tree(root: str | Path) -> dict[str, bytes]:
    """Every file under ``root`` with its content."""
    out = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def assert_names(message: str, *parts: str) -> None:
    for part in parts:
        assert part in message, f"{part!r} not in error message {message!r}"


def assert_names_table(message: str, table: cl.Table) -> None:
    """The message identifies the table: by name, or by a path inside the table."""
    assert table.name in message or table.location in message, f"table not named in {message!r}"


# -- writes --------------------------------------------------------------------------------------


def replace_column(data: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return data.set_column(data.schema.get_field_index(name), name, values)


BAD_WRITES: dict[str, tuple[Any, type[errors.ChangelakeError], list[str]]] = {
    "null primary key": (
        replace_column(good_rows(), "id", pa.array([0, 1, None, 3, 4], pa.int64())), errors.NullKeyError, ["'id'"]),
    "null partition": (
        replace_column(good_rows(), "dt", pa.array(["a", None, "b", "c", "d"])), errors.NullKeyError, ["'dt'"]),
    "missing column": (good_rows().drop_columns(["s"]), errors.SchemaMismatchError, ["'s'"]),
    "missing key column": (good_rows().drop_columns(["id"]), errors.SchemaMismatchError, ["'id'"]),
    "unknown column": (good_rows().append_column("colour", pa.array(["red"] * 5)),
                       errors.SchemaMismatchError, ["'colour'"]),
    "int64 overflows int32": (replace_column(good_rows(), "v", pa.array([1, 2, 2**40, 4, 5], pa.int64())),
                              errors.SchemaMismatchError, ["'v'", "int32"]),
    "fractional float into int64": (replace_column(good_rows(), "id", pa.array([0.0, 1.5, 2.0, 3.0, 4.0])),
                                    errors.SchemaMismatchError, ["'id'", "int64"]),
    "non-numeric string into int64": (replace_column(good_rows(), "id", pa.array(["0", "1", "abc", "3", "4"])),
                                      errors.SchemaMismatchError, ["'id'", "string", "int64"]),
    # Strings are never parsed into numbers, even when every one would parse.
    "numeric string into int64": (replace_column(good_rows(), "id", pa.array(["0", "1", "10", "3", "4"])),
                                  errors.SchemaMismatchError, ["'id'", "string", "int64"]),
    "string into int32 value": (replace_column(good_rows(), "v", pa.array(["x"] * 5)),
                                errors.SchemaMismatchError, ["'v'"]),
    "invalid rowkind": (good_rows().append_column("rowkind", pa.array(["+I", "+U", "+X", "-D", "+I"])),
                        errors.RowKindError, ["'+X'", "rowkind"]),
    "null rowkind": (good_rows().append_column("rowkind", pa.array(["+I", None, "+I", "+I", "+I"], pa.string())),
                     errors.RowKindError, ["rowkind"]),
    "rowkind of wrong type": (good_rows().append_column("rowkind", pa.array([0, 1, 2, 3, 0], pa.int8())),
                              errors.RowKindError, ["rowkind", "int8"]),
    "duplicate column": (good_rows().append_column("v", pa.array(range(5), pa.int32())),
                         errors.SchemaMismatchError, ["'v'"]),
    "not a table": ([{"dt": "a", "id": 1, "v": 1, "s": "x"}], errors.DataError, ["list"]),
}


@pytest.mark.parametrize("case", list(BAD_WRITES))
def test_bad_write_is_rejected_and_writes_nothing(table: cl.Table, case: str) -> None:
    data, error, culprits = BAD_WRITES[case]
    before = tree(table.location)
    with pytest.raises(error) as info:
        table.write(data)
    assert isinstance(info.value, errors.ChangelakeError)
    assert_names_table(str(info.value), table)
    assert_names(str(info.value), *culprits)
    assert tree(table.location) == before
    latest = table.latest_snapshot()
    assert latest is not None and latest.id == 1
    assert table.scan().to_arrow().num_rows == 5


def test_bad_row_deep_in_a_large_batch_writes_nothing(table: cl.Table) -> None:
    before = tree(table.location)
    n = 10_000
    data = pa.table({
        "dt": [f"2024-01-{i % 28 + 1:02d}" for i in range(n)],
        "id": pa.array([None if i == n - 3 else i for i in range(n)], pa.int64()),
        "v": pa.array(range(n), pa.int32()),
        "s": ["x"] * n,
    })
    with pytest.raises(errors.NullKeyError, match="'id'"):
        table.write(data)
    assert tree(table.location) == before


def test_bad_batch_in_a_record_batch_reader_writes_nothing(table: cl.Table) -> None:
    before = tree(table.location)
    good = good_rows().to_batches()[0]
    bad = replace_column(good_rows(), "v", pa.array([1, 2, 3, 4, None], pa.int32()))
    bad = replace_column(bad, "dt", pa.array(["x", "x", "x", None, "x"])).to_batches()[0]
    reader = pa.RecordBatchReader.from_batches(good.schema, [good, good, bad])
    with pytest.raises(errors.NullKeyError, match="'dt'"):
        table.write(reader)
    assert tree(table.location) == before


def test_bad_pandas_frame_writes_nothing(table: cl.Table) -> None:
    before = tree(table.location)
    frame = pd.DataFrame({"dt": ["a", "b"], "id": [1, None], "v": [1, 2], "s": ["x", "y"]})
    with pytest.raises(errors.DataError) as info:
        table.write(frame)
    assert_names(str(info.value), "db.t", "'id'")
    assert tree(table.location) == before


def test_failed_write_does_not_poison_the_writer(table: cl.Table) -> None:
    writer = table.writer()
    with pytest.raises(errors.NullKeyError):
        writer.write(replace_column(good_rows(), "id", pa.array([None] * 5, pa.int64())))
    writer.write(good_rows(7))
    snaps = writer.commit(1)
    assert [s.id for s in snaps] == [2]
    assert table.scan().to_arrow().num_rows == 7


# -- create_table and options ------------------------------------------------------------------------


def test_unknown_option_suggests_the_right_one(catalog: cl.Catalog) -> None:
    with pytest.raises(errors.OptionError) as info:
        catalog.create_table("db.u", schema=SCHEMA, primary_keys=KEYS, options={"buckett": "2"})
    assert_names(str(info.value), "db.u", "'buckett'", "did you mean 'bucket'")
    assert not Path(catalog.warehouse, "db.db", "u").exists()


@pytest.mark.parametrize(
    ("options", "culprits"),
    [
        ({"bucket": "abc"}, ["'bucket'", "abc"]),
        ({"bucket": "0"}, ["'bucket'", "0"]),
        ({"bucket": "-3"}, ["'bucket'", "-3"]),
        ({"write-buffer-size": "lots"}, ["'write-buffer-size'", "lots"]),
        ({"target-file-size": "12 parsecs"}, ["'target-file-size'", "12 parsecs"]),
        ({"commit.timeout": "soon"}, ["'commit.timeout'", "soon"]),
        ({"write-only": "yes"}, ["'write-only'", "yes"]),
        ({"merge-engine": "dedup"}, ["'merge-engine'", "dedup"]),
        ({"bucket": 4}, ["'bucket'"]),
        ({"file.format": "csv"}, ["file.format"]),
        ({"sequence.field": "nope"}, ["'sequence.field'", "nope"]),
    ],
)
def test_option_value_that_does_not_parse(catalog: cl.Catalog, options: dict[str, Any], culprits: list[str]) -> None:
    with pytest.raises(errors.OptionError) as info:
        catalog.create_table("db.u", schema=SCHEMA, primary_keys=KEYS, options=options)
    assert_names(str(info.value), "db.u", *culprits)
    assert not Path(catalog.warehouse, "db.db", "u").exists()
    with pytest.raises((errors.TableNotFoundError, errors.DatabaseNotFoundError)):
        catalog.get_table("db.u")


def test_valid_options_with_units_are_accepted(catalog: cl.Catalog) -> None:
    options = {"bucket": "3", "write-buffer-size": "256 mb", "target-file-size": "64MB", "commit.timeout": "10 s",
               "fields.v.aggregate-function": "sum"}
    created = catalog.create_table("db.u", schema=SCHEMA, primary_keys=KEYS, options=options)
    assert created.options == options
    assert catalog.get_table("db.u").options == options


def test_table_with_an_unknown_stored_option_still_opens(table: cl.Table, catalog: cl.Catalog) -> None:
    schema_file = Path(table.location, "schema", "schema-0")
    stored = json.loads(schema_file.read_text())
    stored["options"]["some-future.option"] = "whatever"
    schema_file.write_text(json.dumps(stored))

    for opened in (catalog.get_table("db.t"), cl.open_table(table.location)):
        assert opened.options["some-future.option"] == "whatever"
        assert opened.context.options.bucket == 2
        assert opened.scan().to_arrow().num_rows == 5
    opened = catalog.get_table("db.t")
    opened.write(good_rows(8))
    assert opened.scan().to_arrow().num_rows == 8


@pytest.mark.parametrize(
    ("primary_keys", "partition_keys", "culprit"),
    [
        (["dt", "nope"], ["dt"], "'nope'"),
        (["id"], ["nope"], "'nope'"),
        (["id", "id"], [], "'id'"),
        (["dt"], ["dt"], "dt"),
    ],
    ids=["primary key not in schema", "partition key not in schema",
         "duplicate primary key", "primary keys equal partition keys"],
)
def test_bad_keys_at_create_table(catalog: cl.Catalog, primary_keys: list[str], partition_keys: list[str],
                                  culprit: str) -> None:
    with pytest.raises(errors.SchemaError) as info:
        catalog.create_table("db.u", schema=SCHEMA, primary_keys=primary_keys, partition_keys=partition_keys)
    assert_names(str(info.value), culprit, "db.u")
    assert not Path(catalog.warehouse, "db.db", "u").exists()


def test_nested_primary_key_is_rejected(catalog: cl.Catalog) -> None:
    schema = SCHEMA.append(pa.field("tags", pa.list_(pa.string())))
    with pytest.raises(errors.SchemaError) as info:
        catalog.create_table("db.u", schema=schema, primary_keys=["id", "tags"])
    assert_names(str(info.value), "'tags'", "db.u")
    assert not Path(catalog.warehouse, "db.db", "u").exists()


def test_create_existing_table(table: cl.Table, catalog: cl.Catalog) -> None:
    before = tree(table.location)
    other = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    with pytest.raises(errors.TableAlreadyExistsError) as info:
        catalog.create_table("db.t", schema=other, primary_keys=["id"])
    assert_names(str(info.value), "db.t")
    assert tree(table.location) == before
    assert catalog.get_table("db.t").schema == table.schema


def test_bad_table_names(catalog: cl.Catalog) -> None:
    for name in ("nodot", "a.b.c", ".t", "db."):
        with pytest.raises(errors.SchemaError, match=r"database\.table"):
            catalog.create_table(name, schema=SCHEMA, primary_keys=KEYS)
        with pytest.raises(errors.SchemaError):
            catalog.get_table(name)
    assert not Path(catalog.warehouse).exists() or not any(Path(catalog.warehouse).iterdir())


# -- get_table / open_table ---------------------------------------------------------------------------


def test_get_missing_table_and_database(table: cl.Table, catalog: cl.Catalog) -> None:
    warehouse_before = tree(catalog.warehouse)
    with pytest.raises(errors.TableNotFoundError) as info:
        catalog.get_table("db.missing")
    assert_names(str(info.value), "db.missing")
    with pytest.raises(errors.DatabaseNotFoundError) as db_info:
        catalog.get_table("nodb.t")
    assert_names(str(db_info.value), "nodb")
    with pytest.raises(errors.TableNotFoundError) as path_info:
        cl.open_table(str(Path(table.location).parent / "missing"))
    assert_names(str(path_info.value), "missing")
    with pytest.raises(errors.DatabaseNotFoundError):
        catalog.list_tables("nodb")
    assert tree(catalog.warehouse) == warehouse_before
    assert sorted(os.listdir(catalog.warehouse)) == ["db.db"]


# -- where the table lives ----------------------------------------------------------------------------


@pytest.mark.parametrize("opener", [cl.Catalog, cl.open_table])
def test_unknown_url_protocol_names_the_url(opener: Any) -> None:
    with pytest.raises(errors.StorageConfigError) as info:
        opener("nosuch://bucket/warehouse/db.db/t")
    assert isinstance(info.value, ValueError)  # as fsspec's own error was
    assert_names(str(info.value), "nosuch://bucket/warehouse/db.db/t", "Protocol not known: nosuch")


@pytest.mark.parametrize("opener", [cl.Catalog, cl.open_table])
@pytest.mark.parametrize(("options", "culprits"), [
    # Databricks' filesystem (in fsspec itself) requires both; fsspec raised a TypeError
    ({"token": "secret-token"}, ["dbfs://host/wh", "storage options ['token']", "'instance'"]),
    ({"instance": "host", "token": "secret-token", 7: "x"}, ["dbfs://host/wh", "'7'", "'instance'", "'token'"]),
    ([("instance", "host")], ["dbfs://host/wh", "storage_options must be a dict", "list"]),
], ids=["a required option missing", "an option name that is not a string", "not a dict"])
def test_storage_options_the_filesystem_refuses_are_named(opener: Any, options: Any, culprits: list[str]) -> None:
    with pytest.raises(errors.StorageConfigError) as info:
        opener("dbfs://host/wh", options)
    assert_names(str(info.value), *culprits)
    assert "secret-token" not in str(info.value)  # option names, never their values


def test_a_filesystem_whose_package_is_missing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(known_implementations, "nopkg",
                        {"class": "changelake_no_such_package.FileSystem", "err": "Install nopkgfs to access nopkg://"})
    for opener in (cl.Catalog, cl.open_table):
        with pytest.raises(errors.MissingExtraError) as info:
            opener("nopkg://bucket/wh")
        assert isinstance(info.value, ImportError)
        assert_names(str(info.value), "nopkg://bucket/wh", "Install nopkgfs")


# -- scans ------------------------------------------------------------------------------------------


def test_scan_missing_snapshot(table: cl.Table) -> None:
    with pytest.raises(errors.SnapshotNotFoundError) as info:
        table.scan(snapshot_id=99).to_arrow()
    assert_names(str(info.value), "99")
    assert_names_table(str(info.value), table)
    with pytest.raises(errors.SnapshotNotFoundError):
        table.snapshot(99)
    with pytest.raises(errors.SnapshotNotFoundError):
        list(table.scan(snapshot_id=0).to_batches())
    with pytest.raises(errors.SnapshotNotFoundError):
        table.create_tag("t99", snapshot_id=99)
    assert not Path(table.location, "tag").exists()


def test_scan_missing_tag_and_duplicate_tag(table: cl.Table) -> None:
    with pytest.raises(errors.TagNotFoundError) as info:
        table.scan(tag="nope").to_arrow()
    assert_names(str(info.value), "db.t", "'nope'")
    table.create_tag("t1", snapshot_id=1)
    before = tree(table.location)
    with pytest.raises(errors.TagAlreadyExistsError) as dup:
        table.create_tag("t1")
    assert_names(str(dup.value), "db.t", "'t1'")
    assert tree(table.location) == before


def test_scan_unknown_column(table: cl.Table) -> None:
    with pytest.raises(errors.ScanError) as info:
        table.scan(columns=["id", "nope"])
    assert_names(str(info.value), "db.t", "nope")


READS_OF_COLUMNS: dict[str, Any] = {
    "scan": lambda t, columns: t.scan(columns=columns).to_arrow(),
    "select": lambda t, columns: t.scan().select(*columns).to_arrow(),
    "stream": lambda t, columns: list(t.stream(columns=columns)),
    "changes": lambda t, columns: t.changes(0, 1, columns=columns).to_arrow(),
}


@pytest.mark.parametrize("read", list(READS_OF_COLUMNS))
@pytest.mark.parametrize(("columns", "culprit"), [
    (["id", "v", "id"], "['id']"), (["s", "s", "v", "v"], "['s', 'v']"), (["id", "nope"], "['nope']")])
def test_reads_name_a_repeated_or_unknown_column(table: cl.Table, read: str, columns: list[str],
                                                 culprit: str) -> None:
    """A column selected twice or not in the table is a ScanError naming it, in a scan, a
    change stream and a range of changes alike (a repeated one was a raw KeyError)."""
    with pytest.raises(errors.ScanError) as info:
        READS_OF_COLUMNS[read](table, columns)
    assert_names(str(info.value), "db.t", culprit)


def test_columns_given_as_one_string_are_refused(table: cl.Table) -> None:
    """``columns="id"`` is not the columns i and d (a string is a sequence of characters)."""
    for read in (lambda: table.scan(columns="id"), lambda: table.stream(columns="id")):
        with pytest.raises(errors.ScanError) as info:
            read()
        assert_names(str(info.value), "db.t", "'id'", "not the string")


def test_scan_filter_on_unknown_column(table: cl.Table) -> None:
    with pytest.raises(errors.ScanError) as info:
        table.scan(filter=pc.field("nope") == 1).to_arrow()
    assert_names(str(info.value), "db.t", "nope")


@pytest.mark.parametrize(
    "selectors",
    [{"snapshot_id": 1, "tag": "t1"}, {"snapshot_id": 1, "timestamp_ms": 0}, {"tag": "t1", "timestamp_ms": 0}],
)
def test_scan_with_two_selectors(table: cl.Table, selectors: dict[str, Any]) -> None:
    table.create_tag("t1", snapshot_id=1)
    with pytest.raises(errors.ScanError) as info:
        table.scan(**selectors)
    assert_names(str(info.value), "db.t", *selectors)


# -- corrupt metadata -------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"{not json", b"", b"{}", b'{"id": 2}', b"\xff\xfe garbage"],
                         ids=["garbage", "empty", "empty object", "missing fields", "not utf8"])
def test_corrupt_snapshot_file(table: cl.Table, content: bytes) -> None:
    table.write(good_rows(3))
    snapshot_file = Path(table.location, "snapshot", "snapshot-2")
    snapshot_file.write_bytes(content)
    before = tree(table.location)

    with pytest.raises(errors.CorruptMetadataError) as info:
        table.scan().to_arrow()
    assert_names(str(info.value), str(snapshot_file))
    with pytest.raises(errors.CorruptMetadataError):
        table.scan(snapshot_id=2).to_arrow()
    with pytest.raises(errors.CorruptMetadataError):
        table.write(good_rows(2))
    assert tree(table.location) == before
    # The snapshot before it is intact.
    assert table.scan(snapshot_id=1).to_arrow().num_rows == 5


def only_manifest(table: cl.Table, prefix: str) -> Path:
    (path,) = [p for p in Path(table.location, "manifest").iterdir()
               if p.name.startswith(prefix) and not (prefix == "manifest-" and p.name.startswith("manifest-list-"))
               and (prefix != "manifest-list-" or p.name == table.snapshot(1).delta_manifest_list)]
    return path


@pytest.mark.parametrize("kind", ["manifest-", "manifest-list-"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
def test_corrupt_or_missing_manifest(catalog: cl.Catalog, kind: str, damage: str) -> None:
    # A table with a single commit, damaged as a fresh process finds it (the committing
    # process caches the manifests it wrote: they never change).
    table = catalog.create_table("db.fresh", schema=SCHEMA, primary_keys=KEYS, partition_keys=["dt"],
                                 options={"bucket": "2"})
    table.write(good_rows())
    live_files.MANIFEST_CACHE.clear()
    path = only_manifest(table, kind)
    if damage == "garbage":
        path.write_bytes(b"this is not avro")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    else:
        path.unlink()
    before = tree(table.location)

    with pytest.raises(errors.CorruptMetadataError) as info:
        cl.open_table(table.location).scan().to_arrow()
    assert_names(str(info.value), path.name)
    assert_names_table(str(info.value), table)
    with pytest.raises(errors.CorruptMetadataError):
        table.write(good_rows(2))
    assert tree(table.location) == before


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_corrupt_or_missing_data_file(table: cl.Table, damage: str) -> None:
    (path, *_) = sorted(Path(table.location).rglob("data-*.parquet"))
    if damage == "garbage":
        path.write_bytes(b"PAR1 not really")
    else:
        path.unlink()
    with pytest.raises(errors.CorruptMetadataError) as info:
        table.scan().to_arrow()
    assert_names(str(info.value), path.name)


def test_corrupt_schema_file(table: cl.Table, catalog: cl.Catalog) -> None:
    schema_file = Path(table.location, "schema", "schema-0")
    schema_file.write_text("{ nope")
    with pytest.raises(errors.CorruptMetadataError) as info:
        catalog.get_table("db.t")
    assert_names(str(info.value), str(schema_file))


def test_snapshot_with_unknown_fields_still_reads(table: cl.Table) -> None:
    # Newer Paimon writers add snapshot fields; readers must ignore what they do not know.
    path = table.context.paths.snapshot(1)
    data = json.loads(table.context.file_io.read_text(path))
    data.update({"someFutureField": {"a": 1}, "nextRowId": 42, "uuid": "x"})
    with open(path, "w") as out:
        json.dump(data, out)
    assert table.snapshot(1).id == 1
    assert table.scan(snapshot_id=1).to_arrow().num_rows > 0
