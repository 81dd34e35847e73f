"""Apache Paimon's Java engine (0.9.0, over py4j: ``java_paimon.py``) and changelake on tables
beyond ``test_java_paimon_interop.py``'s: every common column type (both ways, in keys,
partitions and values), schema evolution by either side, both engines writing in turn to
tables without deletion vectors under each merge engine, tags made by either side, partitions
of several keys (values escaped in paths, blank ones in the default partition), ``bucket-key``
and ``sequence.field``.

changelake's values are normalized as ``java_paimon.py`` reads Java's: DATE as days since
the epoch, TIMESTAMP as microseconds since the epoch."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import re
import struct
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import EPOCH, JavaPaimon, fields_of
from py4j.protocol import Py4JJavaError

import changelake as cl
from changelake.table.read.live_files import live_entries

Row = dict[str, Any]
Change = tuple[str, Row]


# -- changelake's side -------------------------------------------------------------------------

def _norm(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return (value - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return (value - EPOCH.date()).days
    return value


def _sorted(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: repr(sorted(r.items(), key=lambda kv: str(kv[0]))))


def normalized(rows: Iterable[Row]) -> list[Row]:
    return _sorted({k: _norm(v) for k, v in row.items()} for row in rows)


def ours(table: cl.Table, **scan: Any) -> list[Row]:
    return normalized(table.scan(**scan).to_arrow().to_pylist())


def theirs(java: JavaPaimon, warehouse: str, name: str = "db.t", options: dict[str, str] | None = None) -> list[Row]:
    return _sorted(java.read(warehouse, name, options=options))


def _write_ours(table: cl.Table, changes: list[Change], schema: pa.Schema | None = None) -> None:
    data = pa.Table.from_pylist([row for _, row in changes], schema=schema or table.schema)
    table.write(data.append_column("rowkind", pa.array([kind for kind, _ in changes])))


# -- every column type -------------------------------------------------------------------------

TYPED = pa.schema([
    pa.field("k", pa.int64(), nullable=False), pa.field("ks", pa.string(), nullable=False),
    pa.field("kd", pa.decimal128(10, 2), nullable=False), pa.field("kt", pa.timestamp("us"), nullable=False),
    ("b", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("dec", pa.decimal128(10, 2)), ("s", pa.string()),
    ("bin", pa.binary()), ("day", pa.date32()), ("ts3", pa.timestamp("ms")), ("ts6", pa.timestamp("us")),
])
TYPED_KEYS = ["k", "ks", "kd", "kt"]


class TypedModel:
    """Rows of TYPED by key; commits of new, updated and deleted keys (each key once)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rows: dict[tuple[Any, ...], Row] = {}
        self.next = 0

    def _key(self, n: int) -> Row:
        # keys of every width: BIGINTs beyond 32 bits and negative, strings past BinaryRow's
        # 7 inline bytes, timestamps before the epoch
        return {"k": (n * 7919 - 500) * (2 ** 33 if n % 3 == 0 else 1), "ks": "key-" * (n % 4) + str(n),
                "kd": decimal.Decimal(n * 37 - 999) / 100,
                "kt": dt.datetime(1969, 12, 31, 23, 0) + dt.timedelta(minutes=n * 7, microseconds=n * 13)}

    def _values(self) -> Row:
        rng = self.rng
        if rng.random() < 0.15:
            return dict.fromkeys(["b", "i8", "i16", "i32", "i64", "f32", "f64", "dec", "s", "bin", "day", "ts3", "ts6"])
        return {
            "b": rng.random() < 0.5, "i8": rng.randint(-128, 127), "i16": rng.randint(-32768, 32767),
            "i32": rng.randint(-2 ** 31, 2 ** 31 - 1), "i64": rng.randint(-2 ** 63, 2 ** 63 - 1),
            "f32": rng.choice([0.5, -1.25, 2.0 ** 40, 0.0, float("inf")]), "f64": rng.uniform(-1e6, 1e6),
            "dec": decimal.Decimal(rng.randint(-99999999_99, 99999999_99)) / 100,
            "s": rng.choice(["", "é", "a" * 40, "x\u4e16"]) if rng.random() < 0.9 else None,
            "bin": bytes(rng.randrange(256) for _ in range(rng.randrange(12))),
            "day": dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-40000, 40000)),
            "ts3": dt.datetime(2000, 1, 1) + dt.timedelta(milliseconds=rng.randint(-10 ** 12, 10 ** 12)),
            "ts6": dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randint(-10 ** 15, 10 ** 15)),
        }

    def commit(self, new: int, updates: int, deletes: int) -> list[Change]:
        changed = self.rng.sample(sorted(self.rows), min(len(self.rows), updates + deletes))
        changes: list[Change] = [("+I", {**self._key(self.next + i), **self._values()}) for i in range(new)]
        self.next += new
        changes += [("+U", {**self.rows[key], **self._values()}) for key in changed[:updates]]
        changes += [("-D", self.rows[key]) for key in changed[updates:]]
        for kind, row in changes:
            key = tuple(row[k] for k in TYPED_KEYS)
            if kind == "-D":
                del self.rows[key]
            else:
                self.rows[key] = row
        return changes


