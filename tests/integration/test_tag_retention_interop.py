"""A tag created with a retention is Paimon's Tag JSON: pypaimon reads its creation time and
retention, and reads the table at the tag."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("pypaimon")

from paimon_oracle import paimon_table

import changelake


def test_pypaimon_reads_a_tag_with_retention(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.int64())])
    table = changelake.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=["k"],
                                                           options={"bucket": "1"})
    table.write(pa.table({"k": [1], "v": [2]}, schema=schema))
    table.create_tag("kept", time_retained=dt.timedelta(hours=36))
    created = table.system("tags").to_pylist()[0]["create_time"]
    theirs = paimon_table(str(tmp_path), "db.t").tag_manager().get("kept")
    assert theirs.tag_time_retained == dt.timedelta(hours=36)
    assert theirs.tag_create_time.replace(microsecond=theirs.tag_create_time.microsecond // 1000 * 1000) == created
    builder = paimon_table(str(tmp_path), "db.t", {"scan.tag-name": "kept"}).new_read_builder()
    assert builder.new_read().to_arrow(builder.new_scan().plan().splits()).to_pylist() == [{"k": 1, "v": 2}]
