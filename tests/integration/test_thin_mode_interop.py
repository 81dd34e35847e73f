"""Thin data files (``data-file.thin-mode``: no ``_KEY_`` columns) across Paimon clients.

* pypaimon 2.1.0 reads every snapshot of changelake tables written in thin mode, and of tables
  whose buckets hold files of both layouts, as changelake does (every merge engine it reads);
* pypaimon-rust 0.4.0 always writes thin files, whatever the option: changelake reads every
  snapshot of its tables (deletes through ``rowkind.field``, partial-update, aggregation) as
  pypaimon-rust does; pypaimon-rust reads changelake's tables of either layout as changelake
  does; and both write alternately to one table, then changelake compacts it.

pypaimon-rust 0.4.0 neither compacts nor reads level 0 of first-row tables (so its own
first-row tables read empty), so it writes no first-row table here; it reads changelake's,
which keep no file at level 0.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake as cl
from pypaimon_oracle import Pypaimon

THIN = "data-file.thin-mode"
KEY = ("dt", "k")
SCHEMA = pa.schema([
    pa.field("dt", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("v", pa.string()),
    pa.field("n", pa.int64()),
    pa.field("op", pa.string()),
])
COMPACTION = {"bucket": "2", "target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}
# engine options and the row kinds pypaimon reads for it (its partial-update and aggregation
# readers raise on retractions; see test_pypaimon_merge_engines.py)
ENGINES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "deduplicate": ({"rowkind.field": "op"}, ("+I", "+U", "-U", "-D")),
    "partial-update": ({"merge-engine": "partial-update"}, ("+I",)),
    "aggregation": ({"merge-engine": "aggregation", "fields.n.aggregate-function": "sum",
                     "fields.v.aggregate-function": "max"}, ("+I",)),
    "first-row": ({"merge-engine": "first-row", "ignore-delete": "true", "rowkind.field": "op"}, ("+I", "-D")),
}
Row = dict[str, Any]


def _sorted(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: tuple(r[k] for k in KEY))


def _rows(rng: random.Random, count: int, kinds: tuple[str, ...]) -> list[Row]:
    # ``op`` is the row kind where rowkind.field names it, a plain column elsewhere.
    return [{"dt": rng.choice(["d1", "d2"]), "k": rng.randrange(30), "v": rng.choice(["a", "b", None]),
             "n": rng.randrange(100), "op": rng.choice(kinds)} for _ in range(count)]


def _ours(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    return _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


def _compared_snapshots(table: cl.Table) -> list[int]:
    """The snapshots another Paimon reader must read as changelake does: all of them, but for
    first-row only those without level-0 files (Paimon's readers skip level 0 of first-row
    tables; a write's APPEND snapshot lists its level-0 files, its COMPACT snapshot moves them)."""
    ids = [s.id for s in table.snapshots()]
    if table.context.options.merge_engine is not cl.MergeEngineKind.FIRST_ROW:
        return ids
    return [i for i in ids if all(f.level > 0 for split in table.scan(snapshot_id=i).plan() for f in split.files)]


def _pypaimon_read(pypaimon: Pypaimon, warehouse: str, name: str, snapshot_id: int) -> list[Row]:
    return _sorted(pypaimon.read(warehouse, name, {"scan.snapshot-id": str(snapshot_id)}).to_pylist())


def _thin_files(location: str) -> set[bool]:
    """Whether the table's data files (all of them, live or not) are thin, full or both."""
    return {"_KEY_k" not in pq.read_schema(p).names for p in Path(location).rglob("data-*.parquet")}


def _live_thin_files(table: cl.Table) -> set[bool]:
    """Whether the latest snapshot's data files are thin, full or both."""
    return {"_KEY_k" not in pq.read_schema(f"{s.bucket_dir}/{f.file_name}").names
            for s in table.scan().plan() for f in s.files}


def _set_thin(table: cl.Table, *, thin: bool) -> cl.Table:
    """``ALTER TABLE ... SET ('data-file.thin-mode' = ...)``: a new schema file."""
    schema = table.context.schema
    altered = schema.model_copy(update={"id": schema.id + 1, "options": {**schema.options, THIN: str(thin).lower()}})
    Path(table.context.paths.schema(altered.id)).write_text(altered.to_json())
    return cl.open_table(table.location)


def _changelake_writes(warehouse: str, engine: str, layout: str) -> cl.Table:
    """A changelake table written (and compacted) in ``layout``: thin, full, or thin from
    halfway (files of both layouts in a bucket)."""
    extra, kinds = ENGINES[engine]
    options = {**COMPACTION, **extra, THIN: str(layout == "thin").lower()}
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=list(KEY), partition_keys=["dt"],
                                               options=options)
    rng = random.Random(engine + layout)
    for step in range(8):
        if step == 4 and layout == "mixed":
            table = _set_thin(table, thin=True)
        rows = _rows(rng, 30 if step < 2 else 6, kinds)
        table.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        if step == 5:
            table.compact()
    assert _thin_files(table.location) == {"thin": {True}, "full": {False}, "mixed": {False, True}}[layout]
    return table