def test_both_engines_write_and_read_every_column_type(tmp_path: Any, java: JavaPaimon) -> None:
    """A table of every common type, keyed by BIGINT, STRING, DECIMAL and TIMESTAMP(6) (so
    both sides must bucket those keys alike), written by changelake (upserts, deletes,
    compaction up the levels), then by Java Paimon, then by changelake again: both read every
    snapshot alike and as the model has it."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", TYPED, primary_keys=TYPED_KEYS,
        options={"bucket": "3", "num-sorted-run.compaction-trigger": "2", "file.format": "parquet"})
    model = TypedModel(seed=7)
    for step in range(3):
        _write_ours(table, model.commit(24 if step == 0 else 6, 8, 3))
    table.compact(full=True)
    files = table.system("files").to_pylist()
    assert any(f["level"] > 0 for f in files)
    expected = normalized(model.rows.values())
    assert ours(table) == expected
    for step in range(2):
        java.write(warehouse, "db.t", model.commit(5, 6, 3), full_compaction=step > 0)
        expected = normalized(model.rows.values())
        assert theirs(java, warehouse) == expected, f"Java's read after its commit {step}"
        assert ours(table) == expected, f"changelake's read after Java's commit {step}"
    _write_ours(table, model.commit(4, 6, 3))
    table.compact(full=True)
    assert ours(table) == normalized(model.rows.values())
    for snapshot in table.snapshots():
        assert theirs(java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}) == \
            ours(table, snapshot_id=snapshot.id), f"snapshot {snapshot.id} ({snapshot.commit_kind})"


# -- schema evolution --------------------------------------------------------------------------

def _java_snapshot_by_latest_ids(java: JavaPaimon, warehouse: str, snapshot_id: int) -> list[Row]:
    """Java Paimon's read of a snapshot (in that snapshot's schema, as Paimon time-travels),
    its values put under the latest schema's names by field id (a column the snapshot's
    schema lacks is null)."""
    latest = [(field[0], field[3]) for field in fields_of(java.table(warehouse, "db.t"))]
    rows = java.read(warehouse, "db.t", snapshot_id, by_id=True)
    return _sorted({name: row.get(field_id) for name, field_id in latest} for row in rows)


SIMPLE = pa.schema([pa.field("id", pa.int32(), nullable=False), ("name", pa.string()), ("v", pa.float64())])
EVOLVING = pa.schema([pa.field("id", pa.int32(), nullable=False), ("a", pa.int8()), ("f", pa.float32()),
                      ("d", pa.decimal128(10, 2)), ("b", pa.string()), ("c", pa.float64()),
                      ("ts", pa.timestamp("ms"))])


def test_java_paimon_reads_every_snapshot_of_a_table_changelake_evolves(tmp_path: Any, java: JavaPaimon) -> None:
    """changelake adds (in the middle), renames, widens (TINYINT to INT, FLOAT to DOUBLE,
    DECIMAL(10,2) to DECIMAL(12,2)), drops a column and adds one of the dropped name back
    (a new field id) between commits, compacts files of every schema into one; Java Paimon
    reads every snapshot as changelake does (matched by field id) and writes on top."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", EVOLVING, primary_keys=["id"],
                                               options={"bucket": "2"})
    model: dict[int, Row] = {}

    def commit(changes: list[Change]) -> None:
        _write_ours(table, changes)
        for kind, row in changes:
            if kind == "-D":
                model.pop(row["id"])
            else:
                model[row["id"]] = {name: row.get(name) for name in table.schema.names}
        for row in model.values():  # columns of the newest schema, null where never written
            for name in table.schema.names:
                row.setdefault(name, None)

    commit([("+I", {"id": i, "a": i - 10, "f": [0.1, 1.5, -2.0][i % 3], "d": decimal.Decimal(i * 111) / 100,
                    "b": f"b{i}", "c": i / 3, "ts": dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i * 1001)})
            for i in range(20)])
    with table.update_schema() as u:
        u.add_column("n", pa.string(), after="id")
        u.rename_column("b", "bb")
        u.update_column("a", pa.int32())
        u.update_column("f", pa.float64())
        u.update_column("d", pa.decimal128(12, 2))
    for row in model.values():
        row["bb"] = row.pop("b")
        row["f"] = struct.unpack("f", struct.pack("f", row["f"]))[0]  # the FLOAT it was stored as
    commit([("+U", {**model[i], "n": f"n{i}", "a": 2 ** 31 - 1 - i, "f": 0.1, "d": decimal.Decimal("9999999999.99")})
            for i in range(0, 20, 3)] + [("-D", model[i]) for i in (1, 2)])
    with table.update_schema() as u:
        u.drop_column("c")
    with table.update_schema() as u:
        u.add_column("c", pa.string())
    for row in model.values():
        row["c"] = None
    commit([("+U", {**model[i], "c": f"c{i}", "bb": None}) for i in range(4, 20, 4)] +
           [("+I", {"id": 100, "n": "new", "c": "c100"}), ("-D", model[3])])
    table.compact(full=True)
    java.write(warehouse, "db.t", [("+U", {**model[i], "n": "java", "a": -1}) for i in (5, 6)] +
               [("-D", model[7])])
    for i in (5, 6):
        model[i] = {**model[i], "n": "java", "a": -1}
    model.pop(7)
    expected = normalized(model.values())
    assert theirs(java, warehouse) == expected
    table.refresh()
    assert ours(table) == expected
    for snapshot in table.snapshots():
        travel = {"snapshot_id": snapshot.id, "time_travel_schema": "latest"}
        assert _java_snapshot_by_latest_ids(java, warehouse, snapshot.id) == ours(table, **travel), \
            f"snapshot {snapshot.id} (schema {snapshot.schema_id})"
        assert theirs(java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}) == \
            ours(table, snapshot_id=snapshot.id), f"snapshot {snapshot.id} in its schema {snapshot.schema_id}"


