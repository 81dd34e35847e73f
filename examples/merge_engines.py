"""Every merge engine, written and compacted: the same upserts and deletes merged four ways.

Run: python examples/merge_engines.py [WAREHOUSE]
"""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa

import changelake as cl

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("clicks", pa.int64()),
])
ENGINES: dict[str, dict[str, str]] = {
    "deduplicate": {},
    "first-row": {"ignore-delete": "true"},
    "partial-update": {"ignore-delete": "true"},
    "aggregation": {"fields.clicks.aggregate-function": "sum", "fields.name.aggregate-function": "last_non_null_value"},
}
# Each batch is one commit; the last one retracts id 2's clicks (-U) and deletes id 3 (-D).
BATCHES = [
    {"id": [1, 2, 3], "name": ["ann", "bob", "cy"], "clicks": [1, 2, 3], "rowkind": ["+I", "+I", "+I"]},
    {"id": [1, 2], "name": [None, "rob"], "clicks": [10, 20], "rowkind": ["+U", "+U"]},
    {"id": [2, 3], "name": ["rob", "cy"], "clicks": [20, 3], "rowkind": ["-U", "-D"]},
]
EXPECTED = {
    "deduplicate": [(1, None, 10)],  # the newest row wins; a -U or -D removes the key
    "first-row": [(1, "ann", 1), (2, "bob", 2), (3, "cy", 3)],  # the oldest row wins
    "partial-update": [(1, "ann", 10), (2, "rob", 20), (3, "cy", 3)],  # nulls never overwrite
    # sum adds +I/+U and subtracts -U/-D; last_non_null_value turns null when its value is retracted
    "aggregation": [(1, "ann", 11), (2, None, 2), (3, None, 0)],
}


def main(warehouse: str) -> None:
    catalog = cl.Catalog(warehouse)
    failed = False
    for engine, extra in ENGINES.items():
        options = {"bucket": "2", "merge-engine": engine, **extra}
        table = catalog.create_table(f"demo.{engine.replace('-', '_')}", SCHEMA, primary_keys=["id"], options=options)
        for batch in BATCHES:
            table.write(pa.table(batch))
        table.compact(full=True)
        rows = table.scan().to_arrow().sort_by("id")
        got = list(zip(*(rows.column(c).to_pylist() for c in SCHEMA.names), strict=True))
        status = "ok" if got == EXPECTED[engine] else f"MISMATCH, expected {EXPECTED[engine]}"
        print(f"{engine:<15} {len(table.snapshots())} snapshots, rows {got}: {status}")
        failed = failed or got != EXPECTED[engine]
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="changelake-engines-"))
