"""Interoperability with pypaimon (the Apache Paimon Python client), in both directions.

* changelake writes, pypaimon reads every snapshot (time travel) and tags;
* pypaimon writes (inserts, updates, ``-D`` deletes through ``rowkind.field``), changelake
  reads every snapshot;
* both write alternately to the same table;
* the bucket function agrees with pypaimon's for every supported key type;
* every supported column type round-trips from changelake to pypaimon.

A pypaimon 2.1.0 bug shapes the data used here: its writer records ``delete_row_count = 0``
for files holding ``-D``/``-U`` rows, so a bucket made of a single such file is read through
the raw (no-merge) fast path and pypaimon returns the retraction rows as if they were inserts
(changelake drops them: ``test_deletes_pypaimon_counts_as_none_stay_deleted``).
Every table below therefore gets one insert-only commit covering every (partition, bucket)
first: every later file lands in a bucket that already has a file, so pypaimon always merges
a bucket that holds retractions. ``_assert_raw_splits_hold_no_retractions`` checks this
precondition (every split pypaimon reads without merging holds no -U/-D row) so that a
failing comparison is never caused by that pypaimon bug.

changelake's writer compacts (universal compaction): a write lands as an APPEND snapshot and,
when it compacted, a COMPACT snapshot with the same rows. Every snapshot of either kind is
compared, and the tests check that pypaimon really read compacted files (levels > 0).
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import changelake as cl
from changelake.table.format import binary_row
from changelake.table.format.bucket import buckets, hash_rows
from changelake.table.merge import chunked
from changelake.table.read.live_files import live_entries
from pypaimon_oracle import Pypaimon

D = decimal.Decimal


def _dec(unscaled: int, scale: int) -> decimal.Decimal:
    """The exact decimal ``unscaled * 10**-scale`` (no rounding to the context's 28 digits)."""
    return D(f"{unscaled}E-{scale}")
PARTITIONS = ("2024-01-01", "2024-01-02")


# -- helpers ------------------------------------------------------------------------------


def _sorted(rows: Iterable[dict[str, Any]], keys: Sequence[str] = ("dt", "id")) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: tuple(r[k] for k in keys))


def _paimon_read_snapshot(pypaimon: Pypaimon, warehouse: str, name: str, snapshot_id: int) -> list[dict[str, Any]]:
    return pypaimon.read(warehouse, name, {"scan.snapshot-id": str(snapshot_id)}).to_pylist()


def _paimon_write(pypaimon: Pypaimon, warehouse: str, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    pypaimon.write(warehouse, name, pa.Table.from_pylist(rows, schema=schema))


RETRACTIONS = (1, 3)  # _VALUE_KIND of -U and -D


def _assert_raw_splits_hold_no_retractions(pypaimon: Pypaimon, warehouse: str, name: str, snapshot_id: int) -> None:
    """Precondition for comparing with pypaimon (see the module docstring): every split that
    pypaimon reads as it is, without a merge, holds no -U/-D row."""
    for split in pypaimon.splits(warehouse, name, {"scan.snapshot-id": str(snapshot_id)}):
        if not split["raw_convertible"]:
            continue
        for f in split["files"]:
            kinds = pq.ParquetFile(f["path"]).read(columns=["_VALUE_KIND"]).column(0).to_pylist()
            assert not set(kinds) & set(RETRACTIONS), (
                f"snapshot {snapshot_id}: pypaimon reads {f['name']} (level {f['level']}) without merging "
                "but it holds retractions"
            )


def _assert_every_snapshot_matches(pypaimon: Pypaimon, table: cl.Table, warehouse: str,
                                   expected: dict[int, list[dict[str, Any]]]) -> None:
    """changelake and pypaimon both read every snapshot of db.t as the model says."""
    for snapshot_id, want in expected.items():
        _assert_raw_splits_hold_no_retractions(pypaimon, warehouse, "db.t", snapshot_id)
        ours = _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())
        theirs = _sorted(_paimon_read_snapshot(pypaimon, warehouse, "db.t", snapshot_id))
        assert ours == want, f"changelake snapshot {snapshot_id} differs from the model"
        assert theirs == want, f"pypaimon snapshot {snapshot_id} differs from the model"


def _landed(table: cl.Table, first: cl.Snapshot | None) -> list[cl.Snapshot]:
    """The snapshots one ``table.write`` landed: ``first`` (APPEND), then at most one COMPACT
    snapshot of the same commit user and identifier."""
    assert first is not None and first.commit_kind == "APPEND"
    latest = table.latest_snapshot()
    assert latest is not None
    landed = [table.snapshot(i) for i in range(first.id, latest.id + 1)]
    assert len(landed) <= 2
    for later in landed[1:]:
        assert later.commit_kind == "COMPACT"
        assert (later.commit_user, later.commit_identifier) == (first.commit_user, first.commit_identifier)
        assert later.delta_record_count is not None and later.total_record_count is not None
    return landed


