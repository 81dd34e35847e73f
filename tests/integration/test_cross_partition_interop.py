"""Cross-partition upsert tables (a primary key without the partition column, ``bucket = -1``)
across Paimon engines. Keys move between partitions (deduplicate: a -D in the old partition, the
row in the new one), stay where they live (partial-update, aggregation: the row is written into
the key's old partition) or keep their first row (first-row); every engine reads what a model of
those semantics says, at every snapshot, and no key is ever live in two partitions or buckets.

* pypaimon 2.1 reads changelake's tables (every merge engine, fully compacted in between) at
  every snapshot, also of a table it created; it refuses to write one ("CROSS_PARTITION
  primary-key writes require a persistent global primary-key index"), which a test pins.
* pypaimon-rust 0.4 writes cross-partition tables (deduplicate, partial-update, aggregation)
  and reads them: it and changelake write one table in turn, on a table either created. It
  reads no level 0 of a first-row table, so of those it only reads changelake's.
* Java Paimon 0.9 writes through its own ``GlobalIndexAssigner`` (key index bootstrapped by
  ``IndexBootstrap``, rows collected over py4j's callback server); it and changelake write one
  table in turn (each fully compacting once), then pypaimon-rust reads it too (pypaimon 2.1
  cannot: it reads no manifest file of Java Paimon 0.9, which has no ``_VALUE_STATS_COLS``).
  The same batches (deletes too) written into two fresh tables, one by each, place every key in
  the same partition and bucket, also where a batch interleaves moves and new keys of one
  partition (a moved key frees its place from its row on, as Paimon's row-by-row assigner). A
  changelake writer whose key index predates Java's commit catches up with it. Keys also move
  in and out of the null partition (``__DEFAULT_PARTITION__``), and a primary key may hold one
  of two partition columns (Java 0.9 only reads those: it keys its index without them).
  Bootstrapped from the table, changelake's key index counts live keys only, as Java's does;
  with ``changelog-producer`` input or lookup, both engines write the same changes for moves.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl
from changelake.table.read.live_files import live_entries
from changelake.table.read.reader import read_split
from changelake.table.write.assigners import key_places
from pypaimon_oracle import Pypaimon, PypaimonError

Row = dict[str, Any]
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False),
                    pa.field("v", pa.int64()), pa.field("w", pa.string())])
NULLABLE_DT = SCHEMA.set(1, SCHEMA.field("dt").with_nullable(True))
JAVA_FIELDS = [("id", "BIGINT"), ("dt", "STRING"), ("v", "BIGINT"), ("w", "STRING")]
TARGET = {"dynamic-bucket.target-row-num": "3"}  # a few keys a bucket: partitions open several
ENGINES = {"deduplicate": {}, "partial-update": {"merge-engine": "partial-update"},
           "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
           "first-row": {"merge-engine": "first-row"}}
Write = Callable[[list[Row]], None]
Read = Callable[[int], list[Row]]


def _key(row: Row) -> tuple[Any, ...]:
    """A row's primary key: ``id``, and ``hr`` in tables that have it (partitioned by dt, hr)."""
    return (row["id"], row["hr"]) if "hr" in row else (row["id"],)


def _partition(row: Row) -> tuple[Any, ...]:
    return (row["dt"], row["hr"]) if "hr" in row else (row["dt"],)


def _sorted(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=_key)


def _batches(seed: int, count: int, partitions: Sequence[str | None] = "abc") -> list[list[Row]]:
    """``count`` batches of 12 rows over 12 keys and ``partitions``: most keys written again
    land in another partition (some twice within a batch); some values are null."""
    rng = random.Random(seed)
    return [[{"id": rng.randrange(12), "dt": rng.choice(partitions), "v": rng.choice([None, rng.randrange(1000)]),
              "w": rng.choice([None, f"s{step}"])} for _ in range(12)] for step in range(count)]


