"""Dynamic buckets (``bucket = -1``), as Paimon's ``HashBucketAssigner``/``PartitionIndex`` and
``HashIndexMaintainer``: each partition's HASH index (one file of int32 key hashes per bucket,
listed in the snapshot's index manifest) says which bucket a key is in. A key the index does not
know goes to the first bucket holding fewer than ``dynamic-bucket.target-row-num`` keys, else to
a new bucket (the lowest free id), up to ``dynamic-bucket.max-buckets``; past it, to one of the
partition's buckets at random. With ``dynamic-bucket.initial-buckets`` (or
``dynamic-bucket.assigner-parallelism``) N > 1, keys are split among N assigners by hash and
assigner ``a`` fills only buckets ``b`` with ``b % N == a``, so N buckets fill at once.

A partition's index is loaded from the latest snapshot when the writer first writes it, and again
before a flush when another writer changed it meanwhile (unless this writer has keys of its own
not yet committed there). Every bucket that got new keys gets a whole new HASH file, committed
with the rows (written on a pool thread as soon as the bucket's keys are placed, while the
flush goes on); the commit is void (CommitConflictError) when the partition's index changed since
the assignment started, so that no key ever lands in two buckets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from changelake.errors import CorruptMetadataError, OptionError
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.executor import executor, map_all
from changelake.table.format import binary_row, bucket, hash_index
from changelake.table.format.index_manifest import IndexFileMeta, IndexManifestEntry
from changelake.table.format.snapshot import Snapshot
from changelake.table.io.cache import ManifestCache
from changelake.table.read import deletion_vectors as read_index
from changelake.table.write.assigners import membership
from changelake.table.write.assigners.base import IndexUpdate, Stateless, with_index

# Paimon's bucket ids in HASH mode are Java shorts: at most Short.MAX_VALUE + 1 buckets.
MAX_BUCKETS = 32768
_BUCKET_BITS = 16
_BUCKET_MASK = (1 << _BUCKET_BITS) - 1
_INT32_MIN = -(1 << 31)


def hash_entries(ctx: TableContext) -> dict[bytes, dict[int, IndexManifestEntry]]:
    """The HASH index file of every (partition, bucket) in the latest snapshot; CorruptMetadataError
    when a bucket has two."""
    latest = ctx.latest_snapshot()
    found: dict[bytes, dict[int, IndexManifestEntry]] = {}
    if latest is None or latest.index_manifest is None:
        return found
    for e in read_index.index_entries(ctx, latest):
        if e.file.index_type != hash_index.HASH:
            continue
        bucket_files = found.setdefault(e.partition, {})
        if e.bucket in bucket_files:
            raise CorruptMetadataError(
                f"the index manifest lists two HASH index files for bucket {e.bucket} of "
                f"{ctx.describe_partition(e.partition)}: {bucket_files[e.bucket].file.file_name} and "
                f"{e.file.file_name}", table=ctx.name, file=ctx.paths.manifest(latest.index_manifest))
        bucket_files[e.bucket] = e
    return found


@dataclass(frozen=True)
class _Run:
    """A sorted run of key hashes (int32: half the memory a binary search walks), their
    buckets, and the run's membership filter."""

    hashes: np.ndarray
    buckets: np.ndarray
    bits: np.ndarray | None

    @staticmethod
    def of(codes: np.ndarray) -> _Run:
        """The run of ``hash << 16 | bucket`` codes, sorted."""
        hashes = (codes >> _BUCKET_BITS).astype(np.int32)
        return _Run(hashes, (codes & _BUCKET_MASK).astype(np.uint16), membership.of(_unsigned(hashes), 32))

    def merged(self, newer: _Run) -> _Run:
        """This run and ``newer`` as one, in linear time: a stable sort finds the two sorted
        stretches and merges them (timsort)."""
        hashes = np.concatenate([self.hashes, newer.hashes])
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        bits = membership.of(_unsigned(hashes), 32, grown=(self.bits, _unsigned(newer.hashes)))
        return _Run(hashes, np.concatenate([self.buckets, newer.buckets])[order], bits)

    def lookup(self, hashes: np.ndarray, found: np.ndarray) -> None:
        """Set ``found`` to the bucket of every hash (int32, sorted, distinct) this run holds."""
        rows = np.arange(len(hashes))
        if self.bits is not None:
            rows = rows[membership.may_hold(self.bits, _unsigned(hashes), 32)]
        wanted = hashes[rows]
        at = np.minimum(np.searchsorted(self.hashes, wanted), len(self.hashes) - 1)
        hit = self.hashes[at] == wanted
        found[rows[hit]] = self.buckets[at[hit]]

    @property
    def nbytes(self) -> int:
        return self.hashes.nbytes + self.buckets.nbytes + (0 if self.bits is None else self.bits.nbytes)