def test_changelake_reads_every_snapshot_of_a_table_java_paimon_evolves(tmp_path: Any, java: JavaPaimon) -> None:
    """Java Paimon (``catalog.alterTable``) adds columns of other types, renames, widens INT
    to BIGINT, moves a column first and drops one between its commits; changelake reads every
    snapshot as Java does, then writes to the evolved table, which Java reads back."""
    warehouse = str(tmp_path)
    paimon = java.jvm.org.apache.paimon
    types, change = paimon.types.DataTypes, paimon.schema.SchemaChange
    java.create_table(warehouse, "db.t", [("id", "INT"), ("a", "INT"), ("b", "STRING"), ("c", "DOUBLE")],
                      primary_keys=["id"], options={"bucket": "2"})
    identifier = paimon.catalog.Identifier.create("db", "t")
    catalog = java.catalog(warehouse)
    java.write(warehouse, "db.t", [("+I", {"id": i, "a": i, "b": f"b{i}", "c": i / 3}) for i in range(12)])
    catalog.alterTable(identifier, [change.addColumn("n", types.STRING()), change.renameColumn("b", "bb"),
                                    change.updateColumnType("a", types.BIGINT()),
                                    change.addColumn("dec", types.DECIMAL(20, 4)),
                                    change.addColumn("ts", types.TIMESTAMP(6)), change.addColumn("day", types.DATE())],
                       False)
    java.write(warehouse, "db.t", [
        ("+U", {"id": i, "a": i * 10 ** 11, "bb": f"bb{i}", "c": -i / 7, "n": f"n{i}",
                "dec": decimal.Decimal("-1234567890123456.789") + i, "ts": dt.datetime(1950, 6, 1, 0, 0, 0, 999 * i),
                "day": dt.date(2100, 1, i + 1)}) for i in range(5, 10)] + [("-D", {"id": 0})])
    catalog.alterTable(identifier, [change.dropColumn("c"), change.updateColumnPosition(change.Move.first("n"))],
                       False)
    java.write(warehouse, "db.t", [("+U", {"id": i, "n": "third", "a": -i}) for i in (1, 8)],
               full_compaction=True)
    table = cl.open_table(f"{warehouse}/db.db/t")
    assert table.schema.names == ["n", "id", "a", "bb", "dec", "ts", "day"]
    for snapshot in table.snapshots():
        travel = {"snapshot_id": snapshot.id, "time_travel_schema": "latest"}
        assert ours(table, **travel) == _java_snapshot_by_latest_ids(java, warehouse, snapshot.id), \
            f"snapshot {snapshot.id} (schema {snapshot.schema_id})"
        assert ours(table, snapshot_id=snapshot.id) == \
            theirs(java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}), \
            f"snapshot {snapshot.id} in its schema {snapshot.schema_id}"
    before = {row["id"]: row for row in table.scan().to_arrow().to_pylist()}
    _write_ours(table, [("+U", {**before[5], "dec": decimal.Decimal("0.0001"), "bb": "ours"}), ("-D", before[6]),
                        ("+I", {"id": 50, "n": "ours", "ts": dt.datetime(2024, 2, 29, 1, 2, 3, 456789)})])
    assert theirs(java, warehouse) == ours(table)
    assert {row["id"] for row in ours(table)} == set(before) - {6} | {50}


