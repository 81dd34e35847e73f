"""Cross-partition upsert: a primary key without every partition column (``bucket = -1``), as
Paimon's ``GlobalIndexAssigner``. A key lives in one partition of the table; a key index (see
:mod:`.key_index`) says which partition and bucket, bootstrapped from the live keys of the latest
snapshot (only of buckets with a file younger than ``cross-partition-upsert.index-ttl``, when it
is set, read ``cross-partition-upsert.bootstrap-parallelism`` splits at a time) and extended by
every row written.

A row whose key the index places in its own partition goes to that bucket; a new key goes to the
first bucket of its partition holding fewer than ``dynamic-bucket.target-row-num`` keys, else to
a new one (Paimon's ``BucketAssigner``: lowest ids first; with N assigners, assigner ``a`` fills
buckets ``b % N == a``). A row of a key that lives in another partition goes by the merge
engine, as Paimon's ``ExistingProcessor``s: deduplicate deletes the key there (a -D of the row
with the old partition, in the old bucket) and writes it in the new partition; partial-update
and aggregation write the row into the old partition and bucket (the key stays); first-row
drops the row. A writer writes no HASH index files in this mode (Paimon writes none either).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError, OptionError, SnapshotNotFoundError
from changelake.option_values import MergeEngineKind
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import binary_row, bucket, kv
from changelake.table.format.manifest import FileKind, ManifestEntry
from changelake.table.format.snapshot import CommitKind, Snapshot
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
from changelake.table.write.partitions import partition_groups

# Paimon's bucket ids are Java shorts in this mode too.
MAX_BUCKETS = 32768


@dataclass
class _State:
    """The key index of a snapshot (``base``) and what it needs to place new keys."""

    index: KeyIndex
    base: int
    partitions: list[bytes] = field(default_factory=list)
    ids: dict[bytes, int] = field(default_factory=dict)
    counts: dict[int, dict[int, int]] = field(default_factory=dict)  # partition id -> bucket -> keys
    dirty: bool = False  # placed rows not landed yet

    def copy(self) -> _State:
        return _State(self.index.copy(), self.base, list(self.partitions), dict(self.ids),
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
    """A key index as of ``snapshot``."""

    snapshot: Snapshot
    state: _State


def _weigh(cached: object) -> int:
    return cached.state.nbytes if isinstance(cached, _Cached) else 0


# By (filesystem, table paths): the newest key index a writer of this process bootstrapped or
# committed. The next writer (``table.write`` after ``table.write``, a Spark task of the next
# micro-batch in a reused Python worker) catches it up with the rows landed since, instead of
# reading every key of the table again.
COMMITTED = live_files.ManifestCache(max_files=8, max_bytes=1024 * 1024 * 1024, weigh=_weigh)


@dataclass(frozen=True)
class _Batch:
    """A flush's rows sorted by key (each key's rows in input order, ``order`` the input row of
    each): fingerprints, partition ids and assigners, where each key starts, and the time."""

    order: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    part: np.ndarray
    owner: np.ndarray
    key_start: np.ndarray
    key_of_row: np.ndarray
    firsts: np.ndarray
    now: int


class CrossPartitionBuckets:
    """Places each key in the one partition and bucket it lives in, moving, keeping or dropping
    the rows of keys that live in another partition by the merge engine."""

    def __init__(self, ctx: TableContext) -> None:
        options = ctx.options
        self.ctx = ctx
        self.target = options.dynamic_bucket_target_row_num
        # Paimon's cross-partition sink runs max(initial-buckets, assigner-parallelism) assigners.
        self.assigners = max(options.dynamic_bucket_initial_buckets or 1,
                             options.dynamic_bucket_assigner_parallelism or 1)
        self._state: _State | None = None
        self._placed: tuple[pa.Table, np.ndarray] | None = None

    # -- the writer's calls --------------------------------------------------------------

    def relocate(self, data: pa.Table, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        state = self._state
        if state is None or (not state.dirty and self._stale(state)):
            # Another writer's rows landed since: nothing of this writer's is pending, so it
            # starts from the table as it is (with rows pending, its commit will be void).
            state = self._state = self._load()
        state.dirty = True
        batch = self._batch(state, data)
        existing = state.index.lookup(batch.hi[batch.firsts], batch.lo[batch.firsts], batch.now)
        engine = self.ctx.options.merge_engine
        if engine is MergeEngineKind.DEDUPLICATE:
            rows, out_kinds, buckets = self._move(state, batch, data, kinds, existing)
        else:
            rows, out_kinds, buckets = self._keep(state, batch, data, kinds, existing,
                                                  drop=engine is MergeEngineKind.FIRST_ROW)
        self._placed = (rows, buckets)
        return rows, out_kinds

    def _batch(self, state: _State, data: pa.Table) -> _Batch:
        groups = partition_groups(self.ctx, data)
        part = np.array([state.id_of(p) for p in groups.partitions], dtype=np.int64)[groups.codes] \
            if data.num_rows else np.zeros(0, dtype=np.int64)
        keys = [data.column(k) for k in self.ctx.primary_keys]
        hi, lo = fingerprints(keys)
        order = fingerprint_order(hi, lo, stable=True)
        s_hi, s_lo = hi[order], lo[order]
        key_start = np.ones(len(order), dtype=bool)
        key_start[1:] = (s_hi[1:] != s_hi[:-1]) | (s_lo[1:] != s_lo[:-1])
        return _Batch(order, s_hi, s_lo, part[order], self.route(keys)[order], key_start,
                      np.cumsum(key_start) - 1, np.flatnonzero(key_start), int(time.time() * 1000))

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        """The buckets :meth:`relocate` chose for the rows it returned (``data``)."""
        if self._placed is None or self._placed[0] is not data:
            raise RuntimeError("cross-partition rows must be relocated before they are assigned")  # a caller bug
        buckets = self._placed[1]
        self._placed = None
        return buckets

    def route(self, key_columns: Sequence[pa.Array]) -> np.ndarray:
        """The assigner of every key (all primary-key columns, so that its rows of any partition
        meet in one task): ``abs(hash % N)`` of Paimon's assigners."""
        hashes = bucket.hash_rows(binary_row.encode(list(key_columns))).astype(np.int64)
        return np.abs(np.fmod(hashes, self.assigners))

    def prepare(self, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        if self._state is None:
            return list(messages)
        return [dataclasses.replace(m, key_base=self._state.base) for m in messages]

    def landed(self, snapshot: Snapshot) -> None:
        if self._state is None:
            return
        self._state.base = snapshot.id
        self._state.dirty = False
        self._remember(snapshot, self._state)

    def forget(self) -> None:
        self._state = None
        self._placed = None

    def checkpoint(self) -> object:
        return None if self._state is None else self._state.copy()

    def restore(self, checkpoint: object) -> None:
        self._state = checkpoint if isinstance(checkpoint, _State) else None
        self._placed = None

    # -- placing rows --------------------------------------------------------------------

    def _keep(self, state: _State, batch: _Batch, data: pa.Table, kinds: np.ndarray, existing: np.ndarray, *,
              drop: bool) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """Partial-update and aggregation (every row of a key goes where the key lives) and
        first-row (rows of another partition than the key's are dropped)."""
        firsts = batch.firsts
        new = np.flatnonzero(existing < 0)
        part = np.where(existing < 0, batch.part[firsts], existing >> BUCKET_BITS)
        buckets = existing & BUCKET_MASK
        arrival = new[np.argsort(batch.order[firsts[new]], kind="stable")]
        buckets[arrival] = self._new_buckets(state, part[arrival], batch.owner[firsts[arrival]])
        state.index.put(batch.hi[firsts[new]], batch.lo[firsts[new]], (part[new] << BUCKET_BITS) | buckets[new],
                        batch.now)
        row_part = np.empty(data.num_rows, dtype=np.int64)
        row_bucket = np.empty(data.num_rows, dtype=np.int64)
        own_part = np.empty(data.num_rows, dtype=np.int64)
        row_part[batch.order] = part[batch.key_of_row]
        row_bucket[batch.order] = buckets[batch.key_of_row]
        own_part[batch.order] = batch.part
        moved = own_part != row_part
        if drop:
            keep = ~moved
            return data.filter(pa.array(keep)), kinds[keep], row_bucket[keep]
        return self._with_partitions(state, data, moved, row_part), kinds, row_bucket

    def _move(self, state: _State, batch: _Batch, data: pa.Table, kinds: np.ndarray,
              existing: np.ndarray) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """Deduplicate: a key's rows in another partition than the key's delete it there first.
        A key's consecutive rows of one partition make a run; each run after the key's first,
        and a first run in another partition than the index says, starts with a -D of the
        run's first row in the previous run's partition and bucket, and opens the key in a new
        bucket of its own partition."""
        n = data.num_rows
        run_start = batch.key_start.copy()
        run_start[1:] |= batch.part[1:] != batch.part[:-1]
        runs = np.flatnonzero(run_start)
        run_part = batch.part[runs]
        first_run = batch.key_start[runs]
        known = existing[batch.key_of_row[runs]]
        stays = first_run & (known >= 0) & ((known >> BUCKET_BITS) == run_part)
        moves = ~first_run | ((known >= 0) & ~stays)
        if moves.any() and self.ctx.merge_engine.ignore_delete:
            run = runs[np.flatnonzero(moves)[0]]
            key = {k: data.column(k)[int(batch.order[run])].as_py() for k in self.ctx.primary_keys}
            to = self.ctx.describe_partition(state.partitions[batch.part[run]])
            raise DataError(f"key {key} would move to {to} "
                            "from another partition, but ignore-delete drops the delete that moves it (the key "
                            "would be in two partitions): write it in the partition it has, or unset "
                            "ignore-delete", table=self.ctx.name)
        # A key leaving a bucket frees a place there (Paimon's decrement): the index's places
        # before new keys are placed, those placed in this batch after.
        self._decrement(state, known[first_run & moves])
        run_bucket = np.where(stays, known & BUCKET_MASK, -1)
        fresh = np.flatnonzero(~stays)
        arrival = fresh[np.argsort(batch.order[runs[fresh]], kind="stable")]
        run_bucket[arrival] = self._new_buckets(state, run_part[arrival], batch.owner[runs[arrival]])
        run_code = (run_part << BUCKET_BITS) | run_bucket
        prev_code = known.copy()
        later = np.flatnonzero(~first_run)
        prev_code[later] = run_code[later - 1]
        self._decrement(state, prev_code[later])
        # Each key's last run is where it lives now.
        key_end = np.append(batch.key_start[1:], True)
        final = np.flatnonzero(key_end[np.append(runs[1:], len(batch.order)) - 1])
        changed = final[run_code[final] != known[final]]
        state.index.put(batch.hi[runs[changed]], batch.lo[runs[changed]], run_code[changed], batch.now)
        row_bucket = np.empty(n, dtype=np.int64)
        row_bucket[batch.order] = run_bucket[np.cumsum(run_start) - 1]
        movers = np.flatnonzero(moves)
        if not len(movers):
            return data, kinds, row_bucket
        source = batch.order[runs[movers]]
        # Every -D goes right before the row it came from.
        slots = np.argsort(np.concatenate([2 * np.arange(n) + 1, 2 * source]), kind="stable")
        rows_out = data.take(pa.array(np.concatenate([np.arange(n), source])[slots]))
        deleted = slots >= n
        target = np.concatenate([np.full(n, -1, dtype=np.int64), prev_code[movers] >> BUCKET_BITS])[slots]
        out_kinds = np.concatenate([kinds, np.full(len(movers), kv.DELETE, dtype=kinds.dtype)])[slots]
        out_buckets = np.concatenate([row_bucket, prev_code[movers] & BUCKET_MASK])[slots]
        return self._with_partitions(state, rows_out, deleted, target), out_kinds, out_buckets

    @staticmethod
    def _decrement(state: _State, codes: np.ndarray) -> None:
        _count(state, codes[codes >= 0], -1)

    def _with_partitions(self, state: _State, data: pa.Table, mask: np.ndarray, target: np.ndarray) -> pa.Table:
        """``data`` with the partition columns of the rows in ``mask`` set to their ``target``
        partition (an id of the state's)."""
        if not mask.any():
            return data
        ids, local = np.unique(target[mask], return_inverse=True)
        values = [self.ctx.partition_values(state.partitions[p]) for p in ids.tolist()]
        picks = np.zeros(data.num_rows, dtype=np.int64)
        picks[mask] = local
        columns = list(data.columns)
        names = data.column_names
        for i, name in enumerate(self.ctx.partition_keys):
            kind = self.ctx.arrow_schema.field(name).type
            replacement = pa.array([v[i] for v in values], type=kind).take(pa.array(picks))
            at = names.index(name)
            columns[at] = pc.if_else(pa.array(mask), replacement, data.column(at))
        return pa.Table.from_arrays(columns, schema=data.schema)

    def _new_buckets(self, state: _State, parts: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """Buckets for new placements (in arrival order) in ``parts``, each by its owner:
        Paimon's ``BucketAssigner.assignBucket`` (the lowest owned bucket with room, else the
        lowest owned id not in use), counted as they are placed."""
        out = np.empty(len(parts), dtype=np.int64)
        if not len(parts):
            return out
        groups = parts * self.assigners + owners
        for code in np.unique(groups).tolist():
            mine = np.flatnonzero(groups == code)
            out[mine] = self._fill(state, code // self.assigners, code % self.assigners, len(mine))
        return out

    def _fill(self, state: _State, part: int, owner: int, count: int) -> np.ndarray:
        counts = state.counts.setdefault(part, {})
        n = self.assigners
        room = [(b, self.target - c) for b, c in sorted(counts.items()) if b % n == owner and c < self.target]
        spare = count - sum(r for _, r in room)
        candidate = owner
        while spare > 0:
            if candidate >= MAX_BUCKETS:
                raise OptionError(f"{self.ctx.describe_partition(state.partitions[part])} needs more than "
                                  f"{MAX_BUCKETS} buckets of dynamic-bucket.target-row-num={self.target} keys",
                                  table=self.ctx.name, option="dynamic-bucket.target-row-num")
            if candidate not in counts:
                room.append((candidate, self.target))
                spare -= self.target
            candidate += n
        room.sort()
        ends = np.cumsum([r for _, r in room])
        slots = np.array([b for b, _ in room], dtype=np.int64)
        out = slots[np.searchsorted(ends, np.arange(count), side="right")]
        used, times = np.unique(out, return_counts=True)
        for b, k in zip(used.tolist(), times.tolist(), strict=True):
            counts[b] = counts.get(b, 0) + k
        return out

    # -- the index of the table ----------------------------------------------------------

    def _remember(self, snapshot: Snapshot, state: _State) -> None:
        COMMITTED.put((self.ctx.file_io.protocol, self.ctx.paths), _Cached(snapshot, state.copy()))

    def _load(self) -> _State:
        """The key index of the latest snapshot: the one this process holds, caught up with the
        rows landed since, or read from the table's live keys."""
        latest = self.ctx.latest_snapshot()
        if latest is None:
            return _State(self._empty(), 0)
        cached = COMMITTED.peek((self.ctx.file_io.protocol, self.ctx.paths))
        state = self._caught_up(cached, latest) if isinstance(cached, _Cached) else None
        if state is None:
            state = self._bootstrap(latest)
        self._remember(latest, state)
        return state

    def _stale(self, state: _State) -> bool:
        """Whether rows landed after the state's snapshot (compactions move no key), or the
        table was rolled back before it."""
        latest = self.ctx.latest_snapshot()
        if (latest.id if latest is not None else 0) < state.base:
            return True
        for snapshot_id in range(state.base + 1, (latest.id if latest is not None else 0) + 1):
            try:
                if self.ctx.snapshot(snapshot_id).commit_kind is not CommitKind.COMPACT:
                    return True
            except SnapshotNotFoundError:
                return True
        return False

    def _caught_up(self, cached: _Cached, latest: Snapshot) -> _State | None:
        """The cached index moved to ``latest`` by the rows the APPEND snapshots since added
        (None when that cannot be: the cached snapshot is not the table's any more, one since
        expired, or an OVERWRITE replaced rows). A key goes where its newest row of a bucket is
        an insert; deletes move nothing, as in Paimon's index."""
        ctx = self.ctx
        files: list[tuple[int, ManifestEntry]] = []
        try:
            if cached.snapshot.id > latest.id or ctx.snapshot(cached.snapshot.id) != cached.snapshot:
                return None
            for position, snapshot_id in enumerate(range(cached.snapshot.id + 1, latest.id + 1)):
                landed = latest if snapshot_id == latest.id else ctx.snapshot(snapshot_id)
                if landed.commit_kind is CommitKind.COMPACT:
                    continue
                if landed.commit_kind is not CommitKind.APPEND:
                    return None
                files += [(position, e) for meta in live_files.manifest_list(ctx, landed.delta_manifest_list)
                          for e in live_files.manifest_entries(ctx, meta.file_name) if e.kind is FileKind.ADD]
        except SnapshotNotFoundError:
            return None
        state = cached.state.copy()
        state.base = latest.id
        if files:
            self._apply(state, files)
        return state

    def _apply(self, state: _State, files: Sequence[tuple[int, ManifestEntry]]) -> None:
        """Move every key whose newest row in a bucket of ``files`` is an insert there."""
        ctx = self.ctx
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
        self._decrement(state, old[moved])
        _count(state, code[picked][moved], 1)
        state.index.put(hi[picked][moved], lo[picked][moved], code[picked][moved], int(time.time() * 1000))

    def _empty(self) -> KeyIndex:
        options = self.ctx.options
        return KeyIndex(memory_budget=options.lookup_cache_max_memory_size,
                        ttl_ms=options.cross_partition_upsert_index_ttl)

    def _bootstrap(self, snapshot: Snapshot) -> _State:
        """Every live key of the snapshot with its partition and bucket (Paimon's ``IndexBootstrap``)."""
        ctx = self.ctx
        snapshot_id = snapshot.id
        state = _State(self._empty(), snapshot_id)
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


def _count(state: _State, codes: np.ndarray, step: int) -> None:
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