def _assert_compacted(table: cl.Table) -> None:
    """The table went through compaction: some snapshot is a COMPACT one and the latest
    snapshot has live files above level 0 (so pypaimon read compacted files)."""
    assert any(s.commit_kind == "COMPACT" for s in table.snapshots()), "no COMPACT snapshot"
    latest = table.latest_snapshot()
    assert latest is not None
    levels = [e.file.level for e in live_entries(table.context, latest)]
    assert max(levels) > 0, f"no live file above level 0 in snapshot {latest.id}: {levels}"


def _apply(model: dict[tuple[Any, ...], dict[str, Any]], rows: Iterable[dict[str, Any]], kind_column: str,
           keep_kind: bool) -> None:
    """Apply rows to a dict model of the table (deduplicate merge engine: last row wins)."""
    for row in rows:
        key = (row["dt"], row["id"])
        kind = row[kind_column]
        if kind in ("+I", "+U"):
            model[key] = dict(row) if keep_kind else {k: v for k, v in row.items() if k != kind_column}
        else:
            model.pop(key, None)


# -- changelake writes, pypaimon reads ----------------------------------------------------

CL_SCHEMA = pa.schema([
    pa.field("dt", pa.string()),
    pa.field("id", pa.int64()),
    pa.field("v", pa.string()),
    pa.field("n", pa.int64()),
    pa.field("amt", pa.float64()),
])


def _changelake_commits(seed: int, commits: int) -> list[list[dict[str, Any]]]:
    """Batches with a ``rowkind`` column: an insert-only first commit over 2 partitions x 40
    keys (covers every bucket), then mixed inserts, +U updates, -U/+U pairs, lone -U, -D
    deletes, deletes of absent keys, re-inserts and repeated keys within a batch."""
    rng = random.Random(seed)
    live: set[tuple[str, int]] = set()
    batches = []
    first = []
    for p in PARTITIONS:
        for i in range(40):
            first.append({"dt": p, "id": i, "v": f"{p}/{i}/0", "n": i, "amt": i * 0.5, "rowkind": "+I"})
            live.add((p, i))
    batches.append(first)
    for c in range(1, commits):
        batch: list[dict[str, Any]] = []

        def row(p: str, i: int, kind: str, c: int = c) -> dict[str, Any]:
            n = None if rng.random() < 0.2 else rng.randint(-(2**40), 2**40)
            return {"dt": p, "id": i, "v": f"{p}/{i}/{c}/{rng.random():.6f}", "n": n,
                    "amt": rng.uniform(-1e6, 1e6), "rowkind": kind}

        for _ in range(18):
            p = rng.choice(PARTITIONS)
            i = rng.randrange(70)
            op = rng.random()
            if op < 0.3:
                batch.append(row(p, i, "+U" if (p, i) in live else "+I"))
                live.add((p, i))
            elif op < 0.45:
                batch += [row(p, i, "-U"), row(p, i, "+U")]
                live.add((p, i))
            elif op < 0.75:
                batch.append(row(p, i, "-D"))
                live.discard((p, i))
            elif op < 0.85:
                batch.append(row(p, i, "-U"))
                live.discard((p, i))
            else:  # inserted, then deleted or updated again within the same batch
                batch.append(row(p, i, "+I"))
                last = rng.choice(["-D", "+U"])
                batch.append(row(p, i, last))
                if last == "-D":
                    live.discard((p, i))
                else:
                    live.add((p, i))
        batches.append(batch)
    return batches


@pytest.mark.parametrize("num_buckets", [2, 4])
def test_pypaimon_reads_every_changelake_snapshot(tmp_path: Any, pypaimon: Pypaimon, num_buckets: int) -> None:
    warehouse = str(tmp_path)
    # With 2 buckets, compaction starts at 2 sorted runs (picks of every kind, many COMPACT
    # snapshots); with 4, at Paimon's default of 5.
    trigger = {"num-sorted-run.compaction-trigger": "2"} if num_buckets == 2 else {}
    table = cl.Catalog(warehouse).create_table(
        "db.t", schema=CL_SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": str(num_buckets), **trigger},
    )
    model: dict[tuple[Any, ...], dict[str, Any]] = {}
    expected: dict[int, list[dict[str, Any]]] = {}  # snapshot id -> the rows it must show
    for batch in _changelake_commits(seed=num_buckets, commits=8):
        landed = _landed(table, table.write(pa.Table.from_pylist(batch)))
        _apply(model, batch, "rowkind", keep_kind=False)
        for snap in landed:  # a COMPACT snapshot shows the rows of the APPEND one before it
            expected[snap.id] = _sorted(model.values())

    # The insert-only first commit put a file in every bucket of every partition.
    assert len(table.scan(snapshot_id=1).plan()) == len(PARTITIONS) * num_buckets
    assert [s.id for s in table.snapshots()] == list(range(1, len(expected) + 1))
    _assert_compacted(table)
    _assert_every_snapshot_matches(pypaimon, table, warehouse, expected)
    # The latest snapshot without time travel too.
    assert _sorted(pypaimon.read(warehouse, "db.t").to_pylist()) == expected[len(expected)]