def test_time_travel_reads_the_snapshots_schema_as_java_paimon_does(tmp_path: Any, java: JavaPaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SIMPLE, primary_keys=["id"])
    _write_ours(table, [("+I", {"id": 1, "name": "a", "v": 1.0})])
    with table.update_schema() as u:
        u.rename_column("name", "label")
        u.drop_column("v")
    assert ours(table, snapshot_id=1) == theirs(java, warehouse, options={"scan.snapshot-id": "1"})


def test_java_paimon_sees_no_descriptions_or_comment_on_changelake_tables(tmp_path: Any, java: JavaPaimon) -> None:
    """Unset descriptions and comments are left out of schema files, as Java Paimon writes
    them: it would read a JSON null as the text "null"."""
    warehouse = str(tmp_path)
    cl.Catalog(warehouse).create_table("db.t", EVOLVING, primary_keys=["id"])
    table = java.table(warehouse, "db.t")
    descriptions = [field.description() for field in table.rowType().getFields()]
    assert (descriptions, table.comment().orElse(None)) == ([None] * len(EVOLVING), None)


@pytest.mark.parametrize("cast", ["double-to-string", "double-to-decimal", "double-to-decimal-overflow"])
def test_changelake_casts_columns_java_paimon_changed_type_as_java_does(
        tmp_path: Any, java: JavaPaimon, cast: str) -> None:
    warehouse = str(tmp_path)
    paimon = java.jvm.org.apache.paimon
    types, change = paimon.types.DataTypes, paimon.schema.SchemaChange
    java.create_table(warehouse, "db.t", [("id", "INT"), ("v", "DOUBLE")], primary_keys=["id"],
                      options={"bucket": "1"})
    values = {"double-to-string": [1.0, 1e20, 0.1], "double-to-decimal": [0.125, -2.675, 2.5],
              "double-to-decimal-overflow": [1e20, 1.0]}[cast]
    java.write(warehouse, "db.t", [("+I", {"id": i, "v": v}) for i, v in enumerate(values)])
    new_type = types.STRING() if cast == "double-to-string" else types.DECIMAL(10, 2)
    java.catalog(warehouse).alterTable(paimon.catalog.Identifier.create("db", "t"),
                                        [change.updateColumnType("v", new_type)], False)
    assert ours(cl.open_table(f"{warehouse}/db.db/t")) == theirs(java, warehouse)


# -- both engines writing in turn, without deletion vectors ------------------------------------

ENGINES = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
}


