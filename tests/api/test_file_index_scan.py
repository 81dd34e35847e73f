"""``Scan`` with file indexes: chained filters, SQL-like text, projections and time travel all
skip the files whose bloom filter rules the filter out, and read the same rows as without."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import changelake as cl

SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string()), ("amount", pa.float64())])


def _rows(file: int) -> pa.Table:
    ids = list(range(file, 4000, 4))  # every file spans the whole range of ids and users
    return pa.table({"id": ids, "user": [f"user-{i * 7919 % 4000:04d}" for i in ids],
                     "amount": [i / 10 for i in ids]}, schema=SCHEMA)


def _planned(scan: cl.Scan) -> int:
    return sum(len(split.files) for split in scan.plan())


def test_scans_skip_files_by_bloom_filters(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, options={
        "bucket": "-1", "file-index.bloom-filter.columns": "user", "file-index.bloom-filter.user.items": "2000"})
    for file in range(4):
        table.write(_rows(file))
    wanted = _rows(2).column("user")[10].as_py()
    scan = table.scan().filter("amount >= 0").filter(pc.field("user") == wanted).select("id", "user")
    assert _planned(table.scan()) == 4 and _planned(scan) == 1
    assert scan.to_arrow().to_pylist() == [{"id": 42, "user": wanted}]
    text = table.scan(filter=f"user = '{wanted}' OR user = 'nobody'")
    assert _planned(text) == 1 and text.to_arrow().column("id").to_pylist() == [42]
    # an older snapshot is read with its own files' indexes
    old = table.scan(filter=pc.field("user") == wanted).at_snapshot(2)
    assert _planned(old) == 0 and old.to_arrow().num_rows == 0
    table.write(_rows(2))
    assert table.scan(filter=pc.field("user") == wanted).to_arrow().column("id").to_pylist() == [42, 42]
    assert _planned(table.scan(filter=pc.field("user") == wanted)) == 2