def test_pypaimon_reads_changelake_tag(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", schema=CL_SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"], options={"bucket": "2"},
    )
    for batch in _changelake_commits(seed=11, commits=3):
        table.write(pa.Table.from_pylist(batch))
    table.create_tag("t1", snapshot_id=2)
    _assert_raw_splits_hold_no_retractions(pypaimon, warehouse, "db.t", 2)
    ours = _sorted(table.scan(tag="t1").to_arrow().to_pylist())
    assert ours == _sorted(table.scan(snapshot_id=2).to_arrow().to_pylist())
    assert _sorted(pypaimon.read(warehouse, "db.t", {"scan.tag-name": "t1"}).to_pylist()) == ours


# -- pypaimon writes, changelake reads ----------------------------------------------------

PY_SCHEMA = pa.schema([
    pa.field("dt", pa.string()),
    pa.field("id", pa.int64()),
    pa.field("v", pa.string()),
    pa.field("n", pa.int32()),
    pa.field("op", pa.string()),
])


def _create_paimon_table(pypaimon: Pypaimon, warehouse: str, name: str = "db.t", num_buckets: int = 2,
                         options: dict[str, str] | None = None) -> None:
    pypaimon.create_table(warehouse, name, PY_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                          options={"bucket": str(num_buckets), "rowkind.field": "op", **(options or {})})


def _op_commits() -> list[list[dict[str, Any]]]:
    """Commits for a table with ``rowkind.field = op``; the first is insert-only and covers
    every bucket of both partitions (see the module docstring)."""

    def r(p: str, i: int, v: str | None, op: str, n: int | None = None) -> dict[str, Any]:
        return {"dt": p, "id": i, "v": v, "n": n if n is not None else i, "op": op}

    a, b = PARTITIONS
    return [
        [r(p, i, f"{p}-{i}", "+I") for p in PARTITIONS for i in range(1, 13)],
        [r(a, 1, "a1-upd", "+U"), r(a, 2, None, "-D"), r(b, 3, None, "-D"), r(a, 20, "new", "+I"),
         r(b, 5, "b5-upd", "+U", n=-5)],
        [r(a, 4, "a4-old", "-U"), r(a, 4, "a4-new", "+U"), r(a, 2, "a2-back", "+I"), r(b, 7, None, "-D"),
         r(b, 8, None, "-D"), r(a, 99, None, "-D")],
        [r(b, 3, "b3-back", "+I"), r(a, 20, None, "-D"), r(a, 1, "a1-upd2", "+U"), r(b, 9, "b9", "-U")],
        [r(a, i, None, "-D") for i in range(5, 12)] + [r(b, 40 + i, f"b{40 + i}", "+I") for i in range(5)],
    ]


def test_changelake_reads_every_pypaimon_snapshot(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    _create_paimon_table(pypaimon, warehouse)
    commits = _op_commits()
    model: dict[tuple[Any, ...], dict[str, Any]] = {}
    expected = []
    for rows in commits:
        _paimon_write(pypaimon, warehouse, "db.t", rows, PY_SCHEMA)
        _apply(model, rows, "op", keep_kind=True)
        expected.append(_sorted(model.values()))

    by_catalog = cl.Catalog(warehouse).get_table("db.t")
    by_path = cl.open_table(str(tmp_path / "db.db" / "t"))
    assert by_catalog.primary_keys == ["dt", "id"]
    assert by_catalog.partition_keys == ["dt"]
    assert by_catalog.context.options.bucket == 2
    assert len(by_catalog.scan(snapshot_id=1).plan()) == len(PARTITIONS) * 2
    assert [s.id for s in by_catalog.snapshots()] == list(range(1, len(commits) + 1))
    for snapshot_id, want in enumerate(expected, start=1):
        _assert_raw_splits_hold_no_retractions(pypaimon, warehouse, "db.t", snapshot_id)
        theirs = _sorted(_paimon_read_snapshot(pypaimon, warehouse, "db.t", snapshot_id))
        assert theirs == want, f"pypaimon snapshot {snapshot_id} differs from the model"
        for table in (by_catalog, by_path):
            ours = _sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist())
            assert ours == want, f"changelake reads pypaimon snapshot {snapshot_id} differently"
    assert _sorted(by_path.scan().to_arrow().to_pylist()) == expected[-1]


