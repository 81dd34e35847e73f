"""``table.rescale``: partitions rewritten with another number of buckets as one OVERWRITE
snapshot (Paimon's rescale procedure), their rows unchanged; writes to them succeed after it and
later writes win; a concurrent commit that changed the partitions makes it fail, losing nothing;
bad input raises before anything is written."""

from __future__ import annotations

import datetime as dt
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake import errors
from changelake.table.format import bucket as bucket_hash
from changelake.table.format.snapshot import CommitKind
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.merge import chunked
from changelake.table.read.live_files import live_entries

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])


def _rows(dt: str, keys: range | list[int], v: int) -> pa.Table:
    keys = list(keys)
    return pa.table({"dt": [dt] * len(keys), "k": pa.array(keys, pa.int64()), "v": pa.array([v] * len(keys))},
                    schema=SCHEMA)


def _table(tmp_path: Path, **options: str) -> cl.Table:
    return cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["dt", "k"], partition_keys=["dt"],
                                                  options={"bucket": "2", **options})


def _read(table: cl.Table, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    return sorted(table.scan(snapshot_id).to_arrow().to_pylist(), key=lambda r: (r["dt"], r["k"]))


def _layout(table: cl.Table) -> dict[str, set[tuple[int, int]]]:
    """Each partition's (total buckets, level) pairs of its live files."""
    latest = table.latest_snapshot()
    assert latest is not None
    out: dict[str, set[tuple[int, int]]] = {}
    for e in live_entries(table.context, latest):
        out.setdefault(table.context.partition_values(e.partition)[0], set()).add((e.total_buckets, e.file.level))
    return out


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _history(table: cl.Table) -> None:
    """Inserts, updates and deletes over several commits in partitions a and b, unmerged."""
    table.write(pa.concat_tables([_rows("a", range(0, 60), 1), _rows("b", range(0, 40), 1)]))
    table.write(pa.concat_tables([_rows("a", range(30, 90), 2), _rows("b", range(20, 30), 2)]))
    with table.writer() as writer:
        writer.write(pa.table({"rowkind": ["-D"] * 10, "dt": ["a"] * 10, "k": pa.array(range(0, 10), pa.int64()),
                               "v": pa.array([None] * 10, pa.int64())}))
        writer.commit(1)


def test_rescale_rewrites_every_partition_as_one_overwrite(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _history(table)
    seen = {s.id: _read(table, s.id) for s in table.snapshots()}
    schema_before = table.context.schema.id
    landed = table.rescale(bucket=4)
    assert landed is not None and landed.commit_kind is CommitKind.OVERWRITE
    assert [s.id for s in table.snapshots()] == [*seen, landed.id]
    # the table's bucket is 4 now, in a new schema (Paimon's ALTER TABLE before the overwrite)
    assert table.options["bucket"] == "4" and table.context.schema.id == schema_before + 1
    assert cl.open_table(table.location).options["bucket"] == "4"
    assert _read(table) == seen[landed.id - 1]
    assert all(_read(table, i) == rows for i, rows in seen.items())  # time travel still sees the old layout
    top = table.context.options.num_levels - 1
    assert _layout(table) == {"a": {(4, top)}, "b": {(4, top)}}
    assert landed.total_record_count == len(seen[landed.id - 1])  # merged: one row per key, no deletes left
    # later writes go to the rescaled buckets and win over the rescaled rows
    table.write(pa.concat_tables([_rows("a", range(80, 100), 3), _rows("b", [5], 3)]))
    expected = {(r["dt"], r["k"]): r["v"] for r in seen[landed.id - 1]}
    expected |= {("a", k): 3 for k in range(80, 100)} | {("b", 5): 3}
    assert {(r["dt"], r["k"]): r["v"] for r in _read(table)} == expected
    table.compact(full=True)
    assert {(r["dt"], r["k"]): r["v"] for r in _read(table)} == expected
    # a key filter prunes by each partition's own number of buckets
    assert table.scan(filter=pc.field("k") == 85).to_arrow().to_pylist() == [{"dt": "a", "k": 85, "v": 3}]


@pytest.mark.parametrize("options", [
    {"deletion-vectors.enabled": "true"},
    {"merge-engine": "partial-update"},
    {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
    {"merge-engine": "first-row"},
    {"changelog-producer": "lookup"},
    {"sequence.field": "v"},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_rescale_keeps_the_merged_rows_of_each_merge_engine(tmp_path: Path, options: dict[str, str]) -> None:
    table = _table(tmp_path, **options)
    table.write(_rows("a", range(0, 50), 1))
    table.write(_rows("a", range(25, 75), 2))
    before = _read(table)
    table.rescale(bucket=3)
    assert _read(table) == before
    table.write(_rows("a", range(70, 80), 5))
    table.write(_rows("a", range(70, 80), 4))
    got = {r["k"]: r["v"] for r in _read(table)}
    old = {r["k"]: r["v"] for r in before}
    engine = options.get("merge-engine")
    for k in range(70, 80):
        want = {"aggregation": old.get(k, 0) + 9, "first-row": old.get(k, 5)}.get(engine or "", 4)
        if options.get("sequence.field") == "v":
            want = 5  # the highest sequence field wins, whenever written
        assert got[k] == want, (k, options)


def test_partitions_keep_their_own_number_until_rescaled(tmp_path: Path) -> None:
    """Paimon's model: ``bucket`` changes for the table (ALTER TABLE), each partition is rewritten
    by its own overwrite; partitions of other numbers read correctly meanwhile and are written
    again only once rescaled."""
    table = _table(tmp_path)
    _history(table)
    table.write(_rows("c", range(10), 7))
    before = _read(table)
    table.set_options({"bucket": "3"})  # Paimon's ALTER TABLE ... SET ('bucket' = '3')
    with pytest.raises(errors.BucketRescaleError, match=r"partition \{dt=a\} with a new bucket num 3, but the "
                                                        r"previous bucket num is 2: rescale the partition first"):
        table.write(_rows("a", [1], 9))
    landed = table.rescale(partitions=[{"dt": "a"}])  # at the table's bucket
    assert landed is not None
    assert table.options["bucket"] == "3"
    table.rescale(bucket=5, partitions=[{"dt": "c"}])
    top = table.context.options.num_levels - 1
    layout = _layout(table)
    assert layout["a"] == {(3, top)} and layout["c"] == {(5, top)} and {t for t, _ in layout["b"]} == {2}
    assert _read(table) == before
    for k in range(0, 100, 7):
        assert table.scan(filter=pc.field("k") == k).to_arrow().num_rows == sum(r["k"] == k for r in before)
    with pytest.raises(errors.BucketRescaleError):
        table.write(_rows("a", [1], 9))  # a is at 3, the table at 5 now
    table.write(_rows("c", [1, 50], 9))
    table.rescale(partitions=[{"dt": "a"}, {"dt": "b"}])
    table.write(_rows("a", [1], 9))
    table.write(_rows("b", [1], 9))
    assert {t for p in _layout(table).values() for t, _ in p} == {5}
    want = {(r["dt"], r["k"]): r["v"] for r in before} | {(p, 1): 9 for p in "abc"} | {("c", 50): 9}
    assert {(r["dt"], r["k"]): r["v"] for r in _read(table)} == want


def test_unpartitioned_table(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.u", SCHEMA.remove(0), primary_keys=["k"],
                                                   options={"bucket": "1"})
    table.write(pa.table({"k": pa.array(range(100), pa.int64()), "v": pa.array(range(100), pa.int64())}))
    table.write(pa.table({"k": pa.array(range(50), pa.int64()), "v": pa.array([0] * 50, pa.int64())}))
    before = table.scan().to_arrow().sort_by("k")
    table.rescale(bucket=8)
    assert table.scan().to_arrow().sort_by("k").equals(before)
    assert len({e.bucket for e in live_entries(table.context, table.latest_snapshot())}) == 8  # type: ignore[arg-type]
    with pytest.raises(errors.ScanError, match=r"\['dt'\] are not partition keys"):
        table.rescale(partitions=[{"dt": "a"}])


def test_a_commit_into_a_partition_while_it_is_rescaled_voids_the_rescale(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _history(table)
    other = cl.open_table(table.location)
    before = _read(table)
    files = _files(tmp_path)

    def meanwhile(done: int, total: int) -> None:
        if done == 1:  # partition a is read and rewritten; another writer commits to it
            other.write(_rows("a", [0, 200], 5))

    with pytest.raises(errors.CommitConflictError, match=r"changed partition \{dt=a\} after the overwrite read it"):
        table.rescale(bucket=4, progress=meanwhile)
    expected = sorted([*before, {"dt": "a", "k": 0, "v": 5}, {"dt": "a", "k": 200, "v": 5}],
                      key=lambda r: (r["dt"], r["k"]))
    assert _read(table) == expected  # the concurrent rows are kept
    latest = table.latest_snapshot()
    assert latest is not None and latest.commit_kind is CommitKind.APPEND
    # nothing of the rescale's files is left: only the other writer's commit and the new schema
    new = {f for f in _files(tmp_path) - files if "/bucket-" in f}
    named = {f"dt={table.context.partition_values(e.partition)[0]}/bucket-{e.bucket}/{e.file.file_name}"
             for e in live_entries(table.context, latest)}
    assert {f.split("db.db/t/")[1] for f in new} <= named
    # run again: it lands, and the writer with the old number is refused now (its partition moved)
    table.rescale()
    assert _read(table) == expected
    with pytest.raises(errors.BucketRescaleError):
        other.write(_rows("a", [1], 1))


def test_commits_to_other_partitions_and_compactions_meanwhile_do_not_void_it(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _history(table)
    table.write(_rows("c", range(10), 7))
    other = cl.open_table(table.location)
    before = _read(table)

    def meanwhile(done: int, total: int) -> None:
        if done == 1:
            other.write(_rows("c", [100], 8))  # a partition the rescale does not rewrite
            other.compact(full=True)  # rewrites a and b too, changing no row

    landed = table.rescale(partitions=[{"dt": "a"}, {"dt": "b"}], progress=meanwhile)
    assert landed is not None and landed.commit_kind is CommitKind.OVERWRITE
    assert _read(table) == sorted([*before, {"dt": "c", "k": 100, "v": 8}], key=lambda r: (r["dt"], r["k"]))
    assert {t for t, _ in _layout(table)["a"]} == {2}


def test_a_writer_that_flushed_before_the_rescale_commits_after_it(tmp_path: Path) -> None:
    """Its rows were hashed by the old number: its commit is void once the partition has the new
    one (the committer's bucket-count check for the files it flushed, the writer's own for the rows
    it flushes at commit); at the same number it lands and wins."""
    table = _table(tmp_path, **{"write-buffer-size": "1 kb"})
    _history(table)
    with table.writer(commit_user="late") as writer:
        writer.write(_rows("a", [1, 2], 11))
        table.rescale()  # same number: the writer's files fit
        writer.commit(1)
    assert [r["v"] for r in _read(table) if r["dt"] == "a" and r["k"] in (1, 2)] == [11, 11]
    with table.writer(commit_user="later") as writer:
        writer.write(_rows("a", [1, 2] * 40, 12))  # past the buffer: flushed now, hashed by 2
        cl.open_table(table.location).rescale(bucket=3)
        with pytest.raises((errors.CommitConflictError, errors.BucketRescaleError),
                           match=r"(total buckets of partition \{dt=a\} would change|new bucket num 2, but the "
                                 r"previous bucket num is 3)"):
            writer.commit(1)
    assert [r["v"] for r in _read(table) if r["dt"] == "a" and r["k"] in (1, 2)] == [11, 11]


def test_streams_skip_the_overwrite(tmp_path: Path) -> None:
    """As Paimon's streaming reads (``streaming-read-overwrite`` false): the OVERWRITE snapshot
    changes no row, a stream reads nothing of it and goes on with the next commit."""
    table = _table(tmp_path)
    table.write(_rows("a", range(20), 1))
    stream = table.stream()
    assert sum(b.data.num_rows for b in stream) == 20
    table.rescale(bucket=3)
    table.write(_rows("a", [3], 2))
    assert [r for b in stream for r in b.data.to_pylist()] == [{"rowkind": "+I", "dt": "a", "k": 3, "v": 2}]
    latest = table.latest_snapshot()
    assert latest is not None
    assert table.changes(1, latest.id).to_arrow().to_pylist() == [{"rowkind": "+I", "dt": "a", "k": 3, "v": 2}]


def _dynamic(table_dir: Path) -> None:
    """The table's next schema with ``bucket`` = -1, as Java Paimon would have made the table."""
    schemas = sorted(table_dir.glob("schema/schema-*"), key=lambda p: int(p.name.split("-")[1]))
    latest = json.loads(schemas[-1].read_text())
    latest["id"] += 1
    latest["options"]["bucket"] = "-1"
    (table_dir / "schema" / f"schema-{latest['id']}").write_text(json.dumps(latest))


@pytest.mark.parametrize(("call", "error", "message"), [
    ({"bucket": 0}, errors.OptionError, r"option 'bucket': rescale takes a number of buckets of 1 or more, not 0"),
    ({"bucket": -1}, errors.OptionError, "not -1"),
    ({"bucket": True}, errors.OptionError, "not True"),
    ({"bucket": "4"}, errors.OptionError, "not '4'"),
    ({"partitions": [{"dt": "zz"}]}, errors.ScanError, r"partition \{'dt': 'zz'\} holds no data"),
    ({"partitions": [{"nope": "a"}]}, errors.ScanError, r"\['nope'\] are not partition keys"),
    ({"partitions": {"dt": "a"}}, errors.ScanError, "a list of dicts"),
])
def test_bad_input_writes_nothing(tmp_path: Path, call: dict[str, Any], error: type[Exception], message: str) -> None:
    table = _table(tmp_path)
    _history(table)
    files = _files(tmp_path)
    with pytest.raises(error, match=message):
        table.rescale(**call)
    assert _files(tmp_path) == files


def test_tables_rescale_cannot_rewrite(tmp_path: Path) -> None:
    table = _table(tmp_path)
    files = _files(tmp_path)
    with pytest.raises(errors.SnapshotNotFoundError, match="has no snapshot: nothing to rescale"):
        table.rescale(bucket=3)
    assert _files(tmp_path) == files
    table.write(_rows("a", [1], 1))
    _dynamic(tmp_path / "db.db" / "t")
    files = _files(tmp_path)
    with pytest.raises(errors.OptionError, match="rescale rewrites tables of fixed buckets; this table has bucket=-1"):
        cl.open_table(table.location).rescale(bucket=3)
    assert _files(tmp_path) == files
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    unaware = cl.Catalog(str(tmp_path / "w2")).create_table("db.a", schema)
    unaware.write(pa.table({"k": [1, 2], "v": [1, 2]}))
    files = _files(tmp_path)
    with pytest.raises(errors.OptionError, match="rescale rewrites tables of fixed buckets; this table has bucket=-1"):
        unaware.rescale(bucket=3)
    assert _files(tmp_path) == files


def test_append_tables_keep_each_old_buckets_order_in_the_new_buckets(tmp_path: Path) -> None:
    """Paimon's rescale of a fixed-bucket append table: every row once, hashed by bucket-key into
    the new number of buckets, each new bucket holding its rows of old bucket 0, then of 1, ...,
    each in write order; rows are written out past write-buffer-size, in order all the same."""
    schema = pa.schema([("k", pa.int64()), ("seq", pa.int64()), ("dt", pa.string())])
    table = cl.Catalog(str(tmp_path)).create_table("db.a", schema, partition_keys=["dt"],
                                                   options={"bucket": "2", "bucket-key": "k",
                                                            "write-buffer-size": "4 kb"})
    for step in range(5):
        keys = [(step * 7 + i) % 11 for i in range(300)]
        seqs = [step * 1000 + i for i in range(300)]
        table.write(pa.table({"k": keys, "seq": seqs, "dt": ["a"] * 150 + ["b"] * 150}))
    before = table.scan().to_arrow()
    old_buckets = {(r["dt"], r["seq"]): b for b, part in _by_bucket(table).items() for r in part}
    landed = table.rescale(bucket=3, partitions=[{"dt": "a"}])
    assert landed is not None and landed.commit_kind.value == "OVERWRITE"
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["seq"]) == \
        sorted(before.to_pylist(), key=lambda r: r["seq"])
    for (dt_, new_bucket), rows in _by_bucket(table).items():
        if dt_ == "b":
            assert new_bucket < 2
            continue
        hashed = bucket_hash.buckets([pa.array([r["k"] for r in rows], pa.int64())], 3)
        assert set(hashed.tolist()) == {new_bucket}
        order = [(old_buckets[("a", r["seq"])][1], r["seq"]) for r in rows]
        assert order == sorted(order)  # by old bucket, then write order
    counts = {b: len(rows) for (dt_, b), rows in _by_bucket(table).items() if dt_ == "a"}
    assert set(counts) == {0, 1, 2} and sum(counts.values()) == 750
    table.write(pa.table({"k": [1], "seq": [9999], "dt": ["a"]}))  # into the rescaled partition
    assert table.scan().to_arrow().num_rows == 1501


def _by_bucket(table: cl.Table) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Each bucket's rows in file order (files by first sequence number)."""
    ctx = table.context
    found: dict[tuple[str, int], list[dict[str, Any]]] = {}
    entries = sorted(live_entries(ctx, ctx.latest_snapshot()),  # type: ignore[arg-type]
                     key=lambda e: e.file.min_sequence_number)
    for e in entries:
        rows = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file, list(ctx.arrow_schema.names))
        found.setdefault((ctx.partition_values(e.partition)[0], e.bucket), []).extend(rows.to_pylist())
    return found


def test_expiry_orphans_and_rollback_after_a_rescale(tmp_path: Path) -> None:
    """Expiry deletes the files only the snapshots before the rescale named; orphan removal keeps
    the rescaled files; a rollback to before the rescale brings the old layout back (the schema
    stays: the table's ``bucket`` is the new number, so the partitions are rescaled again before
    they take writes)."""
    table = _table(tmp_path)
    _history(table)
    before = _read(table)
    table.create_tag("old", table.latest_snapshot().id)  # type: ignore[union-attr]
    table.rescale(bucket=3)
    table.write(_rows("a", [500], 1))
    assert table.remove_orphan_files(older_than=dt.timedelta(0)) == []
    table.expire_snapshots(retain_min=1, retain_max=1, older_than_ms=2**62)
    after = sorted([*before, {"dt": "a", "k": 500, "v": 1}], key=lambda r: (r["dt"], r["k"]))
    assert _read(table) == after
    assert sorted(table.scan(tag="old").to_arrow().to_pylist(), key=lambda r: (r["dt"], r["k"])) == before
    table.rollback_to(tag="old")
    assert _read(table) == before and {t for p in _layout(table).values() for t, _ in p} == {2}
    with pytest.raises(errors.BucketRescaleError):
        table.write(_rows("a", [1], 1))
    table.rescale()
    table.write(_rows("a", [50], 7))
    assert _read(table) == [r if (r["dt"], r["k"]) != ("a", 50) else {**r, "v": 7} for r in before]


@pytest.mark.parametrize("partition", ["a", "c"])
def test_a_commit_that_wins_the_race_for_the_snapshot_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         partition: str) -> None:
    """Another commit takes the snapshot id the overwrite was about to create: the overwrite
    tries again on it, and lands unless that commit wrote a partition it rewrites."""
    table = _table(tmp_path)
    _history(table)
    table.write(_rows("c", range(5), 7))
    other = cl.open_table(table.location)
    before = _read(table)
    real = killpoints.reached
    raced = []

    def race(point: KillPoint, **kwargs: Any) -> None:
        if point is KillPoint.OVERWRITE and not raced:
            raced.append(other.write(_rows(partition, [300], 3)))
        real(point, **kwargs)

    monkeypatch.setattr(killpoints, "reached", race)
    expected = sorted([*before, {"dt": partition, "k": 300, "v": 3}], key=lambda r: (r["dt"], r["k"]))
    if partition == "a":
        with pytest.raises(errors.CommitConflictError, match=r"changed partition \{dt=a\}"):
            table.rescale(bucket=3, partitions=[{"dt": "a"}, {"dt": "b"}])
        assert table.latest_snapshot() == raced[0]
    else:
        landed = table.rescale(bucket=3, partitions=[{"dt": "a"}, {"dt": "b"}])
        assert landed is not None and landed.id == raced[0].id + 1
    assert _read(table) == expected


@pytest.mark.parametrize(("when", "then_write"), [(1, False), (2, False), (2, True)])
def test_a_rollback_while_it_runs_voids_the_rescale(tmp_path: Path, when: int, then_write: bool) -> None:
    """The rows it read hold commits the rollback dropped: it must not bring them back (also
    when another commit has taken the snapshot id it read since); files the rollback deleted
    while the rescale still had to read them void it too."""
    table = _table(tmp_path)
    _history(table)
    other = cl.open_table(table.location)
    kept = _read(table, 1)

    def meanwhile(done: int, total: int) -> None:
        if done == when:  # 1: partition a is rewritten, b not read yet; 2: both rewritten
            other.rollback_to(snapshot_id=1)
            if then_write:
                other.write(_rows("c", [1], 1))
                other.write(_rows("c", [2], 1))

    with pytest.raises(errors.CommitConflictError, match="was rolled back"):
        table.rescale(progress=meanwhile)
    extra = [{"dt": "c", "k": 1, "v": 1}, {"dt": "c", "k": 2, "v": 1}] if then_write else []
    assert _read(table) == [*kept, *extra]


@pytest.mark.parametrize("options", [
    {}, {"deletion-vectors.enabled": "true"},
    {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
], ids=["deduplicate", "vectors", "partial-update"])
def test_big_partitions_are_rewritten_in_bounded_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        options: dict[str, str]) -> None:
    """Partitions whose files are big together are merged a chunk of keys at a time and spilled
    to local disk per new bucket (forced here with tiny chunks): the same rows and layout as a
    rescale in memory, and no spill left behind."""
    def history(table: cl.Table) -> None:
        _history(table)
        table.write(pa.concat_tables([_rows("a", range(85, 140), 4), _rows("b", range(35, 60), 4)]))

    small = _table(tmp_path / "small", **options)
    history(small)
    small.rescale(bucket=3)
    big = _table(tmp_path / "big", **options)
    history(big)
    before = _read(big)
    monkeypatch.setattr(chunked, "CHUNKED_MERGE_BYTES", 0)
    monkeypatch.setattr(chunked, "BATCH_ROWS", 7)
    spills_before = set(Path(tempfile.gettempdir()).glob("changelake-rescale-*"))
    big.rescale(bucket=3)
    assert set(Path(tempfile.gettempdir()).glob("changelake-rescale-*")) == spills_before
    assert _read(big) == before == _read(small)
    assert _layout(big) == _layout(small)
    big.write(_rows("a", [100, 101], 9))
    assert [r["v"] for r in _read(big) if r["dt"] == "a" and r["k"] in (100, 101)] == [9, 9]


@pytest.mark.parametrize("producer", ["lookup", "full-compaction", "input"])
def test_changelog_producers_after_a_rescale(tmp_path: Path, producer: str) -> None:
    """The rescaled rows are the before-images of later changes: a stream sees the update of a
    rescaled key as -U/+U (lookup, full-compaction), or as written (input), and nothing of the
    rescale itself."""
    table = _table(tmp_path, **{"changelog-producer": producer})
    table.write(_rows("a", range(10), 1))
    table.compact(full=True)
    stream = table.stream(mode="latest")
    table.rescale(bucket=3)
    table.write(_rows("a", [4], 2))
    if producer == "full-compaction":
        table.compact(full=True)
    got = [(r["rowkind"], r["k"], r["v"]) for b in stream for r in b.data.to_pylist()]
    assert got == ([("+I", 4, 2)] if producer == "input" else [("-U", 4, 1), ("+U", 4, 2)])


def test_a_handle_on_an_older_schema_rescales_in_the_newest(tmp_path: Path) -> None:
    """Files written under a newer schema keep its columns: the rescale rewrites in the table's
    newest schema, and the handle moves to it."""
    stale = _table(tmp_path)
    stale.write(_rows("a", range(5), 1))
    newer = cl.open_table(stale.location)
    with newer.update_schema() as update:
        update.add_column("w", pa.string())
    newer.write(pa.table({"dt": ["a"], "k": pa.array([9], pa.int64()), "v": pa.array([2], pa.int64()), "w": ["x"]}))
    stale.rescale(bucket=3)
    assert stale.schema.names == ["dt", "k", "v", "w"]
    got = {r["k"]: r["w"] for r in stale.scan().to_arrow().to_pylist()}
    assert got == {0: None, 1: None, 2: None, 3: None, 4: None, 9: "x"}
