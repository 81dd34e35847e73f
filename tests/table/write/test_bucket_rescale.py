"""Writes after a bucket rescale: Paimon's ``ALTER TABLE ... SET ('bucket' = 'N')`` changes
the table's ``bucket`` and leaves the partitions written before with their files (and their
``totalBuckets`` in the manifest entries) as they were. A write into such a partition would
hash keys by the new number and put a key in two buckets: changelake refuses it as Paimon's
``AbstractFileStoreWrite`` does, naming the partition and both numbers, and changes nothing;
new partitions are written with the new number; a compaction keeps each partition's number.
(``table.rescale``, tests/table/maintenance/test_rescale.py, rewrites such partitions.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake import errors
from changelake.table.read import live_files
from changelake.table.read.live_files import live_entries

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])


def _rows(dt: str, keys: range, v: str) -> pa.Table:
    return pa.table({"dt": [dt] * len(keys), "k": pa.array(keys, pa.int64()), "v": [v] * len(keys)})


def paimon_alter_bucket(table_dir: Path, buckets: int) -> None:
    """The table's next schema file with ``bucket`` set, as Paimon's ``SchemaManager`` writes it
    for ``ALTER TABLE ... SET ('bucket' = 'N')`` by another engine (``set_options`` makes the
    same change; tests/table/maintenance/test_rescale.py uses it)."""
    schemas = sorted(table_dir.glob("schema/schema-*"), key=lambda p: int(p.name.split("-")[1]))
    latest = json.loads(schemas[-1].read_text())
    latest["id"] += 1
    latest["options"]["bucket"] = str(buckets)
    (table_dir / "schema" / f"schema-{latest['id']}").write_text(json.dumps(latest))


def _totals(table: cl.Table) -> dict[str, set[int]]:
    latest = table.latest_snapshot()
    assert latest is not None
    out: dict[str, set[int]] = {}
    for e in live_entries(table.context, latest):
        out.setdefault(table.context.partition_values(e.partition)[0], set()).add(e.total_buckets)
    return out


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("how", ["write", "writer"])
def test_a_write_into_a_partition_of_another_bucket_number_is_refused(tmp_path: Path, how: str) -> None:
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                 options={"bucket": "2"})
    table.write(_rows("a", range(20), "old"))
    paimon_alter_bucket(tmp_path / "db.db" / "t", 4)
    table = catalog.get_table("db.t")
    assert table.context.options.bucket == 4
    before = _files(tmp_path)
    message = r"table db\.t: option 'bucket': try to write partition \{dt=a\} with a new bucket num 4, " \
              r"but the previous bucket num is 2"
    with pytest.raises(errors.BucketRescaleError, match=message):
        if how == "write":
            table.write(pa.concat_tables([_rows("b", range(5), "new"), _rows("a", range(15, 25), "new")]))
        else:
            with table.writer(commit_user="job") as writer:
                writer.write(_rows("b", range(5), "new"))
                writer.write(_rows("a", range(15, 25), "new"))
                writer.commit(1)
    assert _files(tmp_path) == before, "the refused write left files behind"
    assert {r["k"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == dict.fromkeys(range(20), "old")
    # a new partition takes the new number, the old one keeps its own through compactions
    table.write(_rows("b", range(30), "b"))
    table.compact(full=True)
    assert _totals(table) == {"a": {2}, "b": {4}}
    assert table.scan().to_arrow().num_rows == 50
    # a manifest names a number of buckets only when all its files share it (readers prune
    # manifests by a key's bucket under that number)
    latest = table.latest_snapshot()
    assert latest is not None
    labels = []
    for meta in live_files.data_manifests(table.context, latest):
        counts = {e.total_buckets for e in live_files.manifest_entries(table.context, meta.file_name)}
        assert meta.total_buckets == (counts.pop() if len(counts) == 1 else None)
        labels.append(meta.total_buckets)
    assert None in labels  # the full compaction's manifest holds files of both numbers


def test_unpartitioned_tables_say_table(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.t", SCHEMA.remove(0), primary_keys=["k"], options={"bucket": "1"})
    table.write(pa.table({"k": [1, 2], "v": ["x", "y"]}))
    paimon_alter_bucket(tmp_path / "db.db" / "t", 3)
    with pytest.raises(errors.BucketRescaleError, match="try to write table with a new bucket num 3, but the previous "
                                                        "bucket num is 1"):
        catalog.get_table("db.t").write(pa.table({"k": [3], "v": ["z"]}))


def test_a_commit_adding_files_of_another_number_to_a_partition_is_void(tmp_path: Path) -> None:
    """A writer that flushed before the rescale, into a partition a writer of the new number
    then wrote first: its commit would mix numbers in the partition (Paimon's
    ``ConflictDetection``) and is void."""
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                 options={"bucket": "2", "write-buffer-size": "1 kb"})
    with table.writer(commit_user="old") as writer:
        writer.write(_rows("c", range(5), "old" * 1000))  # each row past the buffer: flushed as level-0 files now
        paimon_alter_bucket(tmp_path / "db.db" / "t", 4)
        catalog.get_table("db.t").write(_rows("c", range(5), "new"))
        with pytest.raises(errors.CommitConflictError, match=r"total buckets of partition \{dt=c\} would change "
                                                             r"from 4 to 2 without overwrite"):
            writer.commit(1)
    assert _totals(table) == {"c": {4}}
    assert {r["v"] for r in table.scan().to_arrow().to_pylist()} == {"new"}