@pytest.mark.parametrize("chunked_reads", [False, True])
def test_deletes_pypaimon_counts_as_none_stay_deleted(tmp_path: Any, pypaimon: Pypaimon,
                                                      monkeypatch: pytest.MonkeyPatch, chunked_reads: bool) -> None:
    """pypaimon 2.1 records ``deleteRowCount = 0`` for level-0 files that hold -D rows
    (``rowkind.field``): a bucket of one such file is one section, read without a merge, and
    its -D rows must still not read as live rows (whole reads, projections, filters, and the
    batch-by-batch read of big splits)."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("dt", pa.string()), pa.field("id", pa.int64()), pa.field("v", pa.string()),
                        pa.field("op", pa.string())])
    pypaimon.create_table(warehouse, "db.t", schema, partition_keys=["dt"], primary_keys=["dt", "id"],
                          options={"bucket": "2", "rowkind.field": "op"})
    rng = random.Random(6)
    rows = [{"dt": rng.choice(PARTITIONS), "id": rng.randrange(800), "v": f"v{i}",
             "op": rng.choice(["+I", "+I", "+U", "-D"])} for i in range(2000)]
    pypaimon.write(warehouse, "db.t", pa.Table.from_pylist(rows, schema=schema))
    model: dict[tuple[Any, ...], dict[str, Any]] = {}
    _apply(model, rows, "op", keep_kind=True)

    table = cl.Catalog(warehouse).get_table("db.t")
    files = table.system("files").to_pylist()
    assert len(files) == len(PARTITIONS) * 2
    assert all(f["level"] == 0 and f["deleteRowCount"] == 0 for f in files)  # what pypaimon 2.1 records ...
    kinds = [pq.ParquetFile(f["file_path"]).read(columns=["_VALUE_KIND"]).column(0).to_pylist() for f in files]
    assert sum(k.count(3) for k in kinds) > 100  # ... for files holding this many -D rows
    assert all(split.raw_convertible for split in table.scan().plan())
    if chunked_reads:
        monkeypatch.setattr(chunked, "CHUNKED_MERGE_BYTES", 0)
        monkeypatch.setattr(chunked, "BATCH_ROWS", 64)
    want = _sorted(model.values())
    assert _sorted(table.scan().to_arrow().to_pylist()) == want
    assert table.scan(columns=["v"]).to_arrow().num_rows == len(want)
    assert table.scan(columns=[]).to_arrow().num_rows == len(want)
    some = _sorted(r for r in want if r["v"] < "v5")
    assert _sorted(table.scan(filter=pc.field("v") < "v5").to_arrow().to_pylist()) == some


@pytest.mark.parametrize("creator", ["pypaimon", "changelake"])
def test_alternating_writers(tmp_path: Any, pypaimon: Pypaimon, creator: str) -> None:
    """pypaimon and changelake commit in turn to one table; each continues the other's
    sequence numbers (changelake compacting files of both), and both read every snapshot
    the same way."""
    warehouse = str(tmp_path)
    # changelake compacts at 2 sorted runs (pypaimon 2.1.0 never compacts a primary-key table).
    trigger = {"num-sorted-run.compaction-trigger": "2"}
    if creator == "pypaimon":
        _create_paimon_table(pypaimon, warehouse, options=trigger)
        table = cl.Catalog(warehouse).get_table("db.t")
    else:
        table = cl.Catalog(warehouse).create_table(
            "db.t", schema=PY_SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
            options={"bucket": "2", "rowkind.field": "op", **trigger},
        )
    model: dict[tuple[Any, ...], dict[str, Any]] = {}
    expected: dict[int, list[dict[str, Any]]] = {}  # snapshot id -> the rows it must show

    def changelake_write(rows: list[dict[str, Any]]) -> None:
        landed = _landed(table, table.write(pa.Table.from_pylist(rows, schema=PY_SCHEMA)))
        _apply(model, rows, "op", keep_kind=True)
        for snap in landed:
            expected[snap.id] = _sorted(model.values())

    for index, rows in enumerate(_op_commits()):
        if index % 2 == 0:
            _paimon_write(pypaimon, warehouse, "db.t", rows, PY_SCHEMA)
            _apply(model, rows, "op", keep_kind=True)
            latest = table.latest_snapshot()
            assert latest is not None and latest.id == len(expected) + 1
            expected[latest.id] = _sorted(model.values())
        else:
            changelake_write(rows)
    # Updates of the same key by the other writer: changelake wins over pypaimon's older row.
    changelake_write([{"dt": PARTITIONS[1], "id": 1, "v": "cl-last", "n": 0, "op": "+U"}])

    assert [s.id for s in table.snapshots()] == list(range(1, len(expected) + 1))
    _assert_compacted(table)
    _assert_every_snapshot_matches(pypaimon, table, warehouse, expected)


# -- bucket numbers ------------------------------------------------------------------------

BUCKET_COUNTS = (1, 2, 3, 4, 7, 16)
_TEXT = "abcxyzAZ09 _-/=éß日本語😀"


def _ints(rng: random.Random, bits: int) -> list[int]:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return [lo, hi, 0, -1, 1] + [rng.randint(lo, hi) for _ in range(150)]


def _strings(rng: random.Random) -> list[str]:
    edges = ["", "a", "abcdefg", "abcdefgh", "ééé", "éééé", "日本", "日本語", "😀", "😀😀", "x" * 100]
    return edges + ["".join(rng.choice(_TEXT) for _ in range(rng.randint(0, 24))) for _ in range(150)]


def _binaries(rng: random.Random) -> list[bytes]:
    edges = [b"", b"\x00", b"\xff" * 7, b"\x00" * 8, bytes(range(256))]
    return edges + [rng.randbytes(rng.randint(0, 24)) for _ in range(150)]


def _floats(rng: random.Random, width: int) -> list[float]:
    # NaN is left out: its bit pattern after a round trip through Python floats is not
    # something pypaimon and Java agree on.
    fmt, ufmt = ("<f", "<I") if width == 32 else ("<d", "<Q")
    edges = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), 5e-324 if width == 64 else 1e-45]
    out = list(edges)
    while len(out) < 150:
        (value,) = struct.unpack(fmt, struct.pack(ufmt, rng.getrandbits(width)))
        if value == value:
            out.append(value)
    return out


def _timestamps(rng: random.Random, unit: str, tz: str | None) -> pa.Array:
    per_second = {"s": 1, "ms": 1000, "us": 1_000_000}[unit]
    lo, hi = -2_208_988_800 * per_second, 4_102_444_800 * per_second  # 1900 .. 2100
    ints = [0, -1, 1, lo, hi, 1_700_000_000 * per_second + per_second - 1]
    ints += [rng.randint(lo, hi) for _ in range(150)]
    return pa.array(ints, type=pa.int64()).cast(pa.timestamp(unit, tz=tz))


def _pypaimon_diverges_from_java(unscaled: int) -> bool:
    """pypaimon sizes a negative unscaled value by ``abs(x).bit_length()``, one byte more than
    Java's ``BigInteger.toByteArray()`` for -2^(8k-1) (e.g. -128 -> ff80, Java 80).
    changelake follows Java; see test_high_precision_decimal_encoding_follows_java."""
    return unscaled < 0 and (-unscaled) & (-unscaled - 1) == 0 and (-unscaled).bit_length() % 8 == 0


def _decimals(rng: random.Random, precision: int, scale: int) -> pa.Array:
    bound = 10**precision - 1
    unscaled = [0, 1, -1, bound, -bound, 127, -127, 255, -255, 256, -256, 32767, -32767, 2**63 - 1, -(2**63) + 1]
    unscaled = [u for u in unscaled if abs(u) <= bound]
    unscaled += [rng.randint(-bound, bound) for _ in range(120)]
    unscaled += [rng.randint(-999, 999) for _ in range(30)]
    unscaled = [u for u in unscaled if not _pypaimon_diverges_from_java(u)]
    return pa.array([_dec(u, scale) for u in unscaled], type=pa.decimal128(precision, scale))


def _dates(rng: random.Random) -> pa.Array:
    days = [0, -1, 1, -719_162, 2_932_896] + [rng.randint(-40_000, 60_000) for _ in range(150)]
    return pa.array(days, type=pa.int32()).cast(pa.date32())


KEY_CASES: dict[str, Callable[[random.Random], pa.Array]] = {
    "bool": lambda r: pa.array([True, False, False, True], type=pa.bool_()),
    "int8": lambda r: pa.array(_ints(r, 8), type=pa.int8()),
    "int16": lambda r: pa.array(_ints(r, 16), type=pa.int16()),
    "int32": lambda r: pa.array(_ints(r, 32), type=pa.int32()),
    "int64": lambda r: pa.array(_ints(r, 64), type=pa.int64()),
    "float32": lambda r: pa.array(_floats(r, 32), type=pa.float32()),
    "float64": lambda r: pa.array(_floats(r, 64), type=pa.float64()),
    "string": lambda r: pa.array(_strings(r), type=pa.string()),
    "string-short": lambda r: pa.array([s for s in _strings(r) if len(s.encode()) <= 7], type=pa.string()),
    "string-long": lambda r: pa.array([s for s in _strings(r) if len(s.encode()) > 7], type=pa.string()),
    "binary": lambda r: pa.array(_binaries(r), type=pa.binary()),
    "date32": _dates,
    "timestamp-s": lambda r: _timestamps(r, "s", None),
    "timestamp-ms": lambda r: _timestamps(r, "ms", None),
    "timestamp-us": lambda r: _timestamps(r, "us", None),
    "timestamp-ms-utc": lambda r: _timestamps(r, "ms", "UTC"),
    "timestamp-us-utc": lambda r: _timestamps(r, "us", "UTC"),
    "timestamp-us-new-york": lambda r: _timestamps(r, "us", "America/New_York"),
    "decimal-10-2": lambda r: _decimals(r, 10, 2),
    "decimal-18-0": lambda r: _decimals(r, 18, 0),
    "decimal-19-4": lambda r: _decimals(r, 19, 4),
    "decimal-30-4": lambda r: _decimals(r, 30, 4),
    "decimal-38-10": lambda r: _decimals(r, 38, 10),
}


@pytest.mark.parametrize("case", sorted(KEY_CASES))
def test_bucket_matches_pypaimon(pypaimon: Pypaimon, case: str) -> None:
    values = KEY_CASES[case](random.Random(case))
    assert len(values) >= 4
    batch = pa.record_batch([values], schema=pa.schema([pa.field("k", values.type, nullable=False)]))
    ours_hash = hash_rows(binary_row.encode([values])).view(np.uint32).tolist()
    assert ours_hash == pypaimon.hashes(batch), f"{case}: BinaryRow hash differs from pypaimon's"
    for n in BUCKET_COUNTS:
        ours = buckets([values], n).tolist()
        theirs = pypaimon.buckets(batch, n)
        diffs = [(v, o, t) for v, o, t in zip(values.to_pylist(), ours, theirs, strict=True) if o != t]
        assert not diffs, f"{case}, {n} buckets: (value, changelake, pypaimon) {diffs[:5]}"
        assert all(0 <= b < n for b in ours)


def test_bucket_matches_pypaimon_composite_key(pypaimon: Pypaimon) -> None:
    rng = random.Random(7)
    columns = {
        "a": pa.array(_ints(rng, 32), type=pa.int32()),
        "s": pa.array(_strings(rng)[:155], type=pa.string()),
        "t": _timestamps(rng, "us", None)[:155],
        "d": _decimals(rng, 30, 2)[:155],
        "b": pa.array(_binaries(rng)[:155], type=pa.binary()),
        "f": pa.array(_floats(rng, 64)[:150] + [0.0] * 5, type=pa.float64()),
    }
    size = min(len(c) for c in columns.values())
    arrays = [c[:size] for c in columns.values()]
    batch = pa.record_batch(arrays, schema=pa.schema([pa.field(k, c.type, nullable=False)
                                                      for k, c in columns.items()]))
    for n in BUCKET_COUNTS:
        assert buckets(arrays, n).tolist() == pypaimon.buckets(batch, n), f"{n} buckets"


def test_reference_bigint_buckets() -> None:
    """The dump of a real Paimon table: bigint ids 1..7 with 2 buckets."""
    ids = pa.array(range(1, 8), type=pa.int64())
    assert dict(zip(range(1, 8), buckets([ids], 2).tolist(), strict=True)) == {
        1: 0, 2: 0, 3: 1, 4: 0, 5: 0, 6: 0, 7: 1,
    }


def _java_to_byte_array(value: int) -> bytes:
    """``java.math.BigInteger.toByteArray()``: minimal big-endian two's complement."""
    length = (value if value >= 0 else ~value).bit_length() // 8 + 1
    return value.to_bytes(length, "big", signed=True)


