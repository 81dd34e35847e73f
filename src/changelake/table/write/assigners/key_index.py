"""Cross-partition upsert's key index: every primary key of the table -> the (partition, bucket)
holding it, as Paimon's ``GlobalIndexAssigner`` keeps in RocksDB.

A key is held as a 128-bit fingerprint of its BinaryRow (two 64-bit hashes with independent
seeds: two of n keys share one with probability about n² / 2^129, far below the odds of a
storage fault), beside ``partition id << 16 | bucket``. Entries live in sorted runs, newest
last, each looked up with a binary search; a new run merges with the last ones while they are
not much bigger, so there are few. Runs beyond the memory budget are written to local disk and
memory-mapped (the file is unlinked at once: the mapping keeps it until the run is dropped),
so a big index costs page cache, not heap.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from changelake.table.format import binary_row
from changelake.table.io import killpoints, scratch
from changelake.table.io.killpoints import KillPoint
from changelake.table.write.assigners import membership

BUCKET_BITS = 16
BUCKET_MASK = (1 << BUCKET_BITS) - 1
_SEEDS = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344))
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _fmix(h: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finalizer: a bijection that spreads every input bit over the output."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    mixed: np.ndarray = h ^ (h >> np.uint64(33))
    return mixed


def fingerprints(columns: Sequence[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """The two 64-bit halves of every row's fingerprint over ``columns`` (in the table's types)."""
    return row_fingerprints(binary_row.encode(columns))


def row_fingerprints(rows: binary_row.EncodedRows) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fingerprints` of rows encoded already."""
    n = len(rows.offsets) - 1
    sizes = np.diff(rows.offsets)
    words = rows.data.view("<u4")
    starts = rows.offsets[:-1] // 4
    counts = sizes // 4
    hi = np.full(n, _SEEDS[0], dtype=np.uint64)
    lo = np.full(n, _SEEDS[1], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(int(counts.max()) if n else 0):
            active = counts > j
            k = words[np.where(active, starts + j, 0)].astype(np.uint64)
            hi = np.where(active, _fmix(hi ^ k), hi)
            lo = np.where(active, _fmix(lo + k * _GOLDEN), lo)
        length = sizes.astype(np.uint64)
        return _fmix(hi ^ length), _fmix(lo + length)


@dataclass(frozen=True)
class Run:
    """Entries sorted by fingerprint; ``written`` (epoch ms) only when entries expire. The
    run's membership filter (of the high halves) stays in memory when the run is on disk."""

    hi: np.ndarray
    lo: np.ndarray
    value: np.ndarray
    written: np.ndarray | None
    on_disk: bool = False
    bits: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.hi)

    @property
    def nbytes(self) -> int:
        filter_bytes = 0 if self.bits is None else self.bits.nbytes
        return filter_bytes + (0 if self.on_disk else self.hi.nbytes * (4 if self.written is not None else 3))

    @staticmethod
    def of(hi: np.ndarray, lo: np.ndarray, value: np.ndarray, written: np.ndarray | None) -> Run:
        """A run of entries (distinct fingerprints) in any order."""
        order = fingerprint_order(hi, lo)
        return Run.sorted(hi[order], lo[order], value[order], None if written is None else written[order])

    @staticmethod
    def sorted(hi: np.ndarray, lo: np.ndarray, value: np.ndarray, written: np.ndarray | None) -> Run:
        """A run of entries sorted by fingerprint, with its filter."""
        return Run(hi, lo, value, written, bits=membership.of(hi, 64))

    def find(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """Every fingerprint's position in the run, -1 where it is not there."""
        found = np.full(len(hi), -1, dtype=np.int64)
        if not len(self) or not len(hi):
            return found
        rows = np.arange(len(hi))
        if self.bits is not None:
            rows = rows[membership.may_hold(self.bits, hi, 64)]
            hi, lo = hi[rows], lo[rows]
        at = np.searchsorted(self.hi, hi)
        todo = np.flatnonzero(at < len(self))
        # Halves that are equal while the others differ are rare: step past them one by one.
        while len(todo):
            pos = at[todo]
            same_hi = self.hi[pos] == hi[todo]
            match = same_hi & (self.lo[pos] == lo[todo])
            found[rows[todo[match]]] = pos[match]
            todo = todo[same_hi & ~match & (pos + 1 < len(self))]
            at[todo] += 1
        return found


def _merge(runs: Sequence[Run]) -> Run:
    """One run of ``runs`` (oldest first), a fingerprint's newest entry winning."""
    hi = np.concatenate([r.hi for r in runs])
    lo = np.concatenate([r.lo for r in runs])
    value = np.concatenate([r.value for r in runs])
    written = None if runs[0].written is None else np.concatenate([r.written for r in runs])
    # Each run is sorted: a stable sort by the high half merges them in linear time (timsort
    # finds the runs), and keeps a key's entries oldest first. Only two keys sharing a high half
    # (odds about n² / 2^65) need the full sort.
    order = np.argsort(hi, kind="stable")
    if _halves_collide(hi[order], lo[order]):
        age = np.concatenate([np.full(len(r), i, dtype=np.int32) for i, r in enumerate(runs)])
        order = np.lexsort((age, lo, hi))
    hi, lo = hi[order], lo[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    keep = order[last]
    return Run.sorted(hi[last], lo[last], value[keep], None if written is None else written[keep])


def fingerprint_order(hi: np.ndarray, lo: np.ndarray, *, stable: bool = False) -> np.ndarray:
    """The order that sorts fingerprints by (hi, lo), equal ones side by side (``stable``: in
    their order): a sort by the high half alone (a fifth of the time of sorting by both), by
    both only when two distinct fingerprints share a high half (odds about n² / 2^65)."""
    order = np.argsort(hi, kind="stable" if stable else None)
    if _halves_collide(hi[order], lo[order]):  # lexsort is stable
        order = np.lexsort((lo, hi))
    return order


def _halves_collide(hi: np.ndarray, lo: np.ndarray) -> bool:
    """Whether sorted-by-``hi`` entries have two distinct fingerprints with one high half."""
    return bool(((hi[1:] == hi[:-1]) & (lo[1:] != lo[:-1])).any())


class KeyIndex:
    """Fingerprint -> ``partition id << 16 | bucket``, bounded in memory by ``memory_budget``
    bytes (beyond it, runs go to local disk); with ``ttl_ms``, an entry not written again for
    that long is gone (Paimon's ``cross-partition-upsert.index-ttl``)."""

    def __init__(self, *, memory_budget: int, ttl_ms: int | None, runs: Sequence[Run] = ()) -> None:
        self.memory_budget = memory_budget
        self.ttl_ms = ttl_ms
        self.runs = list(runs)

    def copy(self) -> KeyIndex:
        """An index with the same entries; runs are never changed in place, so they are shared."""
        return KeyIndex(memory_budget=self.memory_budget, ttl_ms=self.ttl_ms, runs=self.runs)

    @property
    def nbytes(self) -> int:
        """Heap bytes of the runs not on disk."""
        return sum(r.nbytes for r in self.runs)

    def __len__(self) -> int:
        """Entries, counting a key once per run that has it."""
        return sum(len(r) for r in self.runs)

    def lookup(self, hi: np.ndarray, lo: np.ndarray, now_ms: int) -> np.ndarray:
        """Every key's value, -1 where the index has none (or it expired)."""
        out = np.full(len(hi), -1, dtype=np.int64)
        todo = np.arange(len(hi))
        for run in reversed(self.runs):
            if not len(todo):
                break
            at = run.find(hi[todo], lo[todo])
            hit = at >= 0
            if run.written is not None and self.ttl_ms is not None:
                live = np.zeros(len(at), dtype=bool)
                live[hit] = run.written[at[hit]] + self.ttl_ms >= now_ms
                hit &= live  # an expired entry hides nothing older: it was written later than those
            out[todo[hit]] = run.value[at[hit]]
            todo = todo[at < 0]
        return out

    def put(self, hi: np.ndarray, lo: np.ndarray, value: np.ndarray, now_ms: int) -> None:
        """Set the entries of distinct keys."""
        if not len(hi):
            return
        written = np.full(len(hi), now_ms, dtype=np.int64) if self.ttl_ms is not None else None
        run = Run.of(hi, lo, value.astype(np.int64), written)
        while self.runs and len(self.runs[-1]) < 4 * len(run):
            run = _merge([self.runs.pop(), run])
        self.runs.append(run)
        self._spill()

    def _spill(self) -> None:
        """Move the biggest runs in memory to local disk until the rest fit the budget."""
        while self.nbytes > self.memory_budget:
            i = max(range(len(self.runs)), key=lambda j: self.runs[j].nbytes)
            self.runs[i] = _to_disk(self.runs[i])


def _to_disk(run: Run) -> Run:
    directory = scratch.make("key-index")
    try:
        arrays = {"hi": run.hi, "lo": run.lo, "value": run.value}
        if run.written is not None:
            arrays["written"] = run.written
        mapped = {}
        for name, array in arrays.items():
            path = os.path.join(directory, f"{name}.npy")
            np.save(path, array)
            mapped[name] = np.load(path, mmap_mode="r")
        killpoints.reached(KillPoint.KEY_INDEX)  # a killed writer leaves the files: the next sweeps them
    finally:
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
    return Run(mapped["hi"], mapped["lo"], mapped["value"], mapped.get("written"), on_disk=True, bits=run.bits)
