"""pypaimon reads a table changelake wrote on S3 (moto's endpoint on loopback), through
pyarrow's own S3 filesystem configured with Paimon's ``s3.*`` catalog options."""

from __future__ import annotations

import pyarrow as pa

import changelake as cl
from pypaimon_oracle import Pypaimon
from s3_support import S3Endpoint


def test_pypaimon_reads_a_table_written_on_s3(s3: S3Endpoint, s3_warehouse: str, pypaimon: Pypaimon) -> None:
    table = cl.Catalog(s3_warehouse, storage_options=s3.storage_options).create_table(
        "db.t", pa.schema([("id", pa.int64()), ("v", pa.string())]), ["id"], options={"bucket": "2"})
    table.write(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    table.write(pa.table({"id": [2, 4], "v": ["B", "d"]}))
    table.compact(full=True)
    table.write(pa.table({"id": [1], "v": ["A"]}))

    theirs = pypaimon.read(s3_warehouse, "db.t", catalog_options=s3.paimon_options)
    expected = [{"id": 1, "v": "A"}, {"id": 2, "v": "B"}, {"id": 3, "v": "c"}, {"id": 4, "v": "d"}]
    assert sorted(theirs.to_pylist(), key=lambda r: r["id"]) == expected
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