@dataclass(frozen=True)
class _Committed:
    """A partition's index as a snapshot committed it, shared by the writers of this process
    (its arrays are never changed in place, and of each bucket's HASH file bytes only the first
    ``n`` are its: the writer that made it may append to the buffer): a writer after another,
    ``table.write`` after ``table.write``, starts from it instead of reading every HASH file."""

    base: Mapping[int, IndexFileMeta]
    counts: Mapping[int, int]
    files: Mapping[int, tuple[bytearray, int]]
    runs: tuple[_Run, ...]

    def nbytes(self) -> int:
        return sum(n for _, n in self.files.values()) + sum(r.nbytes for r in self.runs)


# By (filesystem, table root, partition, names of its HASH files): those files never change.
COMMITTED = ManifestCache(max_files=64, max_bytes=512 * 1024 * 1024, weigh=_Committed.nbytes)
# By (filesystem, table root, partition, ()): the partition's index this process loaded or
# committed last. A writer whose partition's HASH files changed since (a Spark task of the next
# micro-batch, in a reused Python worker) extends it with the new files' keys, instead of
# reading and sorting every key of the partition again.
LATEST = ManifestCache(max_files=64, max_bytes=512 * 1024 * 1024, weigh=_Committed.nbytes)


@dataclass
class _PartitionIndex:
    """One partition's key hash -> bucket map, as sorted runs (looked up with a binary search
    per run, past its filter; a new run merges with the last ones while not much smaller), and
    each bucket's HASH file bytes (a buffer and its length), to which new keys are appended: a
    bucket that got new ones is written whole again from them, its old bytes copied from its
    last file."""

    base: dict[int, IndexFileMeta]
    counts: dict[int, int]  # keys per bucket, in the order buckets were opened (filled in this order)
    files: dict[int, tuple[bytearray, int]]
    runs: list[_Run] = field(default_factory=list)
    dirty: set[int] = field(default_factory=set)
    owned: set[int] = field(default_factory=set)  # buffers only this index appends to

    @staticmethod
    def of(base: dict[int, IndexFileMeta], files: dict[int, np.ndarray]) -> _PartitionIndex:
        encoded = {b: bytearray(hash_index.encode(h)) for b, h in files.items()}
        index = _PartitionIndex(dict(base), {b: len(h) for b, h in files.items()},
                                {b: (data, len(data)) for b, data in encoded.items()}, owned=set(files))
        if files:
            index._add_run(np.concatenate([_codes(h, np.full(len(h), b)) for b, h in files.items()]))
        return index

    @staticmethod
    def of_committed(committed: _Committed) -> _PartitionIndex:
        return _PartitionIndex(dict(committed.base), dict(committed.counts), dict(committed.files),
                               list(committed.runs))

    def committed(self) -> _Committed:
        return _Committed(dict(self.base), dict(self.counts), dict(self.files), tuple(self.runs))

    def base_names(self) -> tuple[str, ...]:
        return tuple(sorted(f.file_name for f in self.base.values()))

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """The bucket of every hash, -1 where the index has none."""
        found = np.full(len(hashes), -1, dtype=np.int64)
        hashes = hashes.astype(np.int32, copy=False)  # as the runs' (else each run is cast)
        for run in self.runs:
            run.lookup(hashes, found)
        return found

    def add(self, hashes: np.ndarray, buckets: np.ndarray) -> None:
        """Record new keys (distinct hashes the index does not have yet) in their buckets."""
        order = np.argsort(buckets, kind="stable")
        ids, starts = np.unique(buckets[order], return_index=True)
        for b, part in zip(ids.tolist(), np.split(hashes[order], starts[1:]), strict=True):
            self.counts[b] = self.counts.get(b, 0) + len(part)
            data, n = self.files.get(b, (bytearray(), 0))
            if b not in self.owned:  # shared with the cache: appended to a copy
                data = bytearray(memoryview(data)[:n])
                self.owned.add(b)
            data += hash_index.encode(part)
            self.files[b] = (data, len(data))
            self.dirty.add(b)
        self._add_run(_codes(hashes, buckets))

    def _add_run(self, codes: np.ndarray) -> None:
        if not len(codes):
            return
        run = _Run.of(np.sort(codes))
        while self.runs and len(self.runs[-1].hashes) < 4 * len(run.hashes):
            run = self.runs.pop().merged(run)
        self.runs.append(run)

    def file_bytes(self, b: int) -> memoryview:
        data, n = self.files[b]
        return memoryview(data)[:n]