# -- pypaimon reads changelake's thin tables ------------------------------------------------


@pytest.mark.parametrize("layout", ["thin", "mixed"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_pypaimon_reads_changelake_thin_tables(tmp_path: Path, pypaimon: Pypaimon, engine: str, layout: str) -> None:
    warehouse = str(tmp_path)
    table = _changelake_writes(warehouse, engine, layout)
    assert any(s.commit_kind is cl.CommitKind.COMPACT for s in table.snapshots())
    compared = _compared_snapshots(table)
    assert len(compared) >= 8
    for snapshot_id in compared:
        assert _pypaimon_read(pypaimon, warehouse, "db.t", snapshot_id) == _ours(table, snapshot_id), \
            f"snapshot {snapshot_id}"
    assert _ours(table)


# -- pypaimon-rust --------------------------------------------------------------------------

RUST_ENGINES = {name: ENGINES[name] for name in ("deduplicate", "partial-update", "aggregation")}


def _rust_table(warehouse: str, name: str = "db.t") -> Any:
    from pypaimon_rust.datafusion import PaimonCatalog

    return PaimonCatalog({"warehouse": warehouse}).get_table(name)


def _rust_read(warehouse: str, snapshot_id: int | None = None) -> list[Row]:
    options = {"scan.snapshot-id": str(snapshot_id)} if snapshot_id is not None else None
    builder = _rust_table(warehouse).new_read_builder(options)
    batches = builder.new_read().read(builder.new_scan().plan().splits())
    return _sorted(row for batch in batches for row in batch.to_pylist())


def _rust_write(warehouse: str, rows: list[Row]) -> None:
    builder = _rust_table(warehouse).new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(pa.RecordBatch.from_pylist(rows, schema=SCHEMA))
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


def _rust_create(warehouse: str, options: dict[str, str]) -> None:
    from pypaimon_rust.datafusion import SQLContext

    context = SQLContext()
    context.register_catalog("p", {"warehouse": warehouse})
    context.sql("CREATE SCHEMA p.db")
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    context.sql("CREATE TABLE p.db.t (dt STRING NOT NULL, k BIGINT NOT NULL, v STRING, n BIGINT, op STRING, "
                f"PRIMARY KEY (dt, k)) PARTITIONED BY (dt) WITH ({settings})")


def _assert_both_read_every_snapshot(warehouse: str) -> cl.Table:
    table = cl.Catalog(warehouse).get_table("db.t")
    compared = _compared_snapshots(table)
    assert compared[-1] == max(s.id for s in table.snapshots())
    for snapshot_id in compared:
        assert _ours(table, snapshot_id) == _rust_read(warehouse, snapshot_id), f"snapshot {snapshot_id}"
    assert _ours(table) == _rust_read(warehouse)
    return table


@pytest.mark.parametrize("engine", list(RUST_ENGINES))
def test_changelake_reads_pypaimon_rust_tables(tmp_path: Path, engine: str) -> None:
    pytest.importorskip("pypaimon_rust")
    warehouse = str(tmp_path)
    extra, kinds = RUST_ENGINES[engine]
    _rust_create(warehouse, {"bucket": "2", **extra})
    rng = random.Random(engine)
    for step in range(5):
        _rust_write(warehouse, _rows(rng, 30 if step == 0 else 10, kinds))
    assert _thin_files(str(tmp_path / "db.db" / "t")) == {True}  # without the option set
    table = _assert_both_read_every_snapshot(warehouse)
    assert len(table.snapshots()) == 5
    assert _ours(table)


@pytest.mark.parametrize("layout", ["thin", "full", "mixed"])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_pypaimon_rust_reads_changelake_tables(tmp_path: Path, engine: str, layout: str) -> None:
    pytest.importorskip("pypaimon_rust")
    _changelake_writes(str(tmp_path), engine, layout)
    _assert_both_read_every_snapshot(str(tmp_path))


def test_changelake_and_pypaimon_rust_write_one_table(tmp_path: Path) -> None:
    """pypaimon-rust's thin files and changelake's full ones in the same buckets, merged on
    read by both, then compacted by changelake (into full files: the table has no option)."""
    pytest.importorskip("pypaimon_rust")
    warehouse = str(tmp_path)
    extra, kinds = ENGINES["deduplicate"]
    _rust_create(warehouse, {"bucket": "2", **extra})
    rng = random.Random(11)
    table = cl.Catalog(warehouse).get_table("db.t")
    for step in range(7):  # the last write is pypaimon-rust's, so the compaction has work to do
        rows = _rows(rng, 20, kinds)
        if step % 2:
            table.write(pa.Table.from_pylist(rows, schema=SCHEMA))
        else:
            _rust_write(warehouse, rows)
        _assert_both_read_every_snapshot(warehouse)
    assert _thin_files(table.location) == {False, True}
    assert True in _live_thin_files(table)
    before = _ours(table)
    assert table.compact(full=True) is not None
    assert _live_thin_files(table) == {False}
    _assert_both_read_every_snapshot(warehouse)
    assert _ours(table) == before
