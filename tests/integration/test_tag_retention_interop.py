"""A tag created with a retention is Paimon's Tag JSON: pypaimon reads its creation time and
retention, and reads the table at the tag."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

import changelake
from pypaimon_oracle import Pypaimon


def test_pypaimon_reads_a_tag_with_retention(tmp_path: Path, pypaimon: Pypaimon) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    table = changelake.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"],
                                                           options={"bucket": "1"})
    table.write(pa.table({"k": [1], "v": [2]}, schema=schema))
    table.create_tag("kept", time_retained=dt.timedelta(hours=36))
    created = table.system("tags").to_pylist()[0]["create_time"]
    theirs = pypaimon.tag(str(tmp_path), "db.t", "kept")
    assert theirs["time_retained"] == dt.timedelta(hours=36)
    assert theirs["create_time"].replace(microsecond=theirs["create_time"].microsecond // 1000 * 1000) == created
    assert pypaimon.read(str(tmp_path), "db.t", {"scan.tag-name": "kept"}).to_pylist() == [{"k": 1, "v": 2}]