@pytest.mark.parametrize("unscaled", [-128, -129, -127, 127, 128, -32768, -(2**63), -(2**71), 0, -1])
def test_high_precision_decimal_encoding_follows_java(unscaled: int) -> None:
    """Decimals with precision > 18 hold Java's ``toByteArray()`` of the unscaled value in
    the variable part (pypaimon 2.1.0 adds a byte for -2^(8k-1); Java Paimon does not)."""
    row = binary_row.encode([pa.array([_dec(unscaled, 2)], type=pa.decimal128(30, 2))]).row(0)
    (slot,) = struct.unpack("<Q", row[8:16])
    offset, length = slot >> 32, slot & 0xFFFFFFFF
    want = _java_to_byte_array(unscaled)
    assert (offset, row[offset:offset + length]) == (16, want)
    assert len(row) == 16 + 16
    assert binary_row.from_bytes(row, [pa.decimal128(30, 2)]) == (_dec(unscaled, 2),)


def test_written_rows_sit_in_pypaimon_buckets(tmp_path: Any, pypaimon: Pypaimon) -> None:
    """End to end: every row changelake writes sits in the bucket pypaimon computes for it
    from the table's own schema (partitioned, composite key, explicit bucket-key)."""
    schema = pa.schema([
        pa.field("dt", pa.string()), pa.field("k1", pa.int32()), pa.field("k2", pa.string()),
        pa.field("k3", pa.timestamp("us")), pa.field("v", pa.float64()),
    ])
    rng = random.Random(3)
    rows = [{"dt": rng.choice(PARTITIONS), "k1": rng.randint(-1000, 1000), "k2": rng.choice(["a", "bb", "long key!"]),
             "k3": dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=rng.randint(0, 10**12)), "v": rng.random()}
            for _ in range(300)]
    catalog = cl.Catalog(str(tmp_path))
    for name, options in (("db.pk", {"bucket": "5"}), ("db.bk", {"bucket": "3", "bucket-key": "k2,k1"})):
        table = catalog.create_table(name, schema=schema, primary_keys=["dt", "k1", "k2", "k3"],
                                     partition_keys=["dt"], options=options)
        table.write(pa.Table.from_pylist(rows, schema=schema))
        scan = table.scan()
        seen = 0
        for split in scan.plan():
            part = scan.read_split(split)
            seen += part.num_rows
            expected = set(pypaimon.table_buckets(str(tmp_path), name, part.combine_chunks().to_batches()[0]))
            assert expected == {split.bucket}, f"{name}: rows of bucket {split.bucket} hash to {expected}"
        assert seen == len({(r["dt"], r["k1"], r["k2"], r["k3"]) for r in rows})