def _merge(engine: str, old: Row | None, new: Row) -> Row:
    if old is None or engine == "deduplicate":
        return new
    if engine == "partial-update":
        return {k: old[k] if v is None else v for k, v in new.items()}
    # aggregation: v sums (a null adds nothing), name keeps the last non-null value
    total = old["v"] if new["v"] is None else new["v"] if old["v"] is None else old["v"] + new["v"]
    return {"id": new["id"], "name": old["name"] if new["name"] is None else new["name"], "v": total}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_engines_write_in_turn_without_deletion_vectors(tmp_path: Any, java: JavaPaimon, engine: str) -> None:
    """changelake and Java Paimon commit in turn (upserts with some null values, deletes
    under deduplicate) to a table without deletion vectors, each compacting over the other's
    files; after every commit both read exactly the merge engine's result."""
    warehouse = str(tmp_path)
    cl.Catalog(warehouse).create_table("db.t", SIMPLE, primary_keys=["id"], options={
        "bucket": "2", "num-sorted-run.compaction-trigger": "2", **ENGINES[engine]})
    table = cl.open_table(f"{warehouse}/db.db/t")
    rng = random.Random(engine)
    model: dict[int, Row] = {}
    for step in range(4):
        changes: list[Change] = []
        for key in rng.sample(range(30), 12):
            row = {"id": key, "name": None if rng.random() < 0.3 else f"s{step}-{key}",
                   "v": None if rng.random() < 0.2 else float(rng.randrange(-50, 50))}
            if engine == "deduplicate" and key in model and rng.random() < 0.3:
                changes.append(("-D", model.pop(key)))
            else:
                changes.append(("+U" if key in model else "+I", row))
                model[key] = _merge(engine, model.get(key), row)
        if step % 2:
            java.write(warehouse, "db.t", changes, full_compaction=step == 3)
        else:
            _write_ours(table, changes)
        expected = _sorted(model.values())
        assert ours(table) == expected, f"changelake's read after step {step}"
        assert theirs(java, warehouse) == expected, f"Java's read after step {step}"
    table.compact(full=True)
    assert theirs(java, warehouse) == ours(table) == _sorted(model.values())


@pytest.mark.parametrize("options", [{}, {"lookup-compact": "gentle"}], ids=["radical", "gentle"])
def test_first_row_snapshots_read_as_java_paimon_reads_them(tmp_path: Any, java: JavaPaimon,
                                                            options: dict[str, str]) -> None:
    """Java Paimon's batch scans skip level 0 of first-row tables (``DataTableBatchScan``):
    changelake reads every snapshot as Java does, APPEND snapshots whose rows wait at level 0
    (and, with ``lookup-compact=gentle``, later ones) included; both engines write in turn."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SIMPLE, primary_keys=["id"], options={
        "bucket": "2", "merge-engine": "first-row", **options})
    rng = random.Random(5)
    for step in range(5):
        changes: list[Change] = [("+I", {"id": key, "name": f"s{step}", "v": float(step)})
                                 for key in rng.sample(range(20), 8)]
        if step == 3:
            java.write(warehouse, "db.t", changes)
        else:
            _write_ours(table, changes)
    levels = {s.id: {e.file.level for e in live_entries(table.context, s)} for s in table.snapshots()}
    assert any(0 in found for found in levels.values())
    for snapshot_id in levels:
        assert ours(table, snapshot_id=snapshot_id) == _sorted(java.read(warehouse, "db.t", snapshot_id)), \
            f"snapshot {snapshot_id} (levels {sorted(levels[snapshot_id])})"


def test_writes_after_java_paimon_rescales_buckets(tmp_path: Any, java: JavaPaimon) -> None:
    """Java Paimon writes partition a with 2 buckets, then ``ALTER TABLE ... SET ('bucket' =
    '4')``: a changelake write into a is refused as Java refuses its own (the same partition and
    numbers), leaving the table as it was; partition b is written with 4 buckets, which Java
    reads, and compacting the table keeps a at 2, as Java then still writes it."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("dt", "STRING"), ("id", "BIGINT"), ("v", "STRING")],
                      primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"})
    java.write(warehouse, "db.t", [("+I", {"dt": "a", "id": i, "v": "java"}) for i in range(20)])
    paimon = java.jvm.org.apache.paimon
    java.catalog(warehouse).alterTable(paimon.catalog.Identifier.create("db", "t"),
                                        [paimon.schema.SchemaChange.setOption("bucket", "4")], False)
    table = cl.open_table(f"{warehouse}/db.db/t")
    assert table.context.options.bucket == 4
    latest = table.latest_snapshot()
    refusal = "with a new bucket num 4, but the previous bucket num is 2"
    with pytest.raises(Py4JJavaError, match=re.escape(f"Try to write partition {{dt=a}} {refusal}")):
        java.write(warehouse, "db.t", [("+I", {"dt": "a", "id": 99, "v": "java"})])
    with pytest.raises(cl.errors.BucketRescaleError, match=re.escape(f"partition {{dt=a}} {refusal}")):
        _write_ours(table, [("+I", {"dt": "a", "id": i, "v": "ours"}) for i in range(10, 30)])
    assert table.latest_snapshot() == latest
    _write_ours(table, [("+I", {"dt": "b", "id": i, "v": "ours"}) for i in range(40)])
    expected = _sorted([{"dt": "a", "id": i, "v": "java"} for i in range(20)] +
                       [{"dt": "b", "id": i, "v": "ours"} for i in range(40)])
    assert ours(table) == theirs(java, warehouse) == expected
    table.compact(full=True)
    totals = {(table.context.partition_values(e.partition)[0], e.total_buckets)
              for e in live_entries(table.context, table.latest_snapshot())}
    assert totals == {("a", 2), ("b", 4)}
    java.write(warehouse, "db.t", [("+U", {"dt": "b", "id": 0, "v": "java"})])
    assert theirs(java, warehouse) == ours(table) == _sorted(
        [r if (r["dt"], r["id"]) != ("b", 0) else {**r, "v": "java"} for r in expected])


