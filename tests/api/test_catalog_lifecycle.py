"""The catalog's table lifecycle in Paimon's filesystem layout, on local disk and on S3 (moto):
``table_exists``, ``list_tables``, ``rename_table`` (the directory moves, the table reads the
same under its new name), ``drop_table`` and ``drop_database``, with the errors a wrong name
gets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture(params=["local", "s3"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> cl.Catalog:
    if request.param == "local":
        return cl.Catalog(str(tmp_path))
    s3 = request.getfixturevalue("s3")
    return cl.Catalog(s3.new_warehouse(), storage_options=s3.storage_options)


def test_tables_are_renamed_and_dropped_and_databases_with_them(catalog: cl.Catalog) -> None:
    table = catalog.create_table("db.a", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(pa.table({"id": [1, 2], "v": ["x", "y"]}))
    table.create_tag("t1", 1)
    catalog.create_table("db.b", SCHEMA)
    assert catalog.table_exists("db.a") and not catalog.table_exists("db.zz") and not catalog.table_exists("no.a")
    assert catalog.list_tables("db") == ["a", "b"]

    catalog.create_database("other")
    renamed = catalog.rename_table("db.a", "other.c")
    assert renamed.name == "other.c" and not catalog.table_exists("db.a")
    assert sorted(r["id"] for r in renamed.scan().to_arrow().to_pylist()) == [1, 2]
    assert renamed.tags().keys() == {"t1"} and renamed.scan(tag="t1").to_arrow().num_rows == 2
    renamed.write(pa.table({"id": [3], "v": ["z"]}))
    assert catalog.get_table("other.c").scan().to_arrow().num_rows == 3

    with pytest.raises(errors.TableNotFoundError):
        catalog.rename_table("db.a", "db.d")
    with pytest.raises(errors.TableAlreadyExistsError):
        catalog.rename_table("db.b", "other.c")
    with pytest.raises(errors.DatabaseNotFoundError):
        catalog.rename_table("db.b", "nowhere.b")
    with pytest.raises(errors.DatabaseNotEmptyError, match=r"holds tables \['c'\]"):
        catalog.drop_database("other")

    catalog.drop_table("other.c")
    assert not catalog.table_exists("other.c") and catalog.list_tables("other") == []
    # a handle kept past the drop reads nothing as if the table were empty: the table is gone
    for use in (lambda: renamed.scan().to_arrow(), renamed.compact, renamed.latest_snapshot,
                lambda: list(renamed.stream())):
        with pytest.raises(errors.TableNotFoundError):
            use()
    with pytest.raises(errors.TableNotFoundError):
        catalog.drop_table("other.c")
    catalog.drop_table("other.c", ignore_if_not_exists=True)
    with pytest.raises(errors.TableNotFoundError):
        catalog.get_table("other.c")
    catalog.drop_database("other")
    catalog.drop_database("db", cascade=True)
    assert catalog.list_databases() == []
    with pytest.raises(errors.DatabaseNotFoundError):
        catalog.drop_database("db")
    catalog.drop_database("db", ignore_if_not_exists=True)