# -- every column type ---------------------------------------------------------------------

ALL_TYPES = pa.schema([
    pa.field("id", pa.int64()),
    pa.field("b", pa.bool_()),
    pa.field("i8", pa.int8()),
    pa.field("i16", pa.int16()),
    pa.field("i32", pa.int32()),
    pa.field("i64", pa.int64()),
    pa.field("f32", pa.float32()),
    pa.field("f64", pa.float64()),
    pa.field("s", pa.string()),
    pa.field("bin", pa.binary()),
    pa.field("d", pa.date32()),
    pa.field("ts_ms", pa.timestamp("ms")),
    pa.field("ts_us", pa.timestamp("us")),
    pa.field("ts_ms_tz", pa.timestamp("ms", tz="UTC")),
    pa.field("ts_us_tz", pa.timestamp("us", tz="UTC")),
    pa.field("dec", pa.decimal128(10, 2)),
    pa.field("dec_big", pa.decimal128(30, 4)),
    pa.field("lst", pa.list_(pa.int64())),
    pa.field("st", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.string())])),
])

_UTC = dt.UTC


def _all_type_rows() -> list[dict[str, Any]]:
    full = {
        "id": 1, "b": True, "i8": -128, "i16": 32767, "i32": -(2**31), "i64": 2**63 - 1,
        "f32": 1.5, "f64": -2.25e300, "s": "héllo wörld, a string longer than seven bytes", "bin": b"\x00\xff\x10",
        "d": dt.date(1969, 12, 31), "ts_ms": dt.datetime(2024, 1, 1, 1, 2, 3, 456000),
        "ts_us": dt.datetime(1900, 1, 1, 0, 0, 0, 1), "ts_ms_tz": dt.datetime(2024, 1, 1, tzinfo=_UTC),
        "ts_us_tz": dt.datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=_UTC), "dec": D("-12345678.90"),
        "dec_big": D("12345678901234567890123456.7890"), "lst": [1, None, -3], "st": {"a": 1, "b": "x"},
    }
    zero = {
        "id": 3, "b": False, "i8": 0, "i16": -1, "i32": 0, "i64": -(2**63), "f32": -0.0, "f64": 0.0, "s": "",
        "bin": b"", "d": dt.date(2000, 2, 29), "ts_ms": dt.datetime(1970, 1, 1),
        "ts_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        "ts_ms_tz": dt.datetime(1970, 1, 1, tzinfo=_UTC), "ts_us_tz": dt.datetime(1960, 1, 1, 0, 0, 0, 1, tzinfo=_UTC),
        "dec": D("0.00"), "dec_big": D("-0.0001"), "lst": [], "st": {"a": None, "b": None},
    }
    nulls = {name: None for name in ALL_TYPES.names} | {"id": 2}
    more = [
        {**full, "id": 10 + i, "s": f"s{i}", "i32": i, "dec_big": _dec(-(10**25) + i, 4), "lst": list(range(i))}
        for i in range(20)
    ]
    return [full, nulls, zero, *more]


