"""The lookup files of a table (``table/lsm/lookup_files.py``): deletion-vector and first-row
compactions and the lookup producer find older keys through them, whatever part of a file is in
memory, spilled to local disk or only in the table's storage; files compactions removed leave
them; ``lookup.cache-max-disk-size`` bounds the spilled bytes and ``lookup.cache-file-retention``
their age; clearing drops everything."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.table.lsm import deletion_vectors, lookup_files
from changelake.table.lsm.lookup_files import LookupFiles
from changelake.table.merge import sort
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("s", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("a", pa.int64()), pa.field("b", pa.int64())])
Model = dict[tuple[Any, ...], tuple[Any, Any]]


def _write_history(table: cl.Table, keys: list[str], *, seed: int, commits: int = 12) -> Model:
    """Upserts and deletes spread over 300 keys in ``commits`` commits by one writer, applied
    to a model too (partial-update: null columns keep the previous value)."""
    rng = random.Random(seed)
    partial = table.context.options.merge_engine.value == "partial-update"
    model: Model = {}
    with table.writer(commit_user="job") as writer:
        for commit in range(commits):
            ids = sorted(rng.sample(range(300), 60))
            kinds = ["+I" if partial else rng.choice(["+I", "+I", "+U", "-D"]) for _ in ids]
            a = [None if partial and i % 3 == 0 else commit * 1000 + i for i in ids]
            b = [commit if not partial or i % 2 else None for i in ids]
            writer.write(pa.table({"s": [f"s{i % 5}" for i in ids], "k": ids, "a": a, "b": b,
                                   "rowkind": kinds}))
            writer.commit(commit)
            for i, kind, x, y in zip(ids, kinds, a, b, strict=True):
                key = (f"s{i % 5}", i) if keys == ["s", "k"] else (i,)
                if kind == "-D":
                    model.pop(key, None)
                elif partial and key in model:
                    old = model[key]
                    model[key] = (old[0] if x is None else x, old[1] if y is None else y)
                else:
                    model[key] = (x, y)
    return model


def _rows(table: cl.Table, keys: list[str]) -> Model:
    """The table's rows by key (a key read twice: an older row the lookups missed)."""
    rows = table.scan().to_arrow().to_pylist()
    by_key = {tuple(r[k] for k in keys): (r["a"], r["b"]) for r in rows}
    assert len(by_key) == len(rows)
    return by_key


def _store(table: cl.Table) -> LookupFiles:
    store = lookup_files.store_for(table.context)
    assert store is not None
    return store


@pytest.mark.parametrize("keys", [["k"], ["s", "k"]], ids=["integer-key", "two-column-key"])
@pytest.mark.parametrize("engine", ["deduplicate", "partial-update"])
def test_deletion_vector_tables_with_a_tiny_cache_read_as_the_model(
        tmp_path: Path, keys: list[str], engine: str) -> None:
    catalog = cl.Catalog(str(tmp_path))
    options = {"bucket": "2", "merge-engine": engine, "num-sorted-run.compaction-trigger": "2",
               "target-file-size": "4 kb"}
    plain = catalog.create_table("db.plain", SCHEMA, primary_keys=keys, options=options)
    with_dv = catalog.create_table("db.dv", SCHEMA, primary_keys=keys, options={
        **options, "deletion-vectors.enabled": "true", "lookup.cache-max-memory-size": "2 kb"})
    _store(with_dv).clear()
    model = _write_history(plain, keys, seed=3)
    assert _write_history(with_dv, keys, seed=3) == model
    assert _rows(with_dv, keys) == _rows(plain, keys) == model
    store = _store(with_dv)
    assert store.hits > 0 and store.disk_bytes > 0  # lookups were served, some from local disk
    assert store.memory_bytes <= 2048


