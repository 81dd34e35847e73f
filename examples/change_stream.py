"""changelake change stream: consume a primary-key table's changes (+I, -U, +U, -D), save the
offset, and resume from it later.

The table uses changelog producer ``lookup``: every commit compacts its new rows up and writes
their complete changes (+I for new keys, -U/+U pairs with the previous and the new row, -D with
the deleted row), so the stream shows before-images the writes never carried.
"""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa

import changelake as cl


def _show(batch: cl.ChangeBatch) -> None:
    print(f"snapshot {batch.snapshot_id} ({batch.kind.value}), then offset {batch.offset.to_json()}")
    for row in batch.data.to_pylist():
        print("  " + "  ".join(f"{name}={value}" for name, value in row.items()))


def main(warehouse: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                        pa.field("qty", pa.int32())])
    table = cl.Catalog(warehouse).create_table(
        "shop.stock", schema=schema, primary_keys=["id"], options={"bucket": "2", "changelog-producer": "lookup"}
    )
    table.write(pa.table({"id": [1, 2, 3], "name": ["apple", "pear", "plum"], "qty": pa.array([5, 7, 2], pa.int32())}))

    stream = table.stream()  # scan.mode latest-full: the table as +I rows, then every change
    print("initial read:")
    for batch in stream:
        _show(batch)

    table.write(pa.table({"id": [2, 3], "name": ["pear", "plum"], "qty": pa.array([6, None], pa.int32()),
                          "rowkind": ["+U", "-D"]}))
    print("\nafter an update and a delete:")
    for batch in stream:
        _show(batch)
    saved = stream.offset.to_json()  # e.g. in a job's checkpoint

    table.write(pa.table({"id": [4, 1], "name": ["fig", "apple"], "qty": pa.array([9, 4], pa.int32()),
                          "rowkind": ["+I", "+U"]}))
    print(f"\nresumed from the saved offset {saved}:")
    for batch in table.stream(offset=cl.StreamOffset.from_json(saved)):
        _show(batch)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="changelake-"))
