"""Cross-partition upsert's key index of a table: every key's partition and bucket as of a
snapshot, loaded for a writer. The process keeps the newest index a writer bootstrapped or
committed (:data:`COMMITTED`); the next writer catches it up with the rows the APPEND snapshots
since added, reading only their files, or else bootstraps it from the live keys of the latest
snapshot (Paimon's ``IndexBootstrap``: every level, deletion vectors applied, only buckets with a
file younger than ``cross-partition-upsert.index-ttl`` when it is set, read
``cross-partition-upsert.bootstrap-parallelism`` splits at a time)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from changelake.errors import DataError, SnapshotNotFoundError
from changelake.table.commit import key_placement
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import kv
from changelake.table.format.manifest import FileKind, ManifestEntry
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.io.cache import ManifestCache
from changelake.table.read import deletion_vectors, live_files
from changelake.table.read.planner import Split, split_bucket
from changelake.table.read.reader import read_split
from changelake.table.write.assigners.key_index import (
    BUCKET_BITS,
    BUCKET_MASK,
    KeyIndex,
    fingerprint_order,
    fingerprints,
)


@dataclass
class KeyPlaces:
    """A table's key index as of snapshot ``base`` (0: the empty table), its partitions by id, and
    the keys in each bucket (to place new keys)."""

    index: KeyIndex
    base: int
    partitions: list[bytes] = field(default_factory=list)
    ids: dict[bytes, int] = field(default_factory=dict)
    counts: dict[int, dict[int, int]] = field(default_factory=dict)  # partition id -> bucket -> keys
    dirty: bool = False  # placed rows not landed yet

    def copy(self) -> KeyPlaces:
        return KeyPlaces(self.index.copy(), self.base, list(self.partitions), dict(self.ids),
                         {p: dict(c) for p, c in self.counts.items()}, self.dirty)

    def id_of(self, partition: bytes) -> int:
        found = self.ids.get(partition)
        if found is None:
            found = self.ids[partition] = len(self.partitions)
            self.partitions.append(partition)
        return found

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + 64 * sum(len(c) for c in self.counts.values())


@dataclass(frozen=True)
class _Cached:
    """A key index as of ``snapshot``; with ``prepared``, also a writer's data files and the
    index with its rows placed, which holds once those files land in the next APPEND snapshot."""

    snapshot: Snapshot
    state: KeyPlaces
    prepared: tuple[frozenset[str], KeyPlaces] | None = None


def _weigh(cached: object) -> int:
    if not isinstance(cached, _Cached):
        return 0
    return cached.state.nbytes + (0 if cached.prepared is None else cached.prepared[1].nbytes)


# By (filesystem, table paths): the newest key index a writer of this process bootstrapped or
# committed. The next writer (``table.write`` after ``table.write``, a Spark task of the next
# micro-batch in a reused Python worker) catches it up with the rows landed since, instead of
# reading every key of the table again.
COMMITTED = ManifestCache(max_files=8, max_bytes=1024 * 1024 * 1024, weigh=_weigh)


def remember(ctx: TableContext, snapshot: Snapshot, state: KeyPlaces) -> None:
    """Keep ``state`` as the process's index of the table as of ``snapshot``."""
    COMMITTED.put((ctx.file_io.protocol, ctx.paths), _Cached(snapshot, state.copy()))

def remember_prepared(ctx: TableContext, state: KeyPlaces, files: Sequence[str]) -> None:
    """Keep ``state`` (the index this process cached, with a writer's rows placed) for when the
    data files ``files`` land: a writer that never learns they did (a Spark task: the driver
    commits) leaves the next one in this process (the next micro-batch's task) its placements,
    so that it does not read those files again."""
    key = (ctx.file_io.protocol, ctx.paths)
    cached = COMMITTED.peek(key)
    if files and isinstance(cached, _Cached) and cached.snapshot.id == state.base:
        COMMITTED.put(key, dataclasses.replace(cached, prepared=(frozenset(files), state.copy())))


def load(ctx: TableContext) -> KeyPlaces:
    """The key index of the latest snapshot: the one this process holds, caught up with the
    rows landed since, or read from the table's live keys."""
    latest = ctx.latest_snapshot()
    if latest is None:
        return empty(ctx)
    cached = COMMITTED.peek((ctx.file_io.protocol, ctx.paths))
    state = _caught_up(ctx, cached, latest) if isinstance(cached, _Cached) else None
    if state is None:
        state = _bootstrap(ctx, latest)
    remember(ctx, latest, state)
    return state

