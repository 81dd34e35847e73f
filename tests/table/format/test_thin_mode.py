"""Thin data files (Paimon's ``data-file.thin-mode``): primary-key files without the ``_KEY_``
columns, the key read from the value columns.

* ``data_file`` writes a thin file with the same manifest metadata as a full one and reads it
  back in the full key-value layout (projections included, ``_KEY_<k>`` as the very array of
  ``<k>``);
* one bucket holding files of both layouts (the option switched by a new schema, as Paimon's
  ``ALTER TABLE ... SET`` does, in both directions) reads right through merge-on-read, time
  travel, full compaction and first-row's lookup of older keys;
* every merge engine in thin mode reads, after every write and at every snapshot, what the same
  writes give on a table without thin mode; renumbering a racing commit copies thin files.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.errors import CorruptMetadataError, OptionError
from changelake.options import TableOptions
from changelake.table.commit import renumber
from changelake.table.format import data_file, file_settings, kv
from changelake.table.format.manifest import DataFileMeta
from changelake.table.io.fileio import FileIO
from changelake.table.lsm import lookup_files

THIN = "data-file.thin-mode"
SCHEMA = pa.schema([
    pa.field("dt", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("v", pa.string()),
    pa.field("n", pa.int64()),
])
COMPACTION = {"bucket": "2", "target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}
Row = dict[str, Any]


# -- helpers ------------------------------------------------------------------------------


def _create(root: Path, name: str, options: dict[str, str]) -> cl.Table:
    return cl.Catalog(str(root)).create_table(
        f"db.{name}", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"], options=options
    )


def _set_thin(table: cl.Table, *, thin: bool) -> cl.Table:
    """What Paimon's ``ALTER TABLE t SET ('data-file.thin-mode' = ...)`` does: a new schema file
    with the option changed; the table reopened at it."""
    schema = table.context.schema
    altered = schema.model_copy(update={"id": schema.id + 1, "options": {**schema.options, THIN: str(thin).lower()}})
    Path(table.context.paths.schema(altered.id)).write_text(altered.to_json())
    reopened = cl.open_table(table.location)
    assert reopened.context.options.data_file_thin_mode is thin
    return reopened


def _live_files(table: cl.Table, snapshot_id: int | None = None) -> list[tuple[str, DataFileMeta]]:
    return [(f"{s.bucket_dir}/{f.file_name}", f) for s in table.scan(snapshot_id=snapshot_id).plan() for f in s.files]


def _is_thin(path: str) -> bool:
    names = pq.read_schema(path).names
    assert kv.SEQUENCE in names and "k" in names
    return kv.key_column("k") not in names


def _layouts(table: cl.Table, snapshot_id: int | None = None) -> set[bool]:
    """Whether the live files are thin (True), full (False) or both."""
    return {_is_thin(path) for path, _ in _live_files(table, snapshot_id)}


def _read(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    return table.scan(snapshot_id=snapshot_id).to_arrow().sort_by([("dt", "ascending"), ("k", "ascending")]).to_pylist()


def _batch(rng: random.Random, count: int, *, kinds: tuple[str, ...] = ("+I",)) -> pa.Table:
    rows = [{"dt": rng.choice(["d1", "d2"]), "k": rng.randrange(40), "v": rng.choice(["a", "b", None, "c"]),
             "n": rng.randrange(100), "rowkind": rng.choice(kinds)} for _ in range(count)]
    return pa.Table.from_pylist(rows, schema=SCHEMA.append(pa.field("rowkind", pa.string())))


# -- the file format ------------------------------------------------------------------------


def _kv_rows() -> pa.Table:
    keys = pa.array([1, 2, 5, 9], pa.int64())
    return pa.table({
        "_KEY_k": keys, kv.SEQUENCE: pa.array([3, 1, 2, 0], pa.int64()),
        kv.VALUE_KIND: pa.array([0, 3, 2, 1], pa.int8()),
        "dt": ["d1"] * 4, "k": keys, "v": ["a", None, "c", "d"], "n": pa.array([1, 2, 3, 4], pa.int64()),
    }, schema=kv.file_schema(SCHEMA, ["k"]))


def _settings(*, thin: bool) -> file_settings.FileSettings:
    return file_settings.FileSettings(schema_id=0, key_names=("k",), compression="zstd", zstd_level=1,
                                  target_file_size=1 << 30, thin=thin)


def _write(tmp_path: Path, *, thin: bool) -> tuple[FileIO, str, DataFileMeta]:
    file_io, root = FileIO.for_url(str(tmp_path))
    [meta] = data_file.write(file_io, root, [_kv_rows()], _settings(thin=thin), level=0)
    return file_io, f"{root}/{meta.file_name}", meta


def test_a_thin_file_drops_only_the_key_columns_and_keeps_the_metadata(tmp_path: Path) -> None:
    _, full_path, full = _write(tmp_path, thin=False)
    _, thin_path, thin = _write(tmp_path, thin=True)
    assert pq.read_schema(full_path).names == ["_KEY_k", kv.SEQUENCE, kv.VALUE_KIND, "dt", "k", "v", "n"]
    # Paimon's thin layout: the system columns, then the value columns.
    assert pq.read_schema(thin_path).names == [kv.SEQUENCE, kv.VALUE_KIND, "dt", "k", "v", "n"]
    assert dataclasses.replace(thin, file_name=full.file_name, file_size=full.file_size,
                               creation_time_ms=full.creation_time_ms) == full
    assert thin.file_size < full.file_size
    assert (thin.row_count, thin.delete_row_count, thin.min_sequence_number, thin.max_sequence_number) == (4, 2, 0, 3)


@pytest.mark.parametrize("columns", [None, ["_KEY_k", kv.SEQUENCE, kv.VALUE_KIND, "v"], ["_KEY_k"],
                                     ["k", "_KEY_k"], ["n", "_KEY_k", "k"], [kv.VALUE_KIND]])
def test_a_thin_file_reads_in_the_full_layout(tmp_path: Path, columns: list[str] | None) -> None:
    schema = kv.file_schema(SCHEMA, ["k"])
    file_io, full_path, _ = _write(tmp_path, thin=False)
    _, thin_path, _ = _write(tmp_path, thin=True)
    full = data_file.read(file_io, full_path, schema, columns)
    thin = data_file.read(file_io, thin_path, schema, columns)
    assert thin.equals(full)
    assert thin.schema.equals(full.schema)
    assert thin.column_names == (schema.names if columns is None else columns)


def test_the_key_of_a_thin_file_is_the_value_array_itself(tmp_path: Path) -> None:
    file_io, path, _ = _write(tmp_path, thin=True)
    rows = data_file.read(file_io, path, kv.file_schema(SCHEMA, ["k"]))
    key, value = rows.column("_KEY_k"), rows.column("k")
    assert key.num_chunks == value.num_chunks
    for a, b in zip(key.chunks, value.chunks, strict=True):
        assert [buf.address if buf else None for buf in a.buffers()] == \
            [buf.address if buf else None for buf in b.buffers()]


def test_a_file_with_neither_the_key_nor_its_value_column_is_corrupt(tmp_path: Path) -> None:
    file_io, path, _ = _write(tmp_path, thin=True)
    renamed = kv.file_schema(SCHEMA.set(1, pa.field("other", pa.int64(), nullable=False)), ["other"])
    with pytest.raises(CorruptMetadataError) as raised:
        data_file.read(file_io, path, renamed, ["_KEY_other"])
    assert (raised.value.column, raised.value.file) == ("_KEY_other", path)


def test_the_option() -> None:
    assert TableOptions.parse({}, table="t").data_file_thin_mode is False
    assert TableOptions.parse({THIN: "TRUE"}, table="t", new=True).data_file_thin_mode is True
    with pytest.raises(OptionError) as raised:
        TableOptions.parse({THIN: "yes"}, table="db.t")
    assert (raised.value.option, raised.value.table) == (THIN, "db.t")


# -- one bucket, both layouts ---------------------------------------------------------------


@pytest.mark.parametrize("thin_first", [False, True], ids=["full-then-thin", "thin-then-full"])
def test_a_bucket_with_both_layouts_reads_compacts_and_time_travels(tmp_path: Path, thin_first: bool) -> None:
    """The same writes into a table whose layout switches halfway and into a plain table."""
    options = {"bucket": "1", "write-only": "true"}  # no compaction: every file stays as written
    mixed = _create(tmp_path, "mixed", {**options, THIN: str(thin_first).lower()})
    plain = _create(tmp_path, "plain", options)
    rng = random.Random(7)
    snapshots: list[tuple[int, int]] = []
    for step in range(6):
        if step == 3:
            mixed = _set_thin(mixed, thin=not thin_first)
        batch = _batch(rng, 25, kinds=("+I", "+U", "-D"))
        landed = (mixed.write(batch), plain.write(batch))
        assert landed[0] is not None and landed[1] is not None
        snapshots.append((landed[0].id, landed[1].id))
        assert _read(mixed) == _read(plain)
    assert _layouts(mixed) == {False, True}
    assert len({s.bucket_dir for s in mixed.scan().plan()}) == 2  # both partitions' bucket 0
    assert all(len(s.files) > 1 and not s.raw_convertible for s in mixed.scan().plan())
    for ours, theirs in snapshots:
        assert _read(mixed, ours) == _read(plain, theirs)
    assert _read(mixed, snapshots[1][0]) != _read(mixed)
    assert _layouts(mixed, snapshots[2][0]) == {thin_first}
    # Projections and filters over both layouts.
    for table in (mixed, plain):
        assert table.scan(columns=["k"]).to_arrow().num_rows == len(_read(plain))
    assert mixed.scan(filter=pc.field("k") < 10, columns=["k", "v"]).to_arrow().sort_by("k").to_pylist() == \
        plain.scan(filter=pc.field("k") < 10, columns=["k", "v"]).to_arrow().sort_by("k").to_pylist()
    before = _read(mixed)
    compacted = mixed.compact(full=True)
    assert compacted is not None and compacted.commit_kind is cl.CommitKind.COMPACT
    assert _read(mixed) == before == _read(plain)
    assert _layouts(mixed) == {not thin_first}
    assert {f.level for _, f in _live_files(mixed)} == {5}
    for ours, theirs in snapshots:
        assert _read(mixed, ours) == _read(plain, theirs)


@pytest.mark.parametrize("thin_first", [False, True], ids=["full-then-thin", "thin-then-full"])
def test_first_row_looks_up_older_keys_in_either_layout(
    tmp_path: Path, thin_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """first-row compacts level 0 up before each commit, dropping the keys an older level
    already holds: it reads the older files' keys, of either layout."""
    options = {"bucket": "1", "merge-engine": "first-row"}
    table = _create(tmp_path, "fr", {**options, THIN: str(thin_first).lower()})
    plain = _create(tmp_path, "plain", options)
    looked_up: set[bool] = set()
    real = data_file.read

    def spying(file_io: FileIO, path: str, schema: pa.Schema, columns: list[str] | None = None,
               *rest: Any, **named: Any) -> pa.Table:
        if columns == [kv.key_column("k")]:
            looked_up.add(_is_thin(path))
        return real(file_io, path, schema, columns, *rest, **named)

    monkeypatch.setattr(data_file, "read", spying)
    rng = random.Random(3)
    # Small writes after the switch are compacted below the top level, so they are looked up
    # in the top level's files of the other layout.
    for step, size in enumerate([40, 40, 4, 4, 4, 4]):
        if step == 2:
            table = _set_thin(table, thin=not thin_first)
        batch = _batch(rng, size)
        store = lookup_files.store_for(table.context)
        assert store is not None
        store.clear()  # the older files' keys are read from storage, not from what was written
        table.write(batch)
        plain.write(batch)
        assert _read(table) == _read(plain)
        live = _live_files(table)
        assert all(f.level > 0 for _, f in live)
        # Every key lives in exactly one file: the lookup dropped the keys older files hold.
        assert sum(f.row_count for _, f in live) == len(_read(table))
    assert looked_up == {False, True}
    table.compact(full=True)
    assert _read(table) == _read(plain)