def test_java_paimon_reads_and_writes_after_changelake_rescales(tmp_path: Any, java: JavaPaimon) -> None:
    """changelake rescales partitions Java Paimon wrote (a to 4 buckets, the table's ``bucket``
    with it; then b): Java reads the same rows at every snapshot, the OVERWRITE ones included,
    refuses to write b while b keeps 2 buckets (as changelake does), and writes both once
    rescaled, each engine reading the other's rows."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("dt", "STRING"), ("id", "BIGINT"), ("v", "STRING")],
                      primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"})
    java.write(warehouse, "db.t", [("+I", {"dt": p, "id": i, "v": "java"}) for p in "ab" for i in range(30)])
    java.write(warehouse, "db.t", [("+U", {"dt": "a", "id": i, "v": "java2"}) for i in range(10)] +
               [("-D", {"dt": "b", "id": i}) for i in range(5)])
    table = cl.open_table(f"{warehouse}/db.db/t")
    _write_ours(table, [("+I", {"dt": "a", "id": i, "v": "ours"}) for i in range(25, 40)])
    landed = table.rescale(bucket=4, partitions=[{"dt": "a"}])
    assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
    for snapshot in table.snapshots():
        assert theirs(java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}) == \
            ours(table, snapshot_id=snapshot.id), snapshot.id
    refusal = "Try to write partition {dt=b} with a new bucket num 4, but the previous bucket num is 2"
    with pytest.raises(Py4JJavaError, match=re.escape(refusal)):
        java.write(warehouse, "db.t", [("+I", {"dt": "b", "id": 99, "v": "java"})])
    java.write(warehouse, "db.t", [("+U", {"dt": "a", "id": i, "v": "java3"}) for i in range(35, 45)])
    table.rescale(partitions=[{"dt": "b"}])
    java.write(warehouse, "db.t", [("+U", {"dt": "b", "id": 7, "v": "java3"})])
    _write_ours(table, [("+U", {"dt": "b", "id": 8, "v": "ours3"}), ("-D", {"dt": "a", "id": 0, "v": None})])
    assert theirs(java, warehouse) == ours(table)
    got = {(r["dt"], r["id"]): r["v"] for r in ours(table)}
    assert (got.get(("a", 0)), got[("a", 40)], got[("b", 7)], got[("b", 8)]) == \
        (None, "java3", "java3", "ours3")
    assert len(got) == 45 + 25 - 1
    totals = {(table.context.partition_values(e.partition)[0], e.total_buckets)
              for e in live_entries(table.context, table.latest_snapshot())}
    assert totals == {("a", 4), ("b", 4)}


# -- tags --------------------------------------------------------------------------------------

def test_tags_made_by_either_engine(tmp_path: Any, java: JavaPaimon) -> None:
    """Java Paimon reads changelake's tags (``scan.tag-name``), also once changelake expired
    the tagged snapshot; changelake reads the tags Java Paimon creates (``createTag``)."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SIMPLE, primary_keys=["id"], options={"bucket": "2"})
    seen: dict[int, list[Row]] = {}
    for step in range(3):
        _write_ours(table, [("+I", {"id": i, "name": f"s{step}", "v": float(step)}) for i in range(step, step + 6)])
        seen[table.latest_snapshot().id] = ours(table)
    table.create_tag("ours-1", snapshot_id=1)
    table.compact(full=True)
    java.write(warehouse, "db.t", [("-D", {"id": 3}), ("+U", {"id": 0, "name": "java", "v": 9.0})])
    java.table(warehouse, "db.t").createTag("java-2", 2)
    java.table(warehouse, "db.t").createTag("java-latest", table.latest_snapshot().id)
    latest = table.latest_snapshot().id
    seen[latest] = theirs(java, warehouse)
    table.expire_snapshots(retain_min=1, retain_max=1)
    assert [s.id for s in table.snapshots()] == [latest]
    assert theirs(java, warehouse, options={"scan.tag-name": "ours-1"}) == seen[1]
    assert ours(table, tag="java-2") == seen[2]
    assert ours(table, tag="java-latest") == seen[latest]
    assert sorted(table.tags()) == ["java-2", "java-latest", "ours-1"]
    assert theirs(java, warehouse, options={"scan.tag-name": "java-2"}) == seen[2]