def empty(ctx: TableContext) -> KeyPlaces:
    """The index of no key: a new table's, or of the partitions an overwrite replaces."""
    return KeyPlaces(_empty(ctx), 0)

def stale(ctx: TableContext, state: KeyPlaces) -> bool:
    """Whether rows landed after the state's snapshot (compactions move no key), or the
    table was rolled back before it."""
    latest = ctx.latest_snapshot()
    if (latest.id if latest is not None else 0) < state.base:
        return True
    # Nothing of this writer's is pending: any rows since are another writer's.
    return key_placement.rows_landed(ctx, state.base, latest) is not None

def _caught_up(ctx: TableContext, cached: _Cached, latest: Snapshot) -> KeyPlaces | None:
    """The cached index moved to ``latest`` by the rows the APPEND snapshots since added
    (None when that cannot be: the cached snapshot is not the table's any more, one since
    expired, or an OVERWRITE replaced rows). A key goes where its newest row of a bucket is
    an insert; deletes move nothing, as in Paimon's index."""
    files: list[tuple[int, ManifestEntry]] = []
    start = cached.state
    appends = 0
    try:
        if cached.snapshot.id > latest.id or ctx.snapshot(cached.snapshot.id) != cached.snapshot:
            return None
        for position, snapshot_id in enumerate(range(cached.snapshot.id + 1, latest.id + 1)):
            landed = latest if snapshot_id == latest.id else ctx.snapshot(snapshot_id)
            if landed.commit_kind is CommitKind.COMPACT:
                continue
            if landed.commit_kind is not CommitKind.APPEND:
                return None
            added = [e for meta in live_files.manifest_list(ctx, landed.delta_manifest_list)
                     for e in live_files.manifest_entries(ctx, meta.file_name) if e.kind is FileKind.ADD]
            appends += 1
            if appends == 1 and cached.prepared is not None:
                mine, placed = cached.prepared
                if mine <= {e.file.file_name for e in added}:
                    # The prepared files landed first: their rows are placed in ``placed``
                    # already; only other writers' files of the snapshot are read.
                    start = placed
                    added = [e for e in added if e.file.file_name not in mine]
            files += [(position, e) for e in added]
    except SnapshotNotFoundError:
        return None
    state = start.copy()
    state.base = latest.id
    state.dirty = False
    if files:
        _apply(ctx, state, files)
    return state

def _apply(ctx: TableContext, state: KeyPlaces, files: Sequence[tuple[int, ManifestEntry]]) -> None:
    """Move every key whose newest row in a bucket of ``files`` is an insert there."""
    columns = [*ctx.primary_keys, kv.SEQUENCE, kv.VALUE_KIND]

    def read(item: tuple[int, ManifestEntry]) -> tuple[np.ndarray, ...]:
        position, e = item
        rows = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file, columns)
        hi, lo = fingerprints([rows.column(k) for k in ctx.primary_keys])
        code = (state.id_of(e.partition) << BUCKET_BITS) | e.bucket
        n = rows.num_rows
        return (hi, lo, np.full(n, code, dtype=np.int64), rows.column(kv.SEQUENCE).to_numpy(),
                rows.column(kv.VALUE_KIND).to_numpy(), np.full(n, position, dtype=np.int64))

    for entry in files:  # partition ids before the parallel reads
        state.id_of(entry[1].partition)
    hi, lo, code, sequence, kind, position = (np.concatenate(c) for c in zip(*map_all(read, files), strict=True))
    # A key's newest row in each bucket ...
    order = np.lexsort((sequence, code, lo, hi))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (hi[order][1:] != hi[order][:-1]) | (lo[order][1:] != lo[order][:-1]) | \
        (code[order][1:] != code[order][:-1])
    newest = order[last]
    newest = newest[np.isin(kind[newest], (kv.INSERT, kv.UPDATE_AFTER))]
    # ... and of those inserts the one of the newest snapshot.
    order = np.lexsort((position[newest], lo[newest], hi[newest]))
    picked = newest[order]
    last = np.ones(len(picked), dtype=bool)
    last[:-1] = (hi[picked][1:] != hi[picked][:-1]) | (lo[picked][1:] != lo[picked][:-1])
    picked = picked[last]
    old = state.index.lookup(hi[picked], lo[picked], int(time.time() * 1000))
    moved = old != code[picked]
    count(state, old[moved][old[moved] >= 0], -1)
    count(state, code[picked][moved], 1)
    state.index.put(hi[picked][moved], lo[picked][moved], code[picked][moved], int(time.time() * 1000))

