"""Schema merge on write (Paimon's ``write.merge-schema``): ``write(..., merge_schema=True)`` or
the table option adds the input's new columns and widens columns it holds in a wider type, as
one schema change before the rows land; without it the same input is refused; what cannot
merge (a key column's type) changes nothing."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors

SCHEMA = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("v", pa.int32())])


@pytest.fixture
def table(tmp_path: Path) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(pa.table({"id": [1, 2], "v": [10, 20]}, schema=SCHEMA))
    return table


def test_new_columns_and_wider_types_merge_into_the_schema(table: cl.Table) -> None:
    grown = pa.table({"id": pa.array([2, 3], pa.int32()), "v": pa.array([2**40, 30], pa.int64()),
                      "note": ["two", "three"], "rowkind": ["+U", "+I"]})
    with pytest.raises(errors.SchemaMismatchError):
        table.write(grown)  # without merging: refused, nothing changed
    assert table.schema.names == ["id", "v"] and table.context.schema.id == 0

    assert table.write(grown, merge_schema=True) is not None
    assert table.schema.field("v").type == pa.int64() and table.schema.names == ["id", "v", "note"]
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 10, "note": None}, {"id": 2, "v": 2**40, "note": "two"}, {"id": 3, "v": 30, "note": "three"}]
    # A narrower input needs no change: it is cast as any write's.
    table.write(pa.table({"id": pa.array([4], pa.int32()), "v": pa.array([4], pa.int16()),
                          "note": ["four"]}), merge_schema=True)
    assert table.context.schema.id == 1

    # The table option does the same for every write; a reader of the table sees the new column.
    table.set_options({"write.merge-schema": "true"})
    table.write(pa.table({"id": pa.array([5], pa.int32()), "v": [5], "note": ["five"], "tag": [True]}))
    assert cl.open_table(table.location).schema.field("tag").type == pa.bool_()


def test_what_cannot_merge_changes_nothing(table: cl.Table) -> None:
    with pytest.raises(errors.SchemaError, match="'id'"):
        table.write(pa.table({"id": pa.array([9], pa.int64()), "v": [1]}), merge_schema=True)
    assert table.context.schema.id == 0 and table.scan().to_arrow().num_rows == 2