class Model:
    """What the table holds by the merge engine: deduplicate keeps a key's last row (and its
    partition), a -D deleting the key wherever it is; partial-update and aggregation keep the
    key in the partition it was first written to and take each row's non-null values
    (aggregation: ``v`` summed); first-row keeps a key's first row."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.rows: dict[tuple[Any, ...], Row] = {}
        self.moves = 0

    def apply(self, rows: Iterable[Row]) -> None:
        for values in rows:
            row = {k: v for k, v in values.items() if k != "rowkind"}
            if values.get("rowkind", "+I") == "-D":
                self.rows.pop(_key(row), None)
                continue
            old = self.rows.get(_key(row))
            if old is not None and _partition(old) != _partition(row):
                self.moves += 1
            if old is None or self.engine == "deduplicate":
                self.rows[_key(row)] = dict(row)
            elif self.engine != "first-row":
                new = {**old, **{k: v for k, v in row.items() if v is not None and k not in ("dt", "hr")}}
                if self.engine == "aggregation" and old["v"] is not None and row["v"] is not None:
                    new["v"] = old["v"] + row["v"]
                self.rows[_key(row)] = new

    def expected(self) -> list[Row]:
        return _sorted(self.rows.values())


def _ours(table: cl.Table, snapshot_id: int) -> list[Row]:
    return _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())


Place = tuple[tuple[Any, ...], int]  # partition values, bucket


def placement(table: cl.Table, snapshot_id: int) -> dict[tuple[Any, ...], Place]:
    """Where each live key of the snapshot is, from each bucket's merged rows; fails when a
    key is live in two places."""
    ctx = table.context
    where: dict[tuple[Any, ...], Place] = {}
    for split in table.scan(snapshot_id=snapshot_id).plan():
        at = (ctx.partition_values(split.partition), split.bucket)
        for key in map(_key, read_split(ctx, split, table.primary_keys, None).to_pylist()):
            assert where.setdefault(key, at) == at, f"snapshot {snapshot_id}: key {key} in {where[key]} and {at}"
    return where


def _arrow(table: cl.Table, rows: list[Row]) -> pa.Table:
    """``rows`` for changelake's write, with their ``rowkind`` (+I, -D, ...) where they have one."""
    if not any("rowkind" in r for r in rows):
        return pa.Table.from_pylist(rows, schema=table.schema)
    schema = table.schema.append(pa.field("rowkind", pa.string()))
    return pa.Table.from_pylist([{"rowkind": "+I", **r} for r in rows], schema=schema)


def _java_rows(rows: list[Row]) -> list[tuple[str, Row]]:
    return [(r.get("rowkind", "+I"), r) for r in rows]


def _compacting(table: cl.Table) -> Write:
    """A changelake write after a full compaction (the key index then bootstraps from the
    compacted files, and readers read them); first-row tables' writes leave nothing to compact."""
    def write(rows: list[Row]) -> None:
        compacted = table.compact(full=True)
        assert compacted or table.context.options.merge_engine is cl.MergeEngineKind.FIRST_ROW
        table.write(_arrow(table, rows))
    return write


def _exercise(table: cl.Table, engine: str, batches: list[list[Row]], writers: list[Write | None],
              readers: list[Read]) -> None:
    """Write ``batches`` in turn by ``writers`` (None: changelake); after each, changelake's
    latest snapshot holds the model's rows, each key in one place, and the partitions of the
    rows are where they live; at the end every reader reads every snapshot as changelake does
    (and the model, after each batch)."""
    assert table.context.cross_partition and table.context.options.bucket == -1
    model = Model(engine)
    expected: dict[int, list[Row]] = {}
    for step, rows in enumerate(batches):
        write = writers[step % len(writers)]
        if write is None:
            table.write(_arrow(table, rows))
        else:
            write(rows)
        model.apply(rows)
        table.refresh()
        latest = table.latest_snapshot()
        assert latest is not None
        ours = _ours(table, latest.id)
        assert ours == model.expected(), f"after batch {step}"
        where = placement(table, latest.id)
        assert {_key(r): _partition(r) for r in ours} == {k: p for k, (p, _) in where.items()}
        expected[latest.id] = ours
    assert model.moves >= 5  # the batches do move keys (or, for partial-update, try to)
    assert len({b for _, b in placement(table, max(expected)).values()}) >= 2  # buckets fill up
    for snapshot in table.snapshots():
        ours = _ours(table, snapshot.id)
        placement(table, snapshot.id)
        assert ours == expected.get(snapshot.id, ours)
        for read in readers:
            assert read(snapshot.id) == ours, f"snapshot {snapshot.id} read by {read}"