# -- partitions, bucket-key, sequence.field ----------------------------------------------------

PARTED = pa.schema([pa.field("p1", pa.string(), nullable=False), pa.field("p2", pa.int32(), nullable=False),
                    pa.field("id", pa.int64(), nullable=False), ("seq", pa.int64()), ("v", pa.string())])


def test_partitions_bucket_key_and_sequence_field_in_turn(tmp_path: Any, java: JavaPaimon) -> None:
    """Two partition keys whose values need escaping in paths or fall back to the default
    partition name ('a/b', 'x=y%z', '', ' ', non-ASCII), ``bucket-key`` id, and
    ``sequence.field`` seq (an upsert or delete with a lower seq than the stored row's loses):
    both engines write in turn and read what the model has."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", PARTED, primary_keys=["p1", "p2", "id"], partition_keys=["p1", "p2"],
        options={"bucket": "3", "bucket-key": "id", "sequence.field": "seq"})
    rng = random.Random(23)
    model: dict[tuple[str, int, int], Change] = {}
    keys = [(p1, p2, i) for p1 in ["a/b", "x=y%z", "", " ", "\u65e5\u672c", "plain"] for p2 in (-1, 7)
            for i in (1, 2 ** 40, -5)]
    for step in range(4):
        changes: list[Change] = []
        for p1, p2, i in rng.sample(keys, 16):
            row = {"p1": p1, "p2": p2, "id": i, "seq": rng.randrange(100), "v": f"s{step}"}
            kind = "-D" if rng.random() < 0.2 else "+U"
            changes.append((kind, row))
            old = model.get((p1, p2, i))
            if old is None or row["seq"] >= old[1]["seq"]:  # an equal seq: the later write wins
                # a delete stays (with its seq) until a full compaction drops it
                model[(p1, p2, i)] = (kind, row)
        if step % 2:
            java.write(warehouse, "db.t", changes)
        else:
            _write_ours(table, changes)
        expected = _sorted(row for kind, row in model.values() if kind != "-D")
        assert ours(table) == expected, f"changelake's read after step {step}"
        assert theirs(java, warehouse) == expected, f"Java's read after step {step}"
    assert any(kind == "-D" for kind, _ in model.values())
    table.compact(full=True)
    assert theirs(java, warehouse) == ours(table) == expected
    partitions = {(row["p1"], row["p2"]) for row in java.read(warehouse, "db.t")}
    assert ("", 7) in partitions or ("", -1) in partitions


def test_java_paimon_reads_changelakes_table_operations(tmp_path: Any, java: JavaPaimon) -> None:
    """A table Java Paimon wrote, then changelake's INSERT OVERWRITE (dynamic and static),
    DELETE, UPDATE, DROP PARTITION and TRUNCATE: Java reads every snapshot as changelake does,
    and writes on after them."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", [("dt", "STRING"), ("id", "BIGINT"), ("v", "STRING")],
                      primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"})
    java.write(warehouse, "db.t", [("+I", {"dt": p, "id": i, "v": "java"}) for p in "abc" for i in range(10)])
    table = cl.open_table(f"{warehouse}/db.db/t")
    schema = table.schema
    table.overwrite(pa.table({"dt": ["a", "d"], "id": [1, 2], "v": ["over", "over"]}, schema=schema))
    table.overwrite(pa.table({"dt": ["b"], "id": [3], "v": ["static"]}, schema=schema), partitions={"dt": "b"})
    table.delete("dt = 'c' AND id < 5")
    table.update("dt = 'c'", set={"v": "updated"})
    table.drop_partitions([{"dt": "d"}])
    for snapshot in table.snapshots():
        assert theirs(java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}) == \
            ours(table, snapshot_id=snapshot.id), snapshot.id
    java.write(warehouse, "db.t", [("+I", {"dt": "a", "id": 9, "v": "java2"})])
    assert theirs(java, warehouse) == ours(table) and len(ours(table)) == 1 + 1 + 5 + 1
    table.truncate()
    assert theirs(java, warehouse) == ours(table) == []


