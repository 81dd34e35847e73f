"""Cross-partition upsert: a primary key without every partition column (``bucket = -1``), as
Paimon's ``GlobalIndexAssigner``. A key lives in one partition of the table; a key index says
which partition and bucket (:mod:`.key_index` holds it, :mod:`.key_places` loads it for a
writer), and every row written extends it.

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
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import DataError, OptionError
from changelake.option_values import MergeEngineKind
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import binary_row, bucket, kv
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.write.assigners import key_places
from changelake.table.write.assigners.key_index import (
    BUCKET_BITS,
    BUCKET_MASK,
    fingerprint_order,
    row_fingerprints,
)
from changelake.table.write.assigners.key_places import KeyPlaces
from changelake.table.write.partitions import partition_groups

# Paimon's bucket ids are Java shorts in this mode too.
MAX_BUCKETS = 32768
# Rounds of placing a batch's new keys again with the places its own moves free.
_PLACING_ROUNDS = 4


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

    def __init__(self, ctx: TableContext, *, fresh: bool = False) -> None:
        """``fresh``: place keys as in an empty table (an overwrite's rows, whose partitions
        start empty; keys of the partitions it keeps are refused apart), never reloading the
        table's index."""
        options = ctx.options
        self.ctx = ctx
        self.target = options.dynamic_bucket_target_row_num
        # Paimon's cross-partition sink runs max(initial-buckets, assigner-parallelism) assigners.
        self.assigners = max(options.dynamic_bucket_initial_buckets or 1,
                             options.dynamic_bucket_assigner_parallelism or 1)
        self._fresh = fresh
        self._state: KeyPlaces | None = key_places.empty(ctx) if fresh else None
        self._placed: tuple[pa.Table, np.ndarray] | None = None

    # -- the writer's calls --------------------------------------------------------------

    def relocate(self, data: pa.Table, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        state = self._state
        if state is None or (not state.dirty and not self._fresh and key_places.stale(self.ctx, state)):
            # Another writer's rows landed since: nothing of this writer's is pending, so it
            # starts from the table as it is (with rows pending, its commit will be void).
            state = self._state = key_places.load(self.ctx)
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

    def _batch(self, state: KeyPlaces, data: pa.Table) -> _Batch:
        groups = partition_groups(self.ctx, data)
        part = np.array([state.id_of(p) for p in groups.partitions], dtype=np.int64)[groups.codes] \
            if data.num_rows else np.zeros(0, dtype=np.int64)
        # The key rows are encoded once, for their fingerprints and their assigners' hashes.
        encoded = binary_row.encode([data.column(k) for k in self.ctx.primary_keys])
        hi, lo = row_fingerprints(encoded)
        order = fingerprint_order(hi, lo, stable=True)
        s_hi, s_lo = hi[order], lo[order]
        key_start = np.ones(len(order), dtype=bool)
        key_start[1:] = (s_hi[1:] != s_hi[:-1]) | (s_lo[1:] != s_lo[:-1])
        return _Batch(order, s_hi, s_lo, part[order], self._owner(encoded)[order], key_start,
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
        return self._owner(binary_row.encode(list(key_columns)))

    def _owner(self, keys: binary_row.EncodedRows) -> np.ndarray:
        return np.abs(np.fmod(bucket.hash_rows(keys).astype(np.int64), self.assigners))

    def prepare(self, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        if self._state is None:
            return list(messages)
        key_places.remember_prepared(self.ctx, self._state, [f.file_name for m in messages for f in m.new_files])
        return [dataclasses.replace(m, key_base=self._state.base) for m in messages]

    def landed(self, snapshot: Snapshot) -> None:
        # The index holds as of the APPEND snapshot with the placed rows (the commit check made
        # sure no other writer's rows landed before it), not of a COMPACT snapshot after it:
        # other writers' rows may land in between, and the next writer's staleness check and
        # commit check start from the index's snapshot. Compactions alone move no key.
        if self._state is None or snapshot.commit_kind is not CommitKind.APPEND:
            return
        self._state.base = snapshot.id
        self._state.dirty = False
        key_places.remember(self.ctx, snapshot, self._state)

    def forget(self) -> None:
        self._state = None
        self._placed = None

    def checkpoint(self) -> object:
        return None if self._state is None else self._state.copy()

    def restore(self, checkpoint: object) -> None:
        self._state = checkpoint if isinstance(checkpoint, KeyPlaces) else None
        self._placed = None

    # -- placing rows --------------------------------------------------------------------

    def _keep(self, state: KeyPlaces, batch: _Batch, data: pa.Table, kinds: np.ndarray, existing: np.ndarray, *,
              drop: bool) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """Partial-update and aggregation (every row of a key goes where the key lives) and
        first-row (rows of another partition than the key's are dropped)."""
        firsts = batch.firsts
        new = np.flatnonzero(existing < 0)
        part = np.where(existing < 0, batch.part[firsts], existing >> BUCKET_BITS)
        buckets = existing & BUCKET_MASK
        buckets[new] = self._new_buckets(state, part[new], batch.owner[firsts[new]], batch.order[firsts[new]])
        key_places.count(state, (part[new] << BUCKET_BITS) | buckets[new], 1)
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

    def _move(self, state: KeyPlaces, batch: _Batch, data: pa.Table, kinds: np.ndarray,
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
        # A key leaving a bucket frees a place there from its row on (Paimon's decrement, row by
        # row). The places of keys placed in this batch are known once placed: placed again
        # with them until nothing changes (a key moving twice in one batch is rare).
        time = batch.order[runs]
        left_index = first_run & moves
        run_bucket = np.where(stays, known & BUCKET_MASK, -1)
        fresh = np.flatnonzero(~stays)
        later = np.flatnonzero(~first_run)
        prev_code = known.copy()
        freed = known[left_index], time[left_index]
        for _ in range(_PLACING_ROUNDS):
            placed = self._new_buckets(state, run_part[fresh], batch.owner[runs[fresh]], time[fresh], freed)
            settled = bool((run_bucket[fresh] == placed).all())
            run_bucket[fresh] = placed
            run_code = (run_part << BUCKET_BITS) | run_bucket
            prev_code[later] = run_code[later - 1]
            freed = (np.concatenate([known[left_index], prev_code[later]]),
                     np.concatenate([time[left_index], time[later]]))
            if settled or not len(later):
                break
        key_places.count(state, run_code[fresh], 1)
        self._decrement(state, freed[0])
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
    def _decrement(state: KeyPlaces, codes: np.ndarray) -> None:
        key_places.count(state, codes[codes >= 0], -1)

    def _with_partitions(self, state: KeyPlaces, data: pa.Table, mask: np.ndarray, target: np.ndarray) -> pa.Table:
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

    def _new_buckets(self, state: KeyPlaces, parts: np.ndarray, owners: np.ndarray, times: np.ndarray,
                     freed: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """Buckets for new placements in ``parts`` at row positions ``times``, each by its
        owner, as Paimon's ``BucketAssigner.assignBucket`` places them one row after another
        (the lowest owned bucket with room, else the lowest owned id not in use), where
        ``freed`` (codes, times) are the places keys leave from those rows on. Counts nothing."""
        out = np.empty(len(parts), dtype=np.int64)
        n = self.assigners
        codes, when = freed if freed is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        freed_groups = (codes >> BUCKET_BITS) * n + (codes & BUCKET_MASK) % n
        groups = parts * n + owners
        for code in np.unique(groups).tolist():
            mine = np.flatnonzero(groups == code)
            hit = freed_groups == code
            out[mine] = self._fill(state, code // n, code % n, times[mine], codes[hit] & BUCKET_MASK, when[hit])
        return out

    def _fill(self, state: KeyPlaces, part: int, owner: int, times: np.ndarray, freed_buckets: np.ndarray,
              freed_times: np.ndarray) -> np.ndarray:
        """One partition's and owner's placements. Placing every row in turn into the lowest
        bucket with room is the same as giving each bucket, lowest first, the earliest rows not
        placed yet: its room to the first of them, and each place freed at row t to the first
        after t."""
        counts = state.counts.get(part, {})
        order = np.argsort(times, kind="stable")
        arrived = times[order]
        placed = np.full(len(times), -1, dtype=np.int64)
        waiting = np.ones(len(times), dtype=bool)
        ids = sorted({b for b in counts if b % self.assigners == owner} | set(freed_buckets.tolist()))
        for b in ids:
            room = max(self.target - counts.get(b, 0), 0)
            first = np.flatnonzero(waiting)[:room]
            placed[first] = b
            waiting[first] = False
            frees = np.sort(freed_times[freed_buckets == b])
            rest = np.flatnonzero(waiting)
            if len(frees) and len(rest):
                steps = np.arange(len(frees))
                at = np.maximum.accumulate(np.searchsorted(arrived[rest], frees) - steps) + steps
                taken = rest[at[at < len(rest)]]
                placed[taken] = b
                waiting[taken] = False
        left = np.flatnonzero(waiting)
        if len(left):
            opened: list[int] = []
            candidate = owner
            while len(opened) * self.target < len(left):
                if candidate >= MAX_BUCKETS:
                    raise OptionError(f"{self.ctx.describe_partition(state.partitions[part])} needs more than "
                                      f"{MAX_BUCKETS} buckets of dynamic-bucket.target-row-num={self.target} keys",
                                      table=self.ctx.name, option="dynamic-bucket.target-row-num")
                if candidate not in counts and candidate not in ids:
                    opened.append(candidate)
                candidate += self.assigners
            placed[left] = np.array(opened, dtype=np.int64)[np.arange(len(left)) // self.target]
        out = np.empty(len(times), dtype=np.int64)
        out[order] = placed
        return out