# -- pypaimon 2.1: reads only -------------------------------------------------------------


def _pypaimon_reader(pypaimon: Pypaimon, warehouse: str) -> Read:
    return lambda s: _sorted(pypaimon.read(warehouse, "db.t", {"scan.snapshot-id": str(s)}).to_pylist())


@pytest.mark.parametrize("engine", ENGINES)
def test_pypaimon_reads_every_snapshot_of_changelake_cross_partition_table(tmp_path: Any, pypaimon: Pypaimon,
                                                                          engine: str) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"],
                                               options={**TARGET, **ENGINES[engine]})
    _exercise(table, engine, _batches(1, 5), [None, _compacting(table)], [_pypaimon_reader(pypaimon, warehouse)])


def test_changelake_writes_pypaimon_cross_partition_table_pypaimon_refuses_to(tmp_path: Any,
                                                                             pypaimon: Pypaimon) -> None:
    """pypaimon creates the table (``bucket`` unset: -1); changelake writes it, pypaimon reads
    it, and pypaimon's own write is refused, writing nothing."""
    warehouse = str(tmp_path)
    pypaimon.create_table(warehouse, "db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"], options=TARGET)
    table = cl.Catalog(warehouse).get_table("db.t")
    _exercise(table, "deduplicate", _batches(2, 4), [None], [_pypaimon_reader(pypaimon, warehouse)])
    latest = table.latest_snapshot()
    with pytest.raises(PypaimonError, match="CROSS_PARTITION primary-key writes require"):
        pypaimon.write(warehouse, "db.t", _arrow(table, [{"id": 0, "dt": "z", "v": 1, "w": None}]))
    table.refresh()
    assert table.latest_snapshot() == latest


# -- pypaimon-rust 0.4: writes and reads ---------------------------------------------------


def _rust_catalog(warehouse: str) -> Any:
    from pypaimon_rust.datafusion import PaimonCatalog

    return PaimonCatalog({"warehouse": warehouse})


def _rust_create(warehouse: str, options: dict[str, str]) -> None:
    from pypaimon_rust.datafusion import SQLContext

    context = SQLContext()
    catalog = f"c{uuid.uuid4().hex[:8]}"
    context.register_catalog(catalog, {"warehouse": warehouse})
    context.sql(f"CREATE SCHEMA {catalog}.db")
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    context.sql(f"CREATE TABLE {catalog}.db.t (id BIGINT NOT NULL, dt STRING NOT NULL, v BIGINT, w STRING, "
                f"PRIMARY KEY (id)) PARTITIONED BY (dt) WITH ({settings})")


def _rust_write(warehouse: str, rows: list[Row], schema: pa.Schema = SCHEMA) -> None:
    builder = _rust_catalog(warehouse).get_table("db.t").new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    try:
        write.write_arrow(pa.RecordBatch.from_pylist(rows, schema=schema))
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()


def _rust_read(warehouse: str, snapshot_id: int) -> list[Row]:
    builder = _rust_catalog(warehouse).get_table("db.t").new_read_builder({"scan.snapshot-id": str(snapshot_id)})
    return _sorted([row for batch in builder.new_read().read(builder.new_scan().plan().splits())
                    for row in batch.to_pylist()])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("created_by_us", [True, False], ids=["changelake-table", "rust-table"])
def test_pypaimon_rust_and_changelake_write_one_cross_partition_table(tmp_path: Any, engine: str,
                                                                      created_by_us: bool) -> None:
    pytest.importorskip("pypaimon_rust")
    warehouse = str(tmp_path)
    options = {**TARGET, **ENGINES[engine]}
    if created_by_us:
        cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"], options=options)
    else:
        _rust_create(warehouse, options)
    table = cl.Catalog(warehouse).get_table("db.t")
    rust: Write = lambda rows: _rust_write(warehouse, rows)  # noqa: E731
    # pypaimon-rust reads no level 0 of a first-row table (its own writes stay there): it only reads
    writers: list[Write | None] = [None] if engine == "first-row" else [None, rust] if created_by_us else [rust, None]
    _exercise(table, engine, _batches(3, 6), writers, [lambda s: _rust_read(warehouse, s)])


