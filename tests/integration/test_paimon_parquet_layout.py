"""TIMESTAMP(7..9), TIMESTAMP_LTZ(7..9) and BINARY(n) columns stored in Parquet as Apache
Paimon's writers store them (INT96; BYTE_ARRAY), beside TIMESTAMP(3) and TIMESTAMP(6) as INT64
millis and micros in the same files, in keys, values, partitions and changelog files: Java
Paimon 0.9 (``java_paimon.py``) reads what changelake writes to the nanosecond, writes to the
table and compacts it fully, and changelake reads that back; pypaimon 2.1 and pypaimon-rust
0.4 read it too.

Java 0.9 writes a timestamp before the epoch with a negative nanosecond of the day (its
``timestampToInt96`` truncates towards zero), which its own reader then refuses when the
value has a nanosecond of the millisecond (``Timestamp`` wants it in 0..999,999); the values
here before the epoch are whole milliseconds, so Java reads back what it compacted.
changelake reads such values either way (pyarrow decodes INT96 linearly)."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from java_paimon import EPOCH, JavaPaimon

import changelake as cl
from pypaimon_oracle import Pypaimon

Row = dict[str, Any]
Change = tuple[str, Row]

NANOS = pa.timestamp("ns")
SCHEMA = pa.schema([
    pa.field("p", NANOS, nullable=False), pa.field("k", pa.int64(), nullable=False),
    pa.field("kt", NANOS, nullable=False), pa.field("kb", pa.binary(3), nullable=False),
    ("ts3", pa.timestamp("ms")), ("ts6", pa.timestamp("us")), ("ts9", NANOS),
    ("ltz9", pa.timestamp("ns", tz="UTC")), ("b5", pa.binary(5)), ("v", pa.string()),
])
KEYS = ["p", "k", "kt", "kb"]
# one partition after the epoch with nanoseconds, one before it (whole milliseconds)
PARTITIONS = (1_700_000_000_123_456_789, -86_400_001_000_000)
# the physical type (and the unit of an INT64 timestamp) of each column, as Paimon writes it
PAIMON_LAYOUT = {
    "p": ("INT96", None), "k": ("INT64", None), "kt": ("INT96", None), "kb": ("BYTE_ARRAY", None),
    "ts3": ("INT64", "milliseconds"), "ts6": ("INT64", "microseconds"), "ts9": ("INT96", None),
    "ltz9": ("INT96", None), "b5": ("BYTE_ARRAY", None), "v": ("BYTE_ARRAY", None),
    "_KEY_k": ("INT64", None), "_KEY_kt": ("INT96", None), "_KEY_kb": ("BYTE_ARRAY", None),
    "_SEQUENCE_NUMBER": ("INT64", None), "_VALUE_KIND": ("INT32", None),
}


class Model:
    """Rows of SCHEMA by key, and commits of new, updated and deleted keys (each key once)."""

    def __init__(self, seed: int, partitions: tuple[int, ...] = PARTITIONS) -> None:
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.rows: dict[tuple[Any, ...], Row] = {}
        self.next = 0

    def _nanos(self) -> int:
        if self.rng.random() < 0.3:  # before the epoch: whole milliseconds (see the docstring)
            return -self.rng.randrange(1, 10 ** 12) * 1_000_000
        return 1_600_000_000_000_000_000 + self.rng.randrange(10 ** 17)

    def _values(self) -> Row:
        rng = self.rng
        if rng.random() < 0.15:
            return dict.fromkeys(["ts3", "ts6", "ts9", "ltz9", "b5", "v"])
        return {"ts3": dt.datetime(2000, 1, 1) + dt.timedelta(milliseconds=rng.randint(-10 ** 12, 10 ** 12)),
                "ts6": dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rng.randint(-10 ** 15, 10 ** 15)),
                "ts9": self._nanos(), "ltz9": self._nanos(), "b5": rng.randbytes(5), "v": f"v{rng.randrange(100)}"}

    def commit(self, new: int, updates: int, deletes: int) -> list[Change]:
        changed = self.rng.sample(sorted(self.rows), min(len(self.rows), updates + deletes))
        changes: list[Change] = [
            ("+I", {"p": self.partitions[n % len(self.partitions)], "k": n, "kt": self._nanos(),
                    "kb": bytes([n % 256, 0, 255 - n % 256]), **self._values()})
            for n in range(self.next, self.next + new)]
        self.next += new
        changes += [("+U", {**self.rows[key], **self._values()}) for key in changed[:updates]]
        changes += [("-D", self.rows[key]) for key in changed[updates:]]
        for kind, row in changes:
            key = tuple(row[k] for k in KEYS)
            if kind == "-D":
                del self.rows[key]
            else:
                self.rows[key] = row
        return changes


def _norm(row: Row) -> Row:
    """A row as ``java_paimon.py`` reads it: TIMESTAMP(3) and (6) as microseconds."""
    return {k: (v - EPOCH) // dt.timedelta(microseconds=1) if isinstance(v, dt.datetime) else v
            for k, v in row.items()}


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted((_norm(r) for r in rows), key=lambda r: (r["p"], r["k"]))


def _exact(data: pa.Table) -> list[Row]:
    """Rows of a changelake or pypaimon read, nanosecond timestamps as ints (to the nanosecond)."""
    return data.cast(pa.schema([f.with_type(pa.int64()) if f.type in (NANOS, SCHEMA.field("ltz9").type)
                                else f for f in data.schema])).to_pylist()


def _write_ours(table: cl.Table, changes: list[Change]) -> None:
    data = pa.Table.from_pylist([row for _, row in changes], schema=SCHEMA)
    table.write(data.append_column("rowkind", pa.array([kind for kind, _ in changes])))


def _layout(path: Path) -> dict[str, tuple[str, str | None]]:
    """The physical type (and an INT64 timestamp's unit) of each top-level column of a file."""
    schema = pq.ParquetFile(path).schema
    layout = {}
    for i in range(len(schema)):
        column = schema.column(i)
        logical = column.logical_type.to_json()
        unit = next((u for u in ("milliseconds", "microseconds", "nanoseconds") if u in logical), None)
        layout[column.path] = (column.physical_type, unit)
    return layout


def _files(warehouse: str, prefix: str) -> list[Path]:
    return sorted(Path(warehouse, "db.db", "t").glob(f"p=*/bucket-*/{prefix}-*.parquet"))


def test_java_paimon_reads_writes_and_compacts_nanoseconds_and_fixed_binary(tmp_path: Path, java: JavaPaimon) -> None:
    """changelake writes (upserts, deletes, a full compaction, lookup changelog) a table
    whose partition and keys are TIMESTAMP(9) and BINARY(3) and whose values hold every
    timestamp precision; its data and changelog files store each column as Java Paimon's
    own files do; Java reads every row to the nanosecond, streams the changelog as
    changelake reads it, writes to the table (bucketing keys alike) and fully compacts it,
    and changelake reads Java's files back, then writes over them."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=KEYS, partition_keys=["p"],
                                               options={"bucket": "2", "changelog-producer": "lookup"})
    model = Model(seed=13)
    _write_ours(table, model.commit(30, 0, 0))
    _write_ours(table, model.commit(10, 8, 4))
    table.compact(full=True)
    expected = _sorted(list(model.rows.values()))
    assert _sorted(java.read(warehouse, "db.t")) == expected
    assert _sorted(_exact(table.scan().to_arrow())) == expected
    ours = _files(warehouse, "data") + _files(warehouse, "changelog")
    assert _files(warehouse, "changelog")
    assert all(_layout(f) == PAIMON_LAYOUT for f in ours)

    java_changes = model.commit(6, 8, 4)
    assert {row["p"] for _, row in java_changes} == set(PARTITIONS)  # Java compacts both
    java.write(warehouse, "db.t", java_changes, full_compaction=True)
    expected = _sorted(list(model.rows.values()))
    assert _sorted(java.read(warehouse, "db.t")) == expected
    assert _sorted(_exact(table.scan().to_arrow())) == expected
    theirs = [f for f in _files(warehouse, "data") if f not in ours]
    assert theirs and all(_layout(f) == _layout(ours[0]) for f in theirs)  # Java's layout is changelake's

    _write_ours(table, model.commit(4, 6, 3))
    table.compact(full=True)
    expected = _sorted(list(model.rows.values()))
    assert _sorted(_exact(table.scan().to_arrow())) == expected
    assert _sorted(java.read(warehouse, "db.t")) == expected
    changes = _exact(table.changes(0, table.latest_snapshot().id).to_arrow())
    ours_changes = sorted(((row.pop("rowkind"), _norm(row)) for row in changes), key=repr)
    assert {kind for kind, _ in ours_changes} == {"+I", "-U", "+U", "-D"}
    assert sorted(((kind, _norm(row)) for kind, row in java.stream(warehouse, "db.t", 1)), key=repr) == ours_changes


@pytest.mark.parametrize("thin", [False, True])
def test_pypaimon_reads_nanoseconds_and_fixed_binary(tmp_path: Path, pypaimon: Pypaimon, thin: bool) -> None:
    """pypaimon reads the INT96 and BYTE_ARRAY columns changelake writes, of files with and
    without the ``_KEY_`` columns (``data-file.thin-mode``), to the nanosecond (BINARY(n) as
    variable-length bytes, as pypaimon types it). pypaimon 2.1 names a TIMESTAMP(9)
    partition's directory to the microsecond (Java, and changelake, to the nanosecond), so the
    partitions here have no nanoseconds beyond the microsecond."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=KEYS, partition_keys=["p"],
                                               options={"bucket": "2", "data-file.thin-mode": str(thin).lower()})
    model = Model(seed=5, partitions=(1_700_000_000_123_456_000, PARTITIONS[1]))
    _write_ours(table, model.commit(40, 0, 0))
    _write_ours(table, model.commit(10, 10, 5))
    table.compact(full=True)
    files = _files(warehouse, "data")
    layout = {c: t for c, t in PAIMON_LAYOUT.items() if not (thin and c.startswith("_KEY_"))}
    assert files and all(_layout(f) == layout for f in files)
    theirs = pypaimon.read(warehouse, "db.t")
    assert theirs.schema.field("b5").type == pa.binary()
    assert _sorted(_exact(theirs)) == _sorted(list(model.rows.values())) == _sorted(_exact(table.scan().to_arrow()))


def pypaimon_rust_read(warehouse: str, name: str) -> pa.Table:
    """Every row of ``name`` as pypaimon-rust reads it."""
    datafusion = pytest.importorskip("pypaimon_rust.datafusion")
    builder = datafusion.PaimonCatalog({"warehouse": warehouse}).get_table(name).new_read_builder()
    return pa.Table.from_batches(builder.new_read().read(builder.new_scan().plan().splits()))


def test_pypaimon_rust_reads_nanoseconds_and_fixed_binary(tmp_path: Path) -> None:
    """pypaimon-rust 0.4 reads the same columns, partitions named to the nanosecond too."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.t", SCHEMA, primary_keys=KEYS, partition_keys=["p"],
                                               options={"bucket": "2"})
    model = Model(seed=3)
    _write_ours(table, model.commit(30, 0, 0))
    _write_ours(table, model.commit(5, 5, 3))
    table.compact(full=True)
    assert _sorted(_exact(pypaimon_rust_read(warehouse, "db.t"))) == _sorted(list(model.rows.values()))