def _unsigned(hashes: np.ndarray) -> np.ndarray:
    """Int32 hashes as unsigned 32-bit numbers (int64), in the same order."""
    return hashes.astype(np.int64) - _INT32_MIN


def _owner(hashes: np.ndarray, assigners: int) -> np.ndarray:
    """The assigner of each key hash: Java's ``abs(hash % n)``."""
    return np.abs(np.fmod(hashes.astype(np.int64), assigners))


def _codes(hashes: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    return (hashes.astype(np.int64) << _BUCKET_BITS) | buckets.astype(np.int64)


class DynamicBuckets(Stateless):
    """Assigns keys to buckets by their partition's HASH index, extending it with new keys."""

    def __init__(self, ctx: TableContext, *, fresh: bool = False) -> None:
        """``fresh``: every partition starts from an empty index (an overwrite's, whose rows
        replace the partitions' rows and keys)."""
        options = ctx.options
        if options.raw.get("bucket-key"):
            raise OptionError("cannot be set in dynamic bucket mode (bucket = -1): a key's bucket comes from "
                              "the HASH index", table=ctx.name, option="bucket-key")
        self.ctx = ctx
        self.fresh = fresh
        self.target = options.dynamic_bucket_target_row_num
        self.limit = MAX_BUCKETS if options.dynamic_bucket_max_buckets == -1 else options.dynamic_bucket_max_buckets
        self.assigners = options.dynamic_bucket_initial_buckets or options.dynamic_bucket_assigner_parallelism or 1
        self._indexes: dict[bytes, _PartitionIndex] = {}
        # Prepared index files not known to have landed: (partition, bucket) -> file.
        self._prepared: dict[tuple[bytes, int], IndexFileMeta] = {}
        # HASH files being written since the assignment, by (partition, bucket).
        self._ahead: dict[tuple[bytes, int], Future[IndexFileMeta]] = {}
        self._random = np.random.default_rng()

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        key_hashes = bucket.hash_rows(binary_row.encode([data.column(k) for k in self.ctx.bucket_key]))
        live = {} if self.fresh else hash_entries(self.ctx)
        buckets = np.empty(data.num_rows, dtype=np.int64)
        order = np.argsort(partition_of_row, kind="stable")
        ids, starts = np.unique(partition_of_row[order], return_index=True)
        for p, rows in zip(ids.tolist(), np.split(order, starts[1:]), strict=True):
            index = self._index(partitions[p], live.get(partitions[p], {}))
            distinct, inverse = np.unique(key_hashes[rows], return_inverse=True)
            found = index.lookup(distinct)
            new = found < 0
            if new.any():
                found[new] = self._place(index, distinct[new], partitions[p])
                grown = np.unique(found[new]).tolist()
                self._supersede(partitions[p], grown)
                index.add(distinct[new], found[new])
                # The bucket's new HASH file is written now, on another core, while this thread
                # places the other partitions' keys and writes the data files: the kernel's copy
                # of a large bucket's old keys does not delay the commit.
                for b in grown:
                    self._ahead[(partitions[p], b)] = executor().submit(self._write, index, b)
            buckets[rows] = found[inverse]
        return buckets

    def route(self, key_columns: Sequence[pa.Array]) -> np.ndarray:
        """The key's assigner: a task per assigner opens and fills only its own buckets, and
        every key of a bucket it opened hashes to it (a bucket opened by a writer with another
        number of assigners may get rows from two tasks, of distinct keys: still one key, one bucket)."""
        return _owner(bucket.hash_rows(binary_row.encode(list(key_columns))), self.assigners)

    def _index(self, partition: bytes, live: dict[int, IndexManifestEntry]) -> _PartitionIndex:
        """The partition's index: as loaded before, unless another writer changed it since and
        this writer has no uncommitted keys there; else loaded from the latest snapshot."""
        index = self._indexes.get(partition)
        if self.fresh:
            if index is None:
                index = self._indexes[partition] = _PartitionIndex.of({}, {})
            return index
        names = tuple(sorted(e.file.file_name for e in live.values()))
        pending = index is not None and (index.dirty or any(p == partition for p, _ in self._prepared))
        if index is None or (index.base_names() != names and not pending):
            committed = COMMITTED.get(self._key(partition, names), lambda: self._load(partition, live))
            LATEST.put(self._key(partition, ()), committed)
            index = self._indexes[partition] = _PartitionIndex.of_committed(committed)
        return index

    def _load(self, partition: bytes, live: dict[int, IndexManifestEntry]) -> _Committed:
        """The partition's index from its HASH files: the one this process loaded or committed
        last, extended by the keys the new files add to it, or else read whole."""
        previous = LATEST.peek(self._key(partition, ()))
        if isinstance(previous, _Committed):
            extended = self._extended(previous, live)
            if extended is not None:
                return extended
        return _PartitionIndex.of({b: e.file for b, e in live.items()},
                                  {b: self._read(e) for b, e in live.items()}).committed()

    def _extended(self, previous: _Committed, live: dict[int, IndexManifestEntry]) -> _Committed | None:
        """``previous`` with the keys the partition's new HASH files add: every bucket's new file
        must start with the bytes ``previous`` holds of it (changelake's writers append a
        bucket's new keys; Paimon's Java writer may reorder them), else None."""
        if not set(previous.base) <= set(live):
            return None
        index = _PartitionIndex.of_committed(previous)
        for b, entry in live.items():
            if b in previous.base and previous.base[b].file_name == entry.file.file_name:
                continue
            try:
                data = self.ctx.file_io.read_bytes(read_index.index_path(self.ctx, entry.file))
            except FileNotFoundError:
                return None  # read whole, which names the missing file
            old, n = previous.files.get(b, (bytearray(), 0))
            if len(data) != entry.file.row_count * 4 or len(data) < n or memoryview(data)[:n] != memoryview(old)[:n]:
                return None
            added = hash_index.decode(data[n:], table=self.ctx.name, path=entry.file.file_name)
            index.base[b] = entry.file
            index.counts[b] = len(data) // 4
            index.files[b] = (bytearray(data), len(data))
            index.owned.add(b)
            index._add_run(_codes(added, np.full(len(added), b)))
        return index.committed()

    def _key(self, partition: bytes, names: tuple[str, ...]) -> tuple[str, str, bytes, tuple[str, ...]]:
        return self.ctx.file_io.protocol, self.ctx.paths.metadata_root, partition, names

    def _read(self, entry: IndexManifestEntry) -> np.ndarray:
        return hash_index.read(self.ctx.file_io, read_index.index_path(self.ctx, entry.file), entry.file,
                               table=self.ctx.name)

    def _place(self, index: _PartitionIndex, hashes: np.ndarray, partition: bytes) -> np.ndarray:
        """Buckets for new keys (distinct hashes), each by its assigner."""
        if self.assigners == 1:
            return self._fill(index, hashes, 0, partition)
        out = np.empty(len(hashes), dtype=np.int64)
        owner = _owner(hashes, self.assigners)
        for assigner in np.unique(owner).tolist():
            mine = owner == assigner
            out[mine] = self._fill(index, hashes[mine], assigner, partition)
        return out

    def _fill(self, index: _PartitionIndex, hashes: np.ndarray, assigner: int, partition: bytes) -> np.ndarray:
        """Paimon's ``PartitionIndex.assign`` for a batch of new keys of one assigner: buckets not
        full yet in the order they opened, then new buckets, then random ones."""
        n = self.assigners
        ids = [b for b in index.counts if b % n == assigner]
        room = [(b, self.target - index.counts[b]) for b in ids if index.counts[b] < self.target]
        spare = len(hashes) - sum(r for _, r in room)
        if spare > 0:
            free = np.setdiff1d(np.arange(assigner, self.limit, n), np.array(ids, dtype=np.int64))
            opened = free[:-(-spare // self.target)].tolist()
            room += [(b, self.target) for b in opened]
            ids += opened
        if not ids:
            raise OptionError(f"no bucket below dynamic-bucket.max-buckets={self.limit} is left for assigner "
                              f"{assigner} of {n} in {self.ctx.describe_partition(partition)}; raise "
                              "dynamic-bucket.max-buckets or lower dynamic-bucket.initial-buckets",
                              table=self.ctx.name, option="dynamic-bucket.max-buckets")
        ends = np.cumsum([r for _, r in room], dtype=np.int64) if room else np.zeros(0, dtype=np.int64)
        filled = min(len(hashes), int(ends[-1]) if len(ends) else 0)
        out = np.empty(len(hashes), dtype=np.int64)
        slots = np.array([b for b, _ in room], dtype=np.int64)
        out[:filled] = slots[np.searchsorted(ends, np.arange(filled), side="right")]
        # Every bucket is full and no new one may open: Paimon picks one of them at random.
        out[filled:] = self._random.choice(np.array(ids, dtype=np.int64), size=len(hashes) - filled)
        return out

    def prepare(self, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        return with_index(messages, self._updates(), self.ctx.options.bucket)

    def _write(self, index: _PartitionIndex, b: int) -> IndexFileMeta:
        """Bucket ``b``'s HASH file, as its buffer holds it now."""
        # The bucket's buffer starts with its last file's bytes, to which new keys were appended.
        last = index.base.get(b)
        extends = None if last is None else (read_index.index_path(self.ctx, last), 4 * last.row_count)
        return hash_index.write(self.ctx.file_io, self.ctx.paths, index.file_bytes(b), extends=extends)

    def _supersede(self, partition: bytes, grown: Sequence[int]) -> None:
        """Before more keys go into these buckets: their files written ahead are out of date
        (and their buffers must not be held while they grow)."""
        for b in grown:
            ahead = self._ahead.pop((partition, b), None)
            if ahead is not None:
                self._drop([ahead])

    def _drop(self, futures: Sequence[Future[IndexFileMeta]]) -> None:
        """Wait for these writes and delete the files they wrote."""
        wait(futures)
        self.ctx.file_io.discard(self.ctx.paths.index(f.result().file_name)
                                 for f in futures if f.exception() is None)

    def _updates(self) -> Mapping[tuple[bytes, int], IndexUpdate]:
        dirty = [(partition, index, b) for partition, index in self._indexes.items() for b in sorted(index.dirty)]
        ahead = [self._ahead.pop((partition, b), None) for partition, _, b in dirty]
        try:
            behind = iter(map_all(lambda item: self._write(item[1], item[2]),
                                  [item for item, f in zip(dirty, ahead, strict=True) if f is None]))
            metas = [next(behind) if f is None else f.result() for f in ahead]
        except BaseException:
            self._drop([f for f in ahead if f is not None])
            raise
        updates = {}
        for (partition, index, b), meta in zip(dirty, metas, strict=True):
            updates[(partition, b)] = IndexUpdate(meta, index.base_names())
            self._prepared[(partition, b)] = meta
        for partition, index in self._indexes.items():
            index.dirty.clear()
            prepared = {b: meta for (p, b), meta in self._prepared.items() if p == partition}
            if prepared:
                # Cached now, under the names of the files it will have once they land: a
                # writer that never learns they landed (a Spark task: the driver commits) leaves
                # the next one in this process (the next micro-batch's task) all of it.
                committed = dataclasses.replace(index.committed(), base={**index.base, **prepared})
                COMMITTED.put(self._key(partition, tuple(sorted(f.file_name for f in committed.base.values()))),
                              committed)
                LATEST.put(self._key(partition, ()), committed)
        return updates

    def landed(self, snapshot: Snapshot) -> None:
        for (partition, b), meta in self._prepared.items():
            self._indexes[partition].base[b] = meta  # cached when prepared
        self._prepared.clear()

    def forget(self) -> None:
        self._drop(list(self._ahead.values()))
        self._ahead.clear()
        self._indexes.clear()
        self._prepared.clear()