# -- every merge engine in thin mode --------------------------------------------------------

# engine options, and the row kinds its input may hold (whose results do not depend on which
# rows a compaction merges together, see tests/table/merge/test_merge_engines_e2e.py)
ENGINES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "deduplicate": ({}, ("+I", "+U", "-U", "-D")),
    "partial-update": ({"merge-engine": "partial-update"}, ("+I",)),
    "partial-update-sequence-group": ({"merge-engine": "partial-update", "fields.n.sequence-group": "v"}, ("+I",)),
    "aggregation": ({"merge-engine": "aggregation", "fields.n.aggregate-function": "sum",
                     "fields.v.aggregate-function": "max"}, ("+I",)),
    "aggregation-last-value": ({"merge-engine": "aggregation", "fields.n.aggregate-function": "sum",
                             "fields.v.aggregate-function": "last_value"}, ("+I", "+U")),
    "first-row": ({"merge-engine": "first-row", "ignore-delete": "true"}, ("+I", "-D")),
    "sequence-field": ({"sequence.field": "n"}, ("+I", "+U")),
}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_merge_engine_reads_the_same_in_thin_mode(tmp_path: Path, engine: str) -> None:
    extra, kinds = ENGINES[engine]
    thin = _create(tmp_path, "thin", {**COMPACTION, **extra, THIN: "true"})
    plain = _create(tmp_path, "plain", {**COMPACTION, **extra})
    rng = random.Random(engine)
    landed: list[tuple[int, int]] = []
    for step in range(8):
        batch = _batch(rng, 40, kinds=kinds)
        ours, theirs = thin.write(batch), plain.write(batch)
        assert ours is not None and theirs is not None
        landed.append((ours.id, theirs.id))
        assert _read(thin) == _read(plain), f"step {step}"
        if step == 4:
            thin.compact(full=True)
            plain.compact(full=True)
    assert any(f.level > 0 for _, f in _live_files(thin))
    assert _layouts(thin) == {True} and _layouts(plain) == {False}
    for ours, theirs in landed:
        assert _read(thin, ours) == _read(plain, theirs)
    assert _read(thin)


def test_a_racing_commit_renumbers_its_thin_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _create(tmp_path, "t", {"bucket": "1", THIN: "true", "write-buffer-size": "1 b"})
    shifted: list[bool] = []
    real: Callable[..., Any] = renumber.renumber

    def counting(*args: Any) -> Any:
        result = real(*args)
        shifted.append(result is not None)
        return result

    monkeypatch.setattr(renumber, "renumber", counting)

    def rows(keys: list[int], value: str) -> pa.Table:
        return pa.table({"dt": ["d1"] * len(keys), "k": keys, "v": [value] * len(keys), "n": [None] * len(keys)},
                        schema=SCHEMA)

    with table.writer(commit_user="job") as writer:
        writer.write(rows([1], "w1"))
        writer.commit(identifier=1)
        writer.write(rows([1], "w3"))  # flushed now (tiny buffer): numbered before the next write
        table.write(rows([0, 1], "tw2"))
        writer.commit(identifier=2)
    assert any(shifted)
    assert [r["v"] for r in _read(table)] == ["tw2", "w3"]
    assert _layouts(table) == {True}