def test_pypaimon_reads_every_column_type(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table("db.all", schema=ALL_TYPES, primary_keys=["id"],
                                               options={"bucket": "2"})
    rows = _all_type_rows()
    table.write(pa.Table.from_pylist(rows[:12], schema=ALL_TYPES))
    table.write(pa.Table.from_pylist(rows[12:], schema=ALL_TYPES))
    # An update so that pypaimon also merges files of every type.
    updated = {**rows[0], "s": "updated", "lst": [7], "st": {"a": -1, "b": None}}
    table.write(pa.Table.from_pylist([updated], schema=ALL_TYPES))
    want = _sorted([updated, *rows[1:]], ("id",))

    ours = table.scan().to_arrow()
    theirs = pypaimon.read(warehouse, "db.all")
    assert ours.schema.names == theirs.schema.names == ALL_TYPES.names
    for field in ALL_TYPES:
        assert theirs.schema.field(field.name).type.id == field.type.id, field.name
        assert ours.schema.field(field.name).type == field.type, field.name
    assert _sorted(ours.to_pylist(), ("id",)) == want
    assert _sorted(theirs.to_pylist(), ("id",)) == want


def test_changelake_reads_every_column_type_written_by_pypaimon(tmp_path: Any, pypaimon: Pypaimon) -> None:
    warehouse = str(tmp_path)
    pypaimon.create_table(warehouse, "db.all", ALL_TYPES, primary_keys=["id"], options={"bucket": "2"})
    rows = _all_type_rows()
    _paimon_write(pypaimon, warehouse, "db.all", rows[:12], ALL_TYPES)
    _paimon_write(pypaimon, warehouse, "db.all", rows[12:], ALL_TYPES)
    updated = {**rows[0], "s": "updated", "lst": [7], "st": {"a": -1, "b": None}}
    _paimon_write(pypaimon, warehouse, "db.all", [updated], ALL_TYPES)
    want = _sorted([updated, *rows[1:]], ("id",))

    table = cl.Catalog(warehouse).get_table("db.all")
    for field in ALL_TYPES:
        assert table.schema.field(field.name).type == field.type, field.name
    ours = table.scan().to_arrow()
    assert ours.schema.names == ALL_TYPES.names
    assert _sorted(ours.to_pylist(), ("id",)) == want
    assert _sorted(pypaimon.read(warehouse, "db.all").to_pylist(), ("id",)) == want


def test_pypaimon_reads_typed_partitions(tmp_path: Any, pypaimon: Pypaimon) -> None:
    """Partition directories (int, bool, date under partition.legacy-name, escaped and empty
    strings) are where pypaimon looks."""
    warehouse = str(tmp_path)
    schema = pa.schema([pa.field("pi", pa.int32()), pa.field("ps", pa.string()), pa.field("pb", pa.bool_()),
                        pa.field("pd", pa.date32()), pa.field("id", pa.int64()), pa.field("v", pa.string())])
    table = cl.Catalog(warehouse).create_table("db.p", schema=schema, primary_keys=["pi", "ps", "pb", "pd", "id"],
                                               partition_keys=["pi", "ps", "pb", "pd"], options={"bucket": "3"})
    days = [dt.date(2024, 1, 2), dt.date(1969, 12, 31), dt.date(2000, 2, 29)]
    parts = [(-5, "a b/c=d", True, days[0]), (7, "", False, days[1]), (0, "plain", True, days[2])]
    rows = [{"pi": pi, "ps": ps, "pb": pb, "pd": pd, "id": i, "v": f"{pi}{ps}{i}"}
            for pi, ps, pb, pd in parts for i in range(12)]
    table.write(pa.Table.from_pylist(rows, schema=schema))
    table.write(pa.Table.from_pylist([{**rows[0], "v": "upd"}], schema=schema))
    keys = ("pi", "ps", "pb", "pd", "id")
    ours = _sorted(table.scan().to_arrow().to_pylist(), keys)
    assert ours == _sorted([{**rows[0], "v": "upd"}, *rows[1:]], keys)
    assert _sorted(pypaimon.read(warehouse, "db.p").to_pylist(), keys) == ours
