"""A write call that raises leaves the writer exactly as before the call: nothing of the bad
call is buffered, spilled, flushed or committed, and what was buffered before still lands."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _rows(start: int, count: int, *, null_last: bool = False) -> pa.Table:
    keys = pa.array(np.arange(start, start + count), mask=np.arange(count) == count - 1 if null_last else None)
    return pa.table({"k": keys, "v": pa.array([f"v{i}" for i in range(count)])})


def _files(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*.parquet")}


@pytest.mark.parametrize("spillable", ["true", "false"])
def test_a_bad_last_row_leaves_nothing_behind(tmp_path: Path, spillable: str) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "2", "write-buffer-size": "64 kb", "write-buffer-spillable": spillable})
    with table.writer(commit_user="job") as writer:
        writer.write(_rows(0, 10))  # buffered before the bad call: must still land
        before = _files(tmp_path)
        with pytest.raises(errors.NullKeyError):
            writer.write(_rows(1000, 100_000, null_last=True))
        assert _files(tmp_path) == before, "the failed call left data files"
        writer.commit(identifier=1)
    assert table.scan().to_arrow().num_rows == 10


def test_a_bad_batch_of_a_reader_lands_nothing_of_the_reader(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"], options={"write-buffer-size": "16 kb"})
    good = _rows(0, 5000).to_batches()[0]
    bad = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["k", "wrong"])
    reader = pa.RecordBatchReader.from_batches(good.schema, iter([good, good]))  # schema checked per batch
    with table.writer(commit_user="job") as writer:
        with pytest.raises(errors.SchemaMismatchError):
            writer.write(pa.RecordBatchReader.from_batches(bad.schema, iter([bad])))
        def batches() -> object:
            yield good
            yield good.set_column(0, "k", pa.array(np.full(len(good), None), pa.int64()))
        with pytest.raises(errors.NullKeyError):
            writer.write(pa.RecordBatchReader.from_batches(good.schema, batches()))
        assert writer.commit(identifier=1) == []
        writer.write(reader)
        assert writer.commit(identifier=2)
    assert table.scan().to_arrow().num_rows == 5000