def test_removed_files_leave_the_store_and_clearing_drops_everything(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "deletion-vectors.enabled": "true", "lookup.cache-max-memory-size": "4 kb",
        "num-sorted-run.compaction-trigger": "2"})
    store = _store(table)
    store.clear()
    model = _write_history(table, ["k"], seed=5)
    ctx = table.context
    latest = table.latest_snapshot()
    assert latest is not None
    live = {lookup_files.path_of(ctx.bucket_dir(e.partition, e.bucket), e.file.file_name)
            for e in live_files.live_entries(ctx, latest)}
    ever = {lookup_files.path_of(ctx.bucket_dir(e.partition, e.bucket), e.file.file_name)
            for s in table.snapshots() for e in live_files.live_entries(ctx, s)}
    assert ever - live  # compactions removed files...
    assert not any(path in store for path in ever - live)  # ...and they left the store
    assert any(path in store for path in live)
    store.clear()
    assert store.memory_bytes == store.disk_bytes == store.hits == store.misses == 0
    assert not any(path in store for path in live)
    assert _rows(table, ["k"]) == model
    # After clearing, the next commits find the older keys from storage again.
    more = pa.table({"s": ["s0"], "k": [0], "a": [-1], "b": [-1], "rowkind": ["+I"]})
    table.write(more)
    assert _rows(table, ["k"]) == {**model, (0,): (-1, -1)}
    assert store.misses > 0


def test_spilled_files_stay_within_the_disk_limit(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "deletion-vectors.enabled": "true", "lookup.cache-max-memory-size": "1 b",
        "lookup.cache-max-disk-size": "3 kb", "target-file-size": "2 kb"})
    assert table.context.options.lookup_cache_max_disk_size == 3 * 1024
    store = _store(table)
    store.clear()
    model = _write_history(table, ["k"], seed=7)
    assert 0 < store.disk_bytes <= 3 * 1024
    assert store.memory_bytes == 0
    assert _rows(table, ["k"]) == model


def test_key_lookups_spill_only_the_keys_and_value_lookups_whole_rows(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    options = {"bucket": "1", "deletion-vectors.enabled": "true", "lookup.cache-max-memory-size": "1 b"}
    keys_only = catalog.create_table("db.keys", SCHEMA, primary_keys=["k"], options=options)
    values = catalog.create_table("db.values", SCHEMA, primary_keys=["k"],
                                  options={**options, "merge-engine": "partial-update"})
    for table in (keys_only, values):
        _store(table).clear()
        _write_history(table, ["k"], seed=9, commits=4)
    # int64 keys of the same rows: the key-only files are a fraction of the whole rows
    assert 0 < _store(keys_only).disk_bytes * 2 < _store(values).disk_bytes
    assert not _store(keys_only).values and _store(values).values


def test_tables_that_look_nothing_up_keep_written_rows_in_memory_only(tmp_path: Path) -> None:
    """Without lookups the store only spares the next compactions decoding files this process
    just wrote: in memory, never spilled; a write-only table (never compacts) has none."""
    catalog = cl.Catalog(str(tmp_path))
    assert lookup_files.store_for(catalog.create_table(
        "db.w", SCHEMA, primary_keys=["k"], options={"write-only": "true"}).context) is None
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options={"bucket": "1"})
    store = lookup_files.store_for(table.context)
    assert store is not None
    store.clear()
    for i in range(8):  # enough commits for compactions to merge files written before
        keys = list(range(i * 50, i * 50 + 100))
        table.write(pa.table({"s": ["s"] * 100, "k": keys, "a": [i] * 100, "b": [i] * 100}))
    assert store.disk_bytes == 0 and 0 < store.memory_bytes <= lookup_files.WRITTEN_ROWS_MEMORY
    ctx = table.context
    latest = table.latest_snapshot()
    assert latest is not None
    kept = 0
    assert any(e.file.level > 0 for e in live_files.live_entries(ctx, latest))  # compactions ran
    for entry in live_files.live_entries(ctx, latest):
        bucket_dir = ctx.bucket_dir(entry.partition, entry.bucket)
        rows = store.find(lookup_files.path_of(bucket_dir, entry.file.file_name))
        if rows is not None:  # what is kept is what the file holds
            kept += 1
            assert rows.equals(ctx.read_file(bucket_dir, entry.file))
    assert kept
    assert sorted(_rows(table, ["k"])) == [(k,) for k in range(450)]


