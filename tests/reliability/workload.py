"""What the crash test and the soak share: the table, the rows of each commit, the model of
what a table must show after a sequence of commits, the commit log, and the verifier.

Every commit's rows are a pure function of (seed, writer, commit index), so a verifier (a fresh
process) rebuilds the model from the log of which commits were attempted and the table's
snapshots alone. Values are unique to the commit that wrote them, so a lost or a duplicated
commit always shows.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import random
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl
from changelake.table.format import data_file, kv, manifest
from changelake.table.format.manifest import ManifestEntry
from changelake.table.io import external_paths
from changelake.table.read import deletion_vectors, live_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pypaimon_oracle import Pypaimon

SCHEMA = pa.schema([
    pa.field("p", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("a", pa.int64()),
    pa.field("b", pa.int64()),
])
KEY = ("p", "k")
PARTITIONS = ("x", "y")
TABLE_NAME = "db.t"
# Small manifests and frequent manifest compaction, so short runs reach every code path.
WAREHOUSE = "{warehouse}"  # in an option's value: the warehouse the table is created in
BASE_OPTIONS = {
    "bucket": "2",
    "manifest.target-file-size": "8 kb",
    "manifest.merge-min-count": "3",
    "manifest.full-compaction-threshold-size": "24 kb",
}
COMPACTION = {"target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "2"}
INPUT_CHANGELOG = {"changelog-producer": "input"}
EXPIRY = {"snapshot.num-retained.min": "3", "snapshot.num-retained.max": "3"}
# Changelog outlives its snapshots: expired APPEND snapshots keep their data files for streams.
DECOUPLED = EXPIRY | {"changelog.num-retained.max": "7"}
DELETION_VECTORS = {"deletion-vectors.enabled": "true"}
APPEND = "append"  # the engine name of the append mode: no primary key, no merge
APPEND_COMPACTION = {"bucket-key": "k", "target-file-size": "2 kb", "compaction.min.file-num": "2",
                     "compaction.max.file-num": "3"}

Row = dict[str, Any]
Key = tuple[str, int]


# -- modes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """A crash-test workload: how commits are made, the merge engine and the table options."""

    name: str
    one_shot: bool  # table.write() per commit; else one long-lived table.writer(commit_user=...)
    engine: str
    options: dict[str, str] = field(default_factory=dict)
    calls: int = 2  # write() calls per commit (long-lived writer)
    rows: int = 40  # rows per write() call
    keys: int = 60  # keys per partition
    # Snapshot hint writes (LATEST, EARLIEST) fail in a fixed pattern, some on every try.
    hint_faults: bool = False
    # The primary key is k alone, without the partition p (cross-partition upsert, bucket -1):
    # a key lives in one partition, and a row of it in the other partition moves it there.
    cross_partition: bool = False
    partitions: tuple[str, str] = PARTITIONS  # the values of p
    operations: tuple[str, ...] = ()  # the table operations its even commits run in turn (operations.py)

    @property
    def append(self) -> bool:
        """An append table (no primary key): every row is kept, keys are unique per row."""
        return self.engine == APPEND

    @property
    def primary_keys(self) -> list[str]:
        if self.cross_partition:
            return ["k"]
        return [] if self.append else list(KEY)

    @property
    def table_options(self) -> dict[str, str]:
        if self.append:
            return BASE_OPTIONS | self.options
        engine: dict[str, str] = {"merge-engine": self.engine}
        if self.engine == "aggregation":
            engine |= {"fields.a.aggregate-function": "sum", "fields.b.aggregate-function": "sum"}
        return BASE_OPTIONS | engine | self.options

    @property
    def deletes(self) -> bool:
        return self.engine == "deduplicate"

    @property
    def input_changelog(self) -> bool:
        """Whether commits also write their input as changelog files."""
        return self.options.get("changelog-producer") == "input"

    @property
    def compaction_changelog(self) -> bool:
        """Whether compactions write the changelog (``lookup``): snapshots that carry it are
        checked against the changelog folded from the first snapshot."""
        return self.options.get("changelog-producer") == "lookup"

    @property
    def postpones(self) -> bool:
        """Whether the table is a postpone-bucket table: the writer's rows wait in
        bucket-postpone/, which readers skip, until the child's ``table.compact()`` after each
        commit moves them (a snapshot with postpone files shows its commits once compacted)."""
        return self.options.get("bucket") == "-2"

    @property
    def skips_level0(self) -> bool:
        """Whether readers skip level 0 (Paimon's for first-row, and every reader of a table
        with deletion vectors): a snapshot holding level-0 files (a kill between a commit's
        APPEND and COMPACT) does not show that commit yet."""
        return self.engine == "first-row" or self.options.get("deletion-vectors.enabled") == "true"

    @property
    def expires(self) -> bool:
        """Whether writers expire snapshots (the oldest retained one is then not snapshot 1)."""
        return "snapshot.num-retained.max" in self.options


MODES = {m.name: m for m in (
    # An append table of fixed buckets: every commit compacts its buckets' small files after it
    # lands (a COMPACT snapshot of its own), joining up to three adjacent files.
    Mode("append", one_shot=False, engine=APPEND, options=APPEND_COMPACTION),
    Mode("lookup", one_shot=False, engine="deduplicate", options={"changelog-producer": "lookup"}),
    Mode("writer", one_shot=False, engine="deduplicate"),
    Mode("write", one_shot=True, engine="deduplicate", options=INPUT_CHANGELOG),
    Mode("spill", one_shot=False, engine="deduplicate", options={"write-buffer-size": "4 kb"}, calls=3, rows=200,
         keys=400),
    Mode("compaction", one_shot=False, engine="deduplicate", options=COMPACTION),
    Mode("partial-update", one_shot=False, engine="partial-update", options=COMPACTION),
    Mode("aggregation", one_shot=True, engine="aggregation", options=COMPACTION),
    Mode("first-row", one_shot=False, engine="first-row", options=COMPACTION),
    # Writers expire all but the newest three snapshots after every commit.
    Mode("expire", one_shot=False, engine="deduplicate", options=COMPACTION | EXPIRY),
    Mode("decoupled", one_shot=False, engine="deduplicate", options=COMPACTION | DECOUPLED),
    # Every commit compacts level 0 up, marking replaced rows in deletion vectors; with expiry,
    # so expired index files and index manifests go.
    Mode("deletion-vectors", one_shot=False, engine="deduplicate", options=COMPACTION | DELETION_VECTORS | EXPIRY),
    Mode("dv-partial-update", one_shot=True, engine="partial-update", options=COMPACTION | DELETION_VECTORS),
    # lookup-compact gentle: level 0 stays until universal compaction or the interval moves it
    # up, so many snapshots hold level-0 files that readers skip.
    Mode("dv-gentle", one_shot=False, engine="deduplicate",
         options=COMPACTION | DELETION_VECTORS | {"lookup-compact": "gentle", "lookup-compact.max-interval": "3"}),
    # lookup-wait off: level 0 goes up in the background, from the vectors the previous commit
    # left, and lands with a later commit.
    Mode("dv-async", one_shot=False, engine="deduplicate",
         options=COMPACTION | DELETION_VECTORS | {"lookup-wait": "false"}),
    # Dynamic buckets: 60 keys a partition, 20 a bucket, so commits open buckets and extend
    # HASH index files (killed half written), which expiry then deletes once replaced.
    Mode("dynamic-bucket", one_shot=False, engine="deduplicate",
         options=COMPACTION | EXPIRY | {"bucket": "-1", "dynamic-bucket.target-row-num": "20"}),
    Mode("changelog", one_shot=False, engine="deduplicate",
         options=INPUT_CHANGELOG | COMPACTION | {"write-buffer-size": "4 kb"}, calls=3, rows=150, keys=300),
    # ORC and Avro data files: level 0 in Avro, compaction rewrites into ORC, changelog files in
    # Avro (killed half written, as Parquet files are).
    Mode("file-formats", one_shot=False, engine="deduplicate",
         options=INPUT_CHANGELOG | COMPACTION | {"file.format": "orc", "file.format.per.level": "0:avro",
                                                 "changelog-file.format": "avro"}),
    # A flaky store under the hints: every commit must still be reported as landed (a sum shows
    # a write applied twice), and a kill between a hint's tries leaves a landed commit.
    Mode("hint-faults", one_shot=True, engine="aggregation", options=COMPACTION, hint_faults=True),
    # Postpone bucket: the lookup changelog comes with each postpone compaction.
    Mode("postpone", one_shot=False, engine="deduplicate",
         options=COMPACTION | {"bucket": "-2", "postpone.default-bucket-num": "2", "changelog-producer": "lookup"}),
    # Cross-partition upsert: each row's partition drawn afresh, so every commit moves keys (a -D
    # in the old bucket), some twice; restarted writers bootstrap the key index (spilled at 1 kb).
    Mode("cross-partition", one_shot=False, engine="deduplicate", cross_partition=True,
         options=COMPACTION | EXPIRY | {"bucket": "-1", "dynamic-bucket.target-row-num": "20",
                                        "lookup.cache-max-memory-size": "1 kb"}),
    # Data files under two external paths in turn (the bucket directories under data/ there),
    # killed half written; expiry deletes them there.
    Mode("external-paths", one_shot=False, engine="deduplicate",
         options=COMPACTION | EXPIRY | {"data-file.path-directory": "data",
                                        "data-file.external-paths.strategy": "round-robin",
                                        "data-file.external-paths": f"file://{WAREHOUSE}/external-1,"
                                                                    f"file://{WAREHOUSE}/external-2"}),
    # Bloom-filter and bitmap indexes of every data file written beside it (killed half
    # written), compacted and expired with their data files.
    Mode("file-index", one_shot=False, engine="deduplicate",
         options=COMPACTION | EXPIRY | {"file-index.bloom-filter.columns": "a", "file-index.bitmap.columns": "b",
                                        "file-index.in-manifest-threshold": "1 b"}),
)}


def create_table(warehouse: str, options: dict[str, str], primary_keys: Sequence[str] = KEY) -> cl.Table:
    """The table of a mode in ``warehouse`` (``{warehouse}`` in an option's value names it)."""
    options = {key: value.replace(WAREHOUSE, warehouse) for key, value in options.items()}
    return cl.Catalog(warehouse).create_table(TABLE_NAME, schema=SCHEMA, primary_keys=list(primary_keys),
                                              partition_keys=["p"], options=options)


def table_location(warehouse: str) -> str:
    return f"{warehouse}/db.db/t"


# -- rows of a commit -------------------------------------------------------------------------


def commit_rows(mode: Mode, seed: int, writer: int, index: int) -> list[list[Row]]:
    """The rows of commit ``index`` of ``writer``, one list per write() call. Row kinds are in
    "rowkind" (only for engines with deletes). Values are unique to the commit."""
    rng = random.Random(f"{seed}/{mode.name}/{writer}/{index}")
    base = (writer * 1_000_000 + index) * 10_000
    calls: list[list[Row]] = []
    serial = 0
    for _ in range(mode.calls):
        rows = []
        for _ in range(mode.rows):
            serial += 1
            # an append table keeps every row: each gets a key of its own, so rows stay tellable
            key = base + serial if mode.append else rng.randrange(mode.keys)
            row: Row = {"p": rng.choice(mode.partitions), "k": key,
                        "a": base + serial, "b": -(base + serial)}
            if mode.engine == "partial-update":
                row["a"] = row["a"] if rng.random() < 0.6 else None
                row["b"] = row["b"] if rng.random() < 0.6 else None
            if mode.deletes:
                row["rowkind"] = "-D" if rng.random() < 0.1 else "+I"
            rows.append(row)
        calls.append(rows)
    return calls


def to_arrow(rows: Sequence[Row]) -> pa.Table:
    data = pa.Table.from_pylist([{n: r[n] for n in SCHEMA.names} for r in rows], schema=SCHEMA)
    if rows and "rowkind" in rows[0]:
        data = data.append_column("rowkind", pa.array([r["rowkind"] for r in rows], pa.string()))
    return data


class Model:
    """What a table shows after a sequence of commits, folded row by row in commit order. With
    ``cross_partition`` the key is k alone: deduplicate moves it to each row's partition."""

    def __init__(self, engine: str, *, cross_partition: bool = False) -> None:
        self.engine = engine
        self.cross_partition = cross_partition
        self.rows: dict[Key, Row] = {}
        self.partition: dict[Key, str] = {}  # cross-partition: where each key lives
        self.moves = 0  # cross-partition: rows that moved a live key to the other partition

    def apply(self, rows: Iterable[Row]) -> None:
        for row in rows:
            key = ("", row["k"]) if self.cross_partition else (row["p"], row["k"])
            values = {"a": row["a"], "b": row["b"]}
            old = self.rows.get(key)
            if row.get("rowkind", "+I") == "-D":
                self.rows.pop(key, None)
            elif old is None or self.engine in ("deduplicate", APPEND):
                if self.cross_partition:
                    self.moves += old is not None and self.partition[key] != row["p"]
                    self.partition[key] = row["p"]
                self.rows[key] = values
            elif self.engine == "partial-update":
                old.update({n: v for n, v in values.items() if v is not None})
            elif self.engine == "aggregation":
                for n, v in values.items():
                    old[n] = v if old[n] is None else old[n] if v is None else old[n] + v
            # first-row: the first row of a key stays

    def view(self) -> dict[Key, Row]:
        """The rows by (partition, key), as a read shows them."""
        if self.cross_partition:
            return {(self.partition[k], k[1]): dict(v) for k, v in self.rows.items()}
        return {k: dict(v) for k, v in self.rows.items()}


def keyed(rows: Iterable[Row]) -> dict[Key, Row]:
    return {(r["p"], r["k"]): {"a": r["a"], "b": r["b"]} for r in rows}


@dataclass
class Diff:
    """Rows a read differs from the model by: keys missing, keys that should not be there,
    and keys with other values."""

    missing: int = 0
    extra: int = 0
    wrong: int = 0

    @staticmethod
    def of(want: dict[Key, Row], got: dict[Key, Row]) -> Diff:
        return Diff(len(want.keys() - got.keys()), len(got.keys() - want.keys()),
                    sum(1 for k in want.keys() & got.keys() if want[k] != got[k]))

    def add(self, other: Diff) -> None:
        self.missing += other.missing
        self.extra += other.extra
        self.wrong += other.wrong

    @property
    def total(self) -> int:
        return self.missing + self.extra + self.wrong


# -- the commit log ---------------------------------------------------------------------------


class Log:
    """A JSON-lines file of intents and results, each line fsynced before the code goes on."""

    def __init__(self, path: str) -> None:
        self.path = path

    def append(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def records(self) -> list[dict[str, Any]]:
        """Every complete line (a process killed mid-line leaves a torn last line: skipped)."""
        try:
            with open(self.path, encoding="utf-8") as source:
                lines = source.read().split("\n")
        except FileNotFoundError:
            return []
        records = []
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                if line:
                    records.append(json.loads(line))
        return records


# -- checks of a table ------------------------------------------------------------------------


def read_rows(table: cl.Table, snapshot_id: int | None = None) -> dict[Key, Row]:
    return keyed(scan_rows(table, snapshot_id))


def scan_rows(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    return table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def live_twice(rows: Iterable[Row], primary_keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """Primary keys that more than one row of a read has: live in two partitions (a
    cross-partition key whose move left it behind) or in two buckets of one."""
    counts = Counter(tuple(r[n] for n in primary_keys) for r in rows)
    return sorted(k for k, n in counts.items() if n > 1)


def changelog_rows(table: cl.Table, snap: cl.Snapshot) -> list[Row]:
    """The rows of a snapshot's changelog files (read through its changelog manifest list), each
    with its "rowkind"."""
    ctx = table.context
    if snap.changelog_manifest_list is None:
        return []
    rows: list[Row] = []
    for meta in live_files.manifest_list(ctx, snap.changelog_manifest_list):
        for entry in live_files.manifest_entries(ctx, meta.file_name):
            data = data_file.read(ctx.file_io, ctx.entry_path(entry), kv.file_schema(ctx.arrow_schema, ctx.key_names))
            kinds = [kv.ROW_KIND_SYMBOLS[k] for k in data.column(kv.VALUE_KIND).to_pylist()]
            rows += [{n: r[n] for n in SCHEMA.names} | {"rowkind": kind}
                     for r, kind in zip(data.select(SCHEMA.names).to_pylist(), kinds, strict=True)]
    return rows


def paimon_rows(pypaimon_address: str, warehouse: str, snapshot_id: int | None = None) -> dict[Key, Row]:
    """A snapshot (default the latest) as pypaimon reads it, asked of the pypaimon worker at
    ``pypaimon_address`` (each process connects for itself)."""
    options = {"scan.snapshot-id": str(snapshot_id)} if snapshot_id is not None else None
    with Pypaimon(pypaimon_address) as pypaimon:
        return keyed(pypaimon.read(warehouse, TABLE_NAME, options).to_pylist())


_HINTS = ("LATEST", "EARLIEST")


@dataclass
class FileCheck:
    """Files some snapshot references that are missing, and files no snapshot references."""

    missing: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)


def has_level0(table: cl.Table, snap: cl.Snapshot) -> bool:
    return any(e.file.level == 0 for e in live_files.live_entries(table.context, snap))


def has_postponed(table: cl.Table, snap: cl.Snapshot) -> bool:
    """Whether rows wait in bucket-postpone/ at ``snap`` (readers do not see them yet)."""
    return any(e.bucket == -2 for e in live_files.live_entries(table.context, snap))


def hides_commits(mode: Mode, table: cl.Table, snap: cl.Snapshot) -> bool:
    """Whether readers do not see every commit up to ``snap`` yet: level 0 that they skip, or
    rows waiting in bucket-postpone/."""
    return (mode.skips_level0 and has_level0(table, snap)) or (mode.postpones and has_postponed(table, snap))


def kept_changelogs(table: cl.Table) -> list[cl.Snapshot]:
    """The changelogs expired snapshots left under ``changelog/``, oldest first."""
    directory = Path(table.location) / "changelog"
    found = [cl.Snapshot.model_validate_json(p.read_text()) for p in directory.glob("changelog-*")]
    return sorted(found, key=lambda c: c.id)


def check_files(table: cl.Table, snapshots: Sequence[cl.Snapshot]) -> FileCheck:
    """Files the snapshots and kept changelogs need that are missing (their manifests, live
    data files, changelog files, and the files a kept APPEND changelog without producer added;
    a file a DELETE entry names is no longer needed, expiry may have deleted it), and files
    present that none of them names (orphans)."""
    ctx = table.context
    referenced: set[str] = set()
    needed: set[str] = set()
    missing: list[str] = []

    def entries(list_name: str) -> list[ManifestEntry]:
        referenced.add(ctx.paths.manifest(list_name))
        try:
            metas = live_files.manifest_list(ctx, list_name)
        except (OSError, cl.errors.ChangelakeError):
            missing.append(ctx.paths.manifest(list_name))
            return []
        found = []
        for meta in metas:
            referenced.add(ctx.paths.manifest(meta.file_name))
            try:
                found += live_files.manifest_entries(ctx, meta.file_name)
            except (OSError, cl.errors.ChangelakeError):
                missing.append(ctx.paths.manifest(meta.file_name))
        referenced.update(p for e in found for p in ctx.entry_paths(e))  # with their index files
        return found


    def paths(found: Sequence[ManifestEntry]) -> set[str]:
        return {p for e in found for p in ctx.entry_paths(e)}

    for snap in snapshots:
        if snap.index_manifest is not None:
            referenced.add(ctx.paths.manifest(snap.index_manifest))
            try:
                index_files = {deletion_vectors.index_path(ctx, e.file)
                               for e in deletion_vectors.index_entries(ctx, snap)}
            except (OSError, cl.errors.ChangelakeError):
                missing.append(ctx.paths.manifest(snap.index_manifest))
                index_files = set()
            referenced |= index_files
            needed |= index_files
        live = manifest.merge_entries([*entries(snap.base_manifest_list), *entries(snap.delta_manifest_list)])
        changelog = entries(snap.changelog_manifest_list) if snap.changelog_manifest_list else []
        needed |= paths([*live.values(), *changelog])
    for kept in kept_changelogs(table):
        if kept.changelog_manifest_list:
            needed |= paths(entries(kept.changelog_manifest_list))
        if os.path.exists(ctx.paths.manifest(kept.delta_manifest_list)):
            delta = entries(kept.delta_manifest_list)
            if kept.commit_kind == cl.CommitKind.APPEND:
                needed |= paths([e for e in delta if e.kind == manifest.FileKind.ADD])
            # the base list stays with its changelog (the older changelogs' expiry deleted the
            # manifests they shared)
            referenced.add(ctx.paths.manifest(kept.base_manifest_list))
            referenced.update(ctx.paths.manifest(m.file_name)
                              for m in live_files.manifest_list(ctx, kept.base_manifest_list))
    present: set[str] = set()
    external = external_paths.listed_roots(ctx.file_io, ctx.options)
    for directory, _, names in itertools.chain(os.walk(table.location), *map(os.walk, external)):
        for name in names:
            full = os.path.join(directory, name)
            if directory in (ctx.paths.schema_dir, ctx.paths.changelog_dir, ctx.paths.consumer_dir,
                             ctx.paths.tag_dir, f"{ctx.paths.root}/rollback") or (
                    directory == ctx.paths.snapshot_dir and (name in _HINTS or name.startswith("snapshot-"))) or (
                    os.path.dirname(directory) == ctx.paths.commit_user_dir and name.startswith("snapshot-")):
                continue  # metadata no snapshot names: schemas, changelogs, consumers, tags, records
            present.add(full)
    missing += sorted(p for p in needed if not os.path.exists(p))
    return FileCheck(missing=sorted(set(missing)), orphans=sorted(present - referenced))


# -- processes --------------------------------------------------------------------------------


HERE = str(Path(__file__).resolve().parent)


def process_context() -> multiprocessing.context.BaseContext:
    """Children fork from a server that imported changelake and pyarrow but never touched a
    table: each starts fresh, in milliseconds. (pypaimon runs in a worker process of its own,
    which children reach by its address: see paimon_rows.)"""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["workload", "crashtest", "soak"])
    # The server imports the preloaded modules before it applies the parent's sys.path (and
    # silently skips those it cannot import), so it gets this directory through PYTHONPATH.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, before) if p)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    return context
