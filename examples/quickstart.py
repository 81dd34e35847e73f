"""changelake quickstart: create a primary-key table, write upserts and deletes, time travel."""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa

import changelake as cl


def _show(rows: pa.Table) -> None:
    for row in rows.to_pylist():
        print("  " + "  ".join(f"{name}={value}" for name, value in row.items()))


def main(warehouse: str) -> None:
    catalog = cl.Catalog(warehouse)
    schema = pa.schema(
        [
            pa.field("dt", pa.string(), nullable=False),
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.string()),
            pa.field("amount", pa.float64()),
        ]
    )
    table = catalog.create_table(
        "shop.orders", schema=schema, primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"}
    )

    table.write(
        pa.table(
            {
                "dt": ["2024-01-01"] * 3 + ["2024-01-02"] * 2,
                "id": [1, 2, 3, 1, 2],
                "name": ["apple", "pear", "plum", "fig", "kiwi"],
                "amount": [1.5, 3.0, 4.5, 2.0, 0.5],
            }
        )
    )
    # An optional rowkind column carries the change kind: update id 2, delete id 3.
    table.write(
        pa.table(
            {
                "dt": ["2024-01-01", "2024-01-01"],
                "id": [2, 3],
                "name": ["pear", None],
                "amount": [30.0, None],
                "rowkind": ["+U", "-D"],
            }
        )
    )
    table.write(pa.table({"dt": ["2024-01-02"], "id": [3], "name": ["lime"], "amount": [9.9]}))

    order = [("dt", "ascending"), ("id", "ascending")]
    print("latest rows:")
    _show(table.scan().to_arrow().sort_by(order))
    print("\nrows as of snapshot 1:")
    _show(table.scan().at_snapshot(1).to_arrow().sort_by(order))
    print("\nsnapshots:")
    for snap in table.snapshots():
        print(f"  {snap.id}  {snap.commit_kind:<7} total={snap.total_record_count} delta={snap.delta_record_count}")
    print(f"\ntable directory: {table.location}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="changelake-"))
