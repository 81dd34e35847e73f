"""Membership filters of the sorted runs the key indexes look keys up in (dynamic buckets' runs
of key hashes, cross-partition upsert's runs of fingerprints): one bit per slot of a power-of-two
table of at least 8 slots a key, a key's slot being the top bits of its hash (the hashes are
mixed already), so that a lookup binary-searches a run only for the keys whose bit is set: about
one in nine of those the run does not hold. A short run, whose search stays in cache, has none.
Keys are given as unsigned ``width``-bit numbers."""

from __future__ import annotations

import numpy as np

# A run this long gets a filter: a binary search of it is mostly cache misses, and most keys
# looked up (new keys, keys of the other runs) are not in it.
FILTERED_RUN = 1 << 16


def of(keys: np.ndarray, width: int, *, grown: tuple[np.ndarray | None, np.ndarray] | None = None) -> np.ndarray | None:
    """The filter of a run of the sorted ``keys`` (None for a short run). ``grown`` = (the
    filter of an older run, the sorted keys merged into it to make this one): its bits are
    reused when it has the size this run needs."""
    if len(keys) < FILTERED_RUN:
        return None
    size = 1 << ((8 * len(keys) - 1).bit_length() - 3)
    if grown is not None and grown[0] is not None and len(grown[0]) == size:
        bits, added = grown[0].copy(), grown[1]
    else:
        bits, added = np.zeros(size, dtype=np.uint8), keys
    # Sorted keys give sorted slots: each byte's bits are or-ed over its slots' stretch.
    slots = _slots(bits, added, width)
    byte = (slots >> 3).astype(np.intp)
    starts = np.flatnonzero(np.diff(byte, prepend=-1))
    bits[byte[starts]] |= np.bitwise_or.reduceat(np.left_shift(1, (slots & 7).astype(np.uint8)).astype(np.uint8),
                                                 starts)
    return bits


def may_hold(bits: np.ndarray, keys: np.ndarray, width: int) -> np.ndarray:
    """Whether the run of filter ``bits`` may hold each key (False: it does not)."""
    slots = _slots(bits, keys, width)
    held: np.ndarray = (bits[(slots >> 3).astype(np.intp)] >> (slots & 7).astype(np.uint8)) & 1 == 1
    return held


def _slots(bits: np.ndarray, keys: np.ndarray, width: int) -> np.ndarray:
    slots: np.ndarray = keys >> (width - 2 - len(bits).bit_length())
    return slots