def test_changelake_reads_java_paimons_table_operations(tmp_path: Any, java: JavaPaimon) -> None:
    """Java Paimon's INSERT OVERWRITE (dynamic, static, the whole table), DELETE (-D rows) and
    DROP PARTITION on a table changelake wrote: changelake reads every snapshot as Java does,
    streams skip the OVERWRITE snapshots, and it writes on after them."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                           pa.field("v", pa.string())]),
        primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"})
    table.write(pa.table({"dt": [p for p in "abc" for _ in range(10)], "id": [i for _ in "abc" for i in range(10)],
                          "v": ["ours"] * 30}, schema=table.schema))
    replacing = [("+I", {"dt": "a", "id": 1, "v": "over"}), ("+I", {"dt": "d", "id": 2, "v": "over"})]
    java.write(warehouse, "db.t", replacing, overwrite={})  # dynamic-partition-overwrite (the default): a and d
    java.write(warehouse, "db.t", [("+I", {"dt": "b", "id": 3, "v": "static"})], overwrite={"dt": "b"})
    java.write(warehouse, "db.t", [("-D", {"dt": "c", "id": i, "v": None}) for i in range(5)])
    java.drop_partition(warehouse, "db.t", {"dt": "d"})
    table.refresh()
    kinds = [s.commit_kind for s in table.snapshots()]
    assert kinds.count(cl.CommitKind.OVERWRITE) == 3
    for snapshot in table.snapshots():
        assert ours(table, snapshot_id=snapshot.id) == theirs(
            java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}), snapshot.id
    assert ours(table) == _sorted([{"dt": "a", "id": 1, "v": "over"}, {"dt": "b", "id": 3, "v": "static"},
                                   *[{"dt": "c", "id": i, "v": "ours"} for i in range(5, 10)]])
    latest = table.latest_snapshot()
    assert latest is not None
    deletes = table.changes(1, latest.id).to_arrow()  # the OVERWRITEs are skipped, the -D rows read
    assert deletes.column("rowkind").to_pylist() == ["-D"] * 5
    table.write(pa.table({"dt": ["a"], "id": [1], "v": ["again"]}, schema=table.schema))
    java.write(warehouse, "db.t", [("+I", {"dt": "z", "id": 0, "v": "all"})], overwrite={})
    table.set_options({"dynamic-partition-overwrite": "false"})
    java.write(warehouse, "db.t", [("+I", {"dt": "y", "id": 0, "v": "whole"})], overwrite={})
    table.refresh()
    assert ours(table) == theirs(java, warehouse) == [{"dt": "y", "id": 0, "v": "whole"}]


def test_changelake_reads_java_paimons_partition_expiration(tmp_path: Any, java: JavaPaimon) -> None:
    """Java Paimon's writer expires partitions (``partition.expiration-time``, values-time)
    when it commits: changelake reads the snapshot its expiry landed as Java does."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                           pa.field("v", pa.string())]),
        primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "1"})
    table.write(pa.table({"dt": ["20000101", "20000102", "29990101"], "id": [1, 2, 3], "v": ["old", "old", "new"]},
                         schema=table.schema))
    table.set_options({"partition.expiration-time": "7 d", "partition.expiration-check-interval": "0 s",
                       "partition.timestamp-formatter": "yyyyMMdd"})
    java.write(warehouse, "db.t", [("+I", {"dt": "29990101", "id": 4, "v": "java"})])
    table.refresh()
    assert table.snapshots()[-1].commit_kind is cl.CommitKind.OVERWRITE  # Java's expiry, after its APPEND
    assert ours(table) == theirs(java, warehouse) == _sorted([{"dt": "29990101", "id": 3, "v": "new"},
                                                              {"dt": "29990101", "id": 4, "v": "java"}])
    for snapshot in table.snapshots():
        assert ours(table, snapshot_id=snapshot.id) == theirs(
            java, warehouse, options={"scan.snapshot-id": str(snapshot.id)}), snapshot.id