def test_keys_at_the_edges_of_older_files_are_found(tmp_path: Path) -> None:
    """Every commit updates the smallest and largest key of each file above level 0."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "deletion-vectors.enabled": "true", "target-file-size": "1 kb"})
    table.write(pa.table({"s": ["s"] * 200, "k": list(range(200)), "a": [0] * 200, "b": [0] * 200}))
    for commit in range(1, 4):
        edges = sorted({k for f in _files(table) for k in f})
        table.write(pa.table({"s": ["s"] * len(edges), "k": edges, "a": [commit] * len(edges),
                              "b": [commit] * len(edges)}))
        assert len(_rows(table, ["k"])) == 200


def _files(table: cl.Table) -> list[tuple[int, int]]:
    """The smallest and largest key of each live file above level 0."""
    ctx = table.context
    latest = table.latest_snapshot()
    assert latest is not None
    return [(ctx.key_of(e.file.min_key)[0], ctx.key_of(e.file.max_key)[0])
            for e in live_files.live_entries(ctx, latest) if e.file.level > 0]


def _file(n: int) -> pa.Table:
    return pa.table({"_KEY_k": pa.array(range(n), pa.int64()), "v": pa.array([str(i) * 8 for i in range(n)])})


def test_the_store_spills_least_recently_used_first_and_serves_keys_from_disk() -> None:
    store = LookupFiles(["_KEY_k"], max_memory=_file(100).nbytes * 4 + 1, max_disk=1 << 30, values=False)
    loads: list[str] = []

    def load(path: str) -> pa.Table:
        loads.append(path)
        return _file(100)

    for name in "abcde":
        store.put(name, _file(100))
    assert store.find("a") is None and "a" in store  # spilled (keys only): no whole rows
    assert store.find("e") is not None
    assert store.keys("a", lambda: load("a")).column(0).to_pylist() == list(range(100))
    assert store.rows("a", lambda: load("a")).num_columns == 2 and loads == ["a"]
    store.discard(["a", "e"])
    assert "a" not in store and "e" not in store
    store.clear()
    assert store.disk_bytes == 0 and not any(name in store for name in "bcd")


def test_the_store_deletes_spilled_files_beyond_the_disk_limit() -> None:
    one = LookupFiles(["_KEY_k"], max_memory=1, max_disk=1 << 30, values=True)
    one.put("a", _file(100))
    size = one.disk_bytes
    store = LookupFiles(["_KEY_k"], max_memory=1, max_disk=2 * size, values=True)
    for name in "abc":
        store.put(name, _file(100))
    assert store.disk_bytes == 2 * size
    assert "a" not in store and "b" in store and "c" in store
    assert store.find("b") is not None  # whole rows on disk: a store whose lookups need values
    one.clear()
    store.clear()


def test_spilled_files_unused_for_the_retention_are_deleted() -> None:
    now = [0.0]
    store = LookupFiles(["_KEY_k"], max_memory=1, max_disk=1 << 30, values=True, retention_ms=60_000,
                        clock=lambda: now[0])
    store.put("a", _file(100))
    now[0] = 40.0
    store.put("b", _file(100))
    now[0] = 50.0
    assert store.find("a") is not None  # used at 50 s: kept 60 s more
    now[0] = 105.0  # b was last used 65 s ago, a 55 s ago
    assert store.keys("c", lambda: _file(10)).num_rows == 10  # any use of the store expires
    assert "b" not in store and "a" in store and "c" in store
    now[0] = 200.0
    store.put("d", _file(100))
    assert "a" not in store and "d" in store
    store.clear()


def test_the_retention_is_the_tables_option(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["k"],
        options={"bucket": "1", "deletion-vectors.enabled": "true", "lookup.cache-file-retention": "5 min"})
    store = lookup_files.store_for(table.context)
    assert store is not None and store.retention_ms == 300_000
    with pytest.raises(cl.errors.OptionError, match=r"lookup\.cache-file-retention"):
        cl.Catalog(str(tmp_path)).create_table("db.u", SCHEMA, primary_keys=["k"],
                                               options={"lookup.cache-file-retention": "soon"})


@pytest.mark.parametrize("seed", range(5))
def test_integer_key_positions_are_found_chunk_by_chunk(seed: int) -> None:
    """The binary search of a file's sorted keys works on its chunks as they come (a big file's
    keys are many chunks, never concatenated): positions are those of the wanted keys in the
    whole column, wanted keys at chunk edges and outside every chunk included."""
    rng = random.Random(seed)
    keys = sorted(rng.sample(range(10_000), 900))
    cuts = sorted(rng.sample(range(1, len(keys)), 6))
    column = pa.chunked_array([keys[a:b] for a, b in zip([0, *cuts], [*cuts, len(keys)], strict=True)] + [[]],
                              pa.int64())
    edges = [keys[c] for c in cuts] + [keys[c - 1] for c in cuts] + [keys[0], keys[-1]]
    wanted = np.sort(np.array(rng.sample(range(-50, 10_050), 400) + edges + edges[:3], dtype=np.int64))
    found = sort.sorted_positions(column, wanted)
    expected = np.flatnonzero(np.isin(np.array(keys), wanted))
    assert sorted(set(found.tolist())) == expected.tolist()


def test_mapped_files_release_their_pages_beyond_the_memory_limit_and_answer_alike() -> None:
    """Spilled files stay mapped between lookups; the pages of the least recently used ones
    are released beyond the memory limit (with the rows in memory), and lookups in them find
    what they found."""
    one = LookupFiles(["_KEY_k"], max_memory=1, max_disk=1 << 30, values=False)
    one.put("a", _file(1000))
    size = one.disk_bytes
    one.clear()
    store = LookupFiles(["_KEY_k"], max_memory=3 * size // 2, max_disk=1 << 30, values=False)
    for name in "abcde":  # each beyond a quarter of the memory limit: straight to disk
        store.put(name, _file(1000))
    assert store.memory_bytes == 0 and store.disk_bytes == 5 * size

    def unread() -> pa.Table:
        raise AssertionError("read from storage")

    wanted = np.array([-1, 0, 7, 500, 999, 1000], dtype=np.int64)
    for _ in range(2):
        for name in "abcde":
            keys = store.keys(name, unread)
            assert sort.sorted_positions(keys.column("_KEY_k"), wanted).tolist() == [0, 7, 500, 999]
            assert store.resident_bytes == size  # the others' pages released
    assert store.find("a") is None  # only the keys were spilled
    kept = store.keys("a", unread)
    store.discard(["a"])  # a lookup still using the mapped rows reads on
    assert kept.column("_KEY_k").to_pylist() == list(range(1000))
    store.clear()
    assert store.resident_bytes == 0


def test_deletion_vector_compactions_look_up_each_written_key_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key is looked up in the older files when its row leaves level 0, never again when a
    compaction rewrites that row with newer level-0 rows (Paimon's lookup merge): the keys
    looked up over a history are at most the rows written."""
    looked_up = []
    take = deletion_vectors.take_older_rows

    def counting(*args: Any, **kwargs: Any) -> pa.Table:
        looked_up.append(args[2].num_rows)
        return take(*args, **kwargs)

    monkeypatch.setattr(deletion_vectors, "take_older_rows", counting)
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "deletion-vectors.enabled": "true"})
    rng = np.random.default_rng(3)
    plain = cl.Catalog(str(tmp_path)).create_table("db.plain", SCHEMA, primary_keys=["k"], options={"bucket": "1"})
    written = 0
    with table.writer(commit_user="job") as writer, plain.writer(commit_user="job") as other:
        for commit in range(40):
            ids = np.unique(np.concatenate([np.arange(commit * 50, commit * 50 + 40),
                                            rng.integers(0, commit * 50 + 1, 10)]))
            batch = pa.table({"s": ["x"] * len(ids), "k": ids, "a": np.full(len(ids), commit),
                              "b": ids * 2})
            written += len(ids)
            for w in (writer, other):
                w.write(batch)
                w.commit(commit)
    assert looked_up and sum(looked_up) <= written
    assert _rows(table, ["k"]) == _rows(plain, ["k"])


def _resident_kb(local: str) -> int:
    """The resident kB of this process's mappings of the file at ``local`` (Linux smaps)."""
    total, current = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if parts and "-" in parts[0] and len(parts) >= 5:
                current = parts[-1] == local
            elif current and parts[:1] == ["Rss:"]:
                total += int(parts[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
def test_pages_a_late_lookup_faults_back_in_are_released_again() -> None:
    """A lookup in another thread may use a file's mapped rows after its pages were released:
    they come back resident, and the next lookup beyond the limit releases them again."""
    store = LookupFiles(["_KEY_k"], max_memory=1, max_disk=1 << 30, values=False)
    for name in "ab":
        store.put(name, _file(200_000))

    def unread() -> pa.Table:
        raise AssertionError("read from storage")

    late = store.keys("a", unread)
    local = store._spilled["a"].local
    store.keys("b", unread)  # beyond the limit: a's pages released
    assert _resident_kb(local) == 0
    assert pc.sum(late.column("_KEY_k")).as_py() == sum(range(200_000))  # the late user reads a again
    assert _resident_kb(local) > 0
    store.keys("b", unread)
    assert _resident_kb(local) == 0
    store.clear()