def _empty(ctx: TableContext) -> KeyIndex:
    options = ctx.options
    return KeyIndex(memory_budget=options.lookup_cache_max_memory_size,
                    ttl_ms=options.cross_partition_upsert_index_ttl)

def _bootstrap(ctx: TableContext, snapshot: Snapshot) -> KeyPlaces:
    """Every live key of the snapshot with its partition and bucket (Paimon's ``IndexBootstrap``)."""
    snapshot_id = snapshot.id
    state = KeyPlaces(_empty(ctx), snapshot_id)
    entries = live_files.live_entries(ctx, snapshot)
    # Every level, each file minus its deletion vector (with vectors, rows a later file
    # replaced are marked there and may have no retraction left to merge with).
    vectors = deletion_vectors.snapshot_vectors(ctx, snapshot) if ctx.options.deletion_vectors_enabled else {}
    ttl = ctx.options.cross_partition_upsert_index_ttl
    now = int(time.time() * 1000)
    splits = []
    for (partition, bucket_id), files in sorted(live_files.files_by_bucket(entries).items()):
        if ttl is not None and all((f.creation_time_ms or 0) + ttl < now for f in files):
            continue
        bucket_dir = ctx.bucket_dir(partition, bucket_id)
        found = deletion_vectors.deletion_files(ctx, vectors.get((partition, bucket_id), ()))
        splits += [Split(partition, bucket_id, bucket_dir, tuple(group), raw,
                         tuple(found.get(f.file_name) for f in group))
                   for group, raw in split_bucket(ctx, files)]

    def keys(split: Split) -> tuple[np.ndarray, np.ndarray]:
        rows = read_split(ctx, split, ctx.primary_keys, None)
        return fingerprints([rows.column(k) for k in ctx.primary_keys])

    step = ctx.options.cross_partition_upsert_bootstrap_parallelism
    his, los, codes = [], [], []
    for start in range(0, len(splits), step):
        chunk = splits[start:start + step]
        for split, (hi, lo) in zip(chunk, map_all(keys, chunk), strict=True):
            part = state.id_of(split.partition)
            his.append(hi)
            los.append(lo)
            codes.append(np.full(len(hi), (part << BUCKET_BITS) | split.bucket, dtype=np.int64))
            bucket_counts = state.counts.setdefault(part, {})
            bucket_counts[split.bucket] = bucket_counts.get(split.bucket, 0) + len(hi)
    if his:
        hi, lo, code = np.concatenate(his), np.concatenate(los), np.concatenate(codes)
        twice = _first_duplicate(hi, lo)
        if twice is not None:
            a, b = (f"{ctx.describe_partition(state.partitions[c >> BUCKET_BITS])} bucket {c & BUCKET_MASK}"
                    for c in (code[twice[0]], code[twice[1]]))
            raise DataError(f"a key is live in {a} and in {b} of snapshot {snapshot_id}: two writers wrote the "
                            "table at once (Paimon supports one writer job); rewrite one of the rows",
                            table=ctx.name)
        state.index.put(hi, lo, code, now)
    return state


def count(state: KeyPlaces, codes: np.ndarray, step: int) -> None:
    """Add ``step`` to the key count of every (partition, bucket) code, once per occurrence."""
    distinct, times = np.unique(codes, return_counts=True)
    for code, n in zip(distinct.tolist(), times.tolist(), strict=True):
        bucket_counts = state.counts.setdefault(code >> BUCKET_BITS, {})
        bucket_counts[code & BUCKET_MASK] = bucket_counts.get(code & BUCKET_MASK, 0) + step * n


def _first_duplicate(hi: np.ndarray, lo: np.ndarray) -> tuple[int, int] | None:
    """Two rows with one fingerprint, if any."""
    order = fingerprint_order(hi, lo)
    same = (hi[order][1:] == hi[order][:-1]) & (lo[order][1:] == lo[order][:-1])
    if not same.any():
        return None
    at = int(np.flatnonzero(same)[0])
    return int(order[at]), int(order[at + 1])
