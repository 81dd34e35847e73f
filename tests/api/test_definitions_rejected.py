"""Table definitions and names Paimon would read wrongly are refused up front, naming the
table and the option or column, and nothing is created."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.string()), pa.field("n", pa.int64())])


def _create(tmp_path: Path, options: dict[str, str]) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["p", "id"], partition_keys=["p"],
                                                  options=options)


@pytest.mark.parametrize(("options", "option", "words"), [
    ({"bucket": "4", "bucket-key": "v"}, "bucket-key", ["'v'", "primary key"]),
    ({"bucket": "4", "bucket-key": "p"}, "bucket-key", ["partition"]),
    ({"record-level.expire-time": "1 d"}, "record-level.expire-time", ["not supported"]),
    ({"tag.automatic-creation": "process-time"}, "tag.automatic-creation", ["not supported"]),
    ({"fields.v.default-value": "x"}, "fields.v.default-value", ["not supported"]),
    ({"file.format": "csv"}, "file.format", ["csv", "parquet, orc, avro"]),
    ({"rowkind.field": "n"}, "rowkind.field", ["'n'", "int64", "strings"]),
])
def test_unsupported_definitions_are_refused(tmp_path: Path, options: dict[str, str], option: str,
                                             words: list[str]) -> None:
    with pytest.raises(errors.OptionError) as info:
        _create(tmp_path, options)
    assert (info.value.table, info.value.option) == ("db.t", option)
    for word in words:
        assert word in str(info.value)
    assert not list(tmp_path.rglob("schema-*")), "a refused table left a schema behind"


def test_bucket_key_inside_the_primary_key_keeps_each_key_in_one_bucket(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["p", "id", "n"], partition_keys=["p"],
        options={"bucket": "4", "bucket-key": "id"})
    for i in range(6):
        table.write(pa.table({"p": ["a"], "id": [1], "v": [f"v{i}"], "n": [7]}, schema=SCHEMA))
    assert table.scan().to_arrow().column("v").to_pylist() == ["v5"]
    table.write(pa.table({"p": ["a"], "id": [1], "v": [None], "n": [7], "rowkind": ["-D"]}))
    assert table.scan().to_arrow().num_rows == 0


@pytest.mark.parametrize("name", ["release/2024", "", "   ", "../escape", "a\\b", "123", ".."])
def test_bad_tag_names_are_refused_and_tags_keep_working(tmp_path: Path, name: str) -> None:
    table = _create(tmp_path, {})
    table.write(pa.table({"p": ["a"], "id": [1], "v": ["x"], "n": [1]}, schema=SCHEMA))
    with pytest.raises(errors.InvalidTagNameError, match="tag name") as info:
        table.create_tag(name)
    assert info.value.table == "db.t"
    with pytest.raises(errors.TagNotFoundError):
        table.tag(name)
    with pytest.raises(errors.TagNotFoundError):
        table.delete_tag(name)
    table.create_tag("v1.0-rc1")
    assert list(table.tags()) == ["v1.0-rc1"]
    assert not (tmp_path / "escape").exists()
    table.delete_tag("v1.0-rc1")
    assert table.tags() == {}