# -- Java Paimon 0.9: GlobalIndexAssigner writes, reads ------------------------------------


@pytest.mark.parametrize(("engine", "created_by_us"), [
    ("deduplicate", True), ("deduplicate", False), ("partial-update", False), ("aggregation", True),
    ("first-row", False)], ids=lambda v: v if isinstance(v, str) else "changelake-table" if v else "java-table")
def test_java_paimon_and_changelake_write_one_cross_partition_table(tmp_path: Any, java: JavaPaimon, engine: str,
                                                                    created_by_us: bool) -> None:
    """Java's writes go through its ``GlobalIndexAssigner``, bootstrapped from changelake's
    files (once after changelake fully compacted them), and changelake's key index bootstraps
    from Java's (once after Java fully compacted every bucket); pypaimon-rust reads the table
    too (pypaimon 2.1 reads no manifest Java Paimon 0.9 writes: it lacks ``_VALUE_STATS_COLS``)."""
    pytest.importorskip("pypaimon_rust")
    warehouse = str(tmp_path)
    options = {**TARGET, **ENGINES[engine]}
    if created_by_us:
        cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"], options=options)
    else:
        java.create_table(warehouse, "db.t", JAVA_FIELDS, primary_keys=["id"], partition_keys=["dt"], options=options)
    table = cl.Catalog(warehouse).get_table("db.t")

    def theirs(rows: list[Row]) -> None:
        java.write_cross_partition(warehouse, "db.t", _java_rows(rows))

    def theirs_compacting(rows: list[Row]) -> None:
        table.refresh()
        ctx = table.context
        buckets = sorted({(e.partition, e.bucket) for e in live_entries(ctx, ctx.latest_snapshot())})  # type: ignore[arg-type]
        java.compact(warehouse, "db.t", [(dict(zip(ctx.partition_keys, ctx.partition_values(p), strict=True)), b)
                                         for p, b in buckets])
        table.refresh()
        assert table.latest_snapshot().commit_kind.value == "COMPACT"  # type: ignore[union-attr]
        theirs(rows)

    writers: list[Write | None] = [None, theirs, _compacting(table), theirs_compacting]
    readers = [lambda s: _sorted(java.read(warehouse, "db.t", s)), lambda s: _rust_read(warehouse, s)]
    _exercise(table, engine, _batches(4, 6), writers if created_by_us else writers[1:] + writers[:1], readers)


def test_keys_move_into_and_out_of_the_null_partition(tmp_path: Any, java: JavaPaimon, pypaimon: Pypaimon) -> None:
    """Null partition values (``dt=__DEFAULT_PARTITION__``) are a partition like any other:
    changelake and Java move keys in and out of it; Java, pypaimon-rust and pypaimon (up to
    Java's first commit) read every snapshot."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", NULLABLE_DT, primary_keys=["id"], partition_keys=["dt"],
                                               options=TARGET)

    def theirs(rows: list[Row]) -> None:
        java.write_cross_partition(warehouse, "db.t", _java_rows(rows))

    pypaimon_read = _pypaimon_reader(pypaimon, warehouse)
    read_by_pypaimon = []

    def pypaimon_until_java(snapshot_id: int) -> list[Row]:
        try:
            rows = pypaimon_read(snapshot_id)
        except PypaimonError as exc:  # a manifest of Java's
            if "_VALUE_STATS_COLS" not in str(exc):
                raise
            return _ours(table, snapshot_id)
        read_by_pypaimon.append(snapshot_id)
        return rows

    _exercise(table, "deduplicate", _batches(6, 4, ["a", None, "b"]), [None, None, theirs], [
        lambda s: _sorted(java.read(warehouse, "db.t", s)), lambda s: _rust_read(warehouse, s), pypaimon_until_java])
    assert len(read_by_pypaimon) >= 2
    assert any(p == (None,) for p, _ in placement(table, table.latest_snapshot().id).values())  # type: ignore[union-attr]


HOURLY = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string(), nullable=False),
                    pa.field("hr", pa.int32(), nullable=False), pa.field("v", pa.int64()), pa.field("w", pa.string())])


@pytest.mark.parametrize("engine", ["deduplicate", "partial-update"])
@pytest.mark.parametrize("rust_writes", [False, True], ids=["changelake-writes", "rust-writes-too"])
def test_primary_key_with_one_of_two_partition_columns(tmp_path: Any, java: JavaPaimon, pypaimon: Pypaimon,
                                                       engine: str, rust_writes: bool) -> None:
    """Primary key (id, hr), partitions (dt, hr): a key moves between days, never between
    hours. changelake writes (and pypaimon-rust in turn); pypaimon, pypaimon-rust and Java (of
    a table without pypaimon-rust's thin files, which Java Paimon 0.9 cannot read) read every
    snapshot. Java Paimon 0.9 does not write here: its key index holds the primary key without
    the partition columns, so (1, hr=1) and (1, hr=2) would be one key to it (Paimon 1.2 keys
    it by the whole primary key, as changelake does: apache/paimon#5588)."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", HOURLY, primary_keys=["id", "hr"], partition_keys=["dt", "hr"],
                                               options={**TARGET, **ENGINES[engine]})
    rng = random.Random(7)
    batches = [[{"id": rng.randrange(6), "dt": rng.choice("ab"), "hr": rng.choice([1, 2]),
                 "v": rng.choice([None, rng.randrange(100)]), "w": rng.choice([None, f"s{step}"])} for _ in range(12)]
               for step in range(5)]
    readers = [_pypaimon_reader(pypaimon, warehouse), lambda s: _rust_read(warehouse, s)]
    if rust_writes:
        _exercise(table, engine, batches, [None, lambda rows: _rust_write(warehouse, rows, HOURLY)], readers)
    else:
        _exercise(table, engine, batches, [None], [*readers, lambda s: _sorted(java.read(warehouse, "db.t", s))])


def test_changelake_writer_after_java_moved_keys_catches_up_with_them(tmp_path: Any, java: JavaPaimon) -> None:
    """A long-lived changelake writer holds its key index as of its last commit; Java moved keys
    since. Its next rows are placed after it caught up with Java's files (no key left in two
    partitions), and land where the model says."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=["id"], partition_keys=["dt"],
                                               options=TARGET)
    model = Model("deduplicate")
    first, moves, again = _rows([(k, "a") for k in range(6)]), _rows([(0, "b"), (1, "b")], 1), \
        _rows([(0, "c"), (1, "a"), (2, "b")], 2)
    with table.writer() as writer:
        writer.write(_arrow(table, first))
        writer.commit(1)
        java.write_cross_partition(warehouse, "db.t", _java_rows(moves))
        writer.write(_arrow(table, again))  # its index had keys 0 and 1 in a
        assert writer.commit(2)
    for rows in (first, moves, again):
        model.apply(rows)
    table.refresh()
    latest = table.latest_snapshot().id  # type: ignore[union-attr]
    assert _ours(table, latest) == model.expected() == _sorted(java.read(warehouse, "db.t", latest))
    assert {k: p for k, (p, _) in placement(table, latest).items()} == {k: _partition(r) for k, r in model.rows.items()}


def _rows(pairs: Iterable[tuple[int, str]], value: int = 0, kind: str = "+I") -> list[Row]:
    return [{"id": key, "dt": dt, "v": value, "w": None, "rowkind": kind} for key, dt in pairs]


# Batches whose moves free places in other partitions than the batch opens keys in (a batch's
# frees and placements then commute): keys fill a, b; move a -> b (a's places freed); new keys
# refill a; b -> c while new keys go to a and c; keys come back to a.
ONE_WAY = [
    _rows([(k, "a") for k in range(10)] + [(k, "b") for k in range(10, 15)]),
    _rows([(1, "b"), (4, "b"), (7, "b"), (0, "a"), (10, "b")], 1),
    _rows([(k, "a") for k in range(20, 24)], 2),
    _rows([(10, "c"), (1, "c"), (11, "c"), (30, "a"), (31, "c"), (2, "a")], 3),
    _rows([(11, "a"), (12, "a"), (32, "b"), (33, "b"), (34, "b")], 4),
]
# Moves and new keys interleaved in one partition: Paimon frees a moved key's place when its
# row comes, before the rows after it are placed (a's bucket 0 holds 3 keys when 4 comes).
MOVED_BEFORE = [_rows([(1, "a"), (2, "a"), (3, "a"), (1, "b"), (4, "a")])]  # Paimon: 4 in a's bucket 0
MOVED_AFTER = [_rows([(1, "a"), (2, "a"), (3, "a")]), _rows([(4, "a"), (1, "b")])]  # Paimon: 4 in bucket 1
# Deletes of keys in their partition, in another one, and of keys the table never had (Paimon
# places those like new keys: the key then lives where its -D went).
DELETES = [
    _rows([(1, "a"), (2, "a"), (3, "a"), (4, "a")]),
    _rows([(1, "b"), (2, "a"), (9, "b")], kind="-D") + _rows([(5, "c")], 1),
    _rows([(1, "c"), (2, "b"), (9, "c")], 2) + _rows([(3, "c")], kind="-D") + _rows([(3, "c")], 2),
]
# Paimon's Flink sink runs max(initial-buckets, assigner-parallelism) assigners in this mode; each
# fills the buckets b with b % assigners == its number.
THREE_ASSIGNERS = {"dynamic-bucket.initial-buckets": "2", "dynamic-bucket.assigner-parallelism": "3"}
# Keys into and out of the null partition (Paimon's __DEFAULT_PARTITION__).
NULLS = [_rows([(1, "a"), (2, None), (3, None), (4, "a")]), _rows([(1, None), (2, "b"), (5, None)], 1),
         _rows([(3, "a"), (6, None), (7, None)], 2)]
PLACEMENT_CASES = [
    pytest.param("deduplicate", ONE_WAY, {}, id="deduplicate-one-way"),
    pytest.param("deduplicate", NULLS, {}, id="null-partition"),
    pytest.param("deduplicate", DELETES, {}, id="deduplicate-deletes"),
    pytest.param("partial-update", _batches(5, 5), {}, id="partial-update"),
    pytest.param("aggregation", _batches(8, 4), {}, id="aggregation"),
    pytest.param("first-row", _batches(9, 4), {}, id="first-row"),
    pytest.param("deduplicate", ONE_WAY, THREE_ASSIGNERS, id="three-assigners"),
    pytest.param("deduplicate", MOVED_BEFORE, {}, id="moved-before-new-key"),
    pytest.param("deduplicate", MOVED_AFTER, {}, id="moved-after-new-key"),
]


@pytest.mark.parametrize(("engine", "batches", "extra"), PLACEMENT_CASES)
def test_changelake_places_keys_as_java_global_index_assigner(tmp_path: Any, java: JavaPaimon, engine: str,
                                                              batches: list[list[Row]], extra: dict[str, str]) -> None:
    """The same batches into two fresh tables, one written by changelake, one by Java's
    ``GlobalIndexAssigner``: after each, every key is in the same partition and bucket (Paimon's
    ``BucketAssigner``: the lowest bucket with room, a moved key's place freed)."""
    _compare_placement(str(tmp_path), java, engine, batches, extra)


# A deleted key's place: b's bucket 0 has room for key 4 once the table's live keys are counted.
DELETED_THEN_NEW = [_rows([(1, "b"), (2, "b"), (3, "b")]), _rows([(1, "b")], kind="-D"), _rows([(4, "b")])]
DELETED_UNKNOWN_THEN_NEW = [_rows([(1, "b"), (2, "b")]), _rows([(9, "b")], kind="-D"), _rows([(4, "b")])]


@pytest.mark.parametrize("batches", [pytest.param(DELETED_THEN_NEW, id="deleted-then-new"),
                                     pytest.param(DELETED_UNKNOWN_THEN_NEW, id="deleted-unknown-then-new")])
def test_key_index_bootstrapped_from_the_table_counts_live_keys_as_java(tmp_path: Any, java: JavaPaimon,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         batches: list[list[Row]]) -> None:
    """Every write bootstraps its key index from the table (as each of Java's batch writes
    does): deleted keys hold no place, and keys land as Java places them. (A process keeps the
    key index its writes committed for its next write, as a long-running Paimon job keeps its
    own: there a deleted key keeps its place, in changelake as in Paimon's job.)"""
    monkeypatch.setattr(key_places.COMMITTED, "peek", lambda key: None)
    _compare_placement(str(tmp_path), java, "deduplicate", batches, {})


def _compare_placement(warehouse: str, java: JavaPaimon, engine: str, batches: list[list[Row]],
                       extra: dict[str, str]) -> None:
    catalog = cl.Catalog(warehouse)
    options = {**TARGET, **ENGINES[engine], **extra}
    assigners = max((int(extra[k]) for k in THREE_ASSIGNERS if k in extra), default=1)
    ours = catalog.create_table("db.ours", NULLABLE_DT, primary_keys=["id"], partition_keys=["dt"],
                                options=options)
    java.create_table(warehouse, "db.theirs", JAVA_FIELDS, primary_keys=["id"], partition_keys=["dt"],
                      options=options)
    theirs = catalog.get_table("db.theirs")
    for step, rows in enumerate(batches):
        ours.write(_arrow(ours, rows))
        java.write_cross_partition(warehouse, "db.theirs", _java_rows(rows), assigners=assigners)
        theirs.refresh()
        placed = placement(ours, ours.latest_snapshot().id)  # type: ignore[union-attr]
        assert placed == placement(theirs, theirs.latest_snapshot().id), f"after batch {step}"  # type: ignore[union-attr]
        rows_read = _ours(ours, ours.latest_snapshot().id)  # type: ignore[union-attr]
        assert rows_read == _ours(theirs, theirs.latest_snapshot().id) == _sorted(java.read(warehouse, "db.ours"))  # type: ignore[union-attr]
    assert len({b for _, b in placed.values()}) >= assigners


# Key 1 updated in a, moved to b and back to a in one batch: it goes back into a's bucket 0
# (freed when it left), so its lookup changelog there is -U/+U, as Paimon's.
MOVED_BACK = [_rows([(1, "a"), (2, "a"), (3, "a")]), _rows([(1, "a"), (1, "b"), (1, "a")], 1)]


@pytest.mark.parametrize(("producer", "batches"), [
    pytest.param("input", ONE_WAY + DELETES, id="input"),
    pytest.param("lookup", ONE_WAY + DELETES, id="lookup"),
    pytest.param("lookup", MOVED_BACK, id="lookup-moved-back"),
])
def test_changelog_of_moved_keys_as_java_produces_it(tmp_path: Any, java: JavaPaimon, monkeypatch: pytest.MonkeyPatch,
                                                    producer: str, batches: list[list[Row]]) -> None:
    """The same batches into two tables with ``changelog-producer``, one written by changelake,
    one by Java: both hold the same changes (a moved key: -D in its old partition, +I in the
    new; lookup: -U/+U for an update in place), as changelake reads them and as Java's stream
    reads them. Each write bootstraps its key index from the table, as each of Java's does (a
    key index kept across writes, like a long-running Paimon job's, still places a deleted key,
    so a row of it in another partition sends a -D there: one more change of input's)."""
    monkeypatch.setattr(key_places.COMMITTED, "peek", lambda key: None)
    warehouse = str(tmp_path)
    catalog = cl.Catalog(warehouse)
    options = {**TARGET, "changelog-producer": producer}
    ours = catalog.create_table("db.ours", NULLABLE_DT, primary_keys=["id"], partition_keys=["dt"], options=options)
    java.create_table(warehouse, "db.theirs", JAVA_FIELDS, primary_keys=["id"], partition_keys=["dt"],
                      options=options)
    for rows in batches:
        ours.write(_arrow(ours, rows))
        java.write_cross_partition(warehouse, "db.theirs", _java_rows(rows))

    def changes(name: str) -> list[str]:
        table = catalog.get_table(name)
        rows = table.changes(0, table.latest_snapshot().id).to_arrow().to_pylist()  # type: ignore[union-attr]
        return sorted(repr((row.pop("rowkind"), row)) for row in rows)

    ours_changes = changes("db.ours")
    assert ours_changes == sorted(repr((kind, row)) for kind, row in java.stream(warehouse, "db.ours", 1))
    if batches is not MOVED_BACK:  # moved back into its bucket: -U/+U, as Paimon
        assert any("'-D'" in c for c in ours_changes)
    assert ours_changes == changes("db.theirs")
