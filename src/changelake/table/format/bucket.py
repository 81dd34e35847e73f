"""Paimon's bucket function: murmur3_x86_32 (seed 42) over the bucket key's BinaryRow."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from changelake.table.format import binary_row

_SEED = 42
_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def hash_rows(rows: binary_row.EncodedRows) -> np.ndarray:
    """Java's ``BinaryRow.hashCode()`` of every row, as int32 (rows are whole words)."""
    n = len(rows.offsets) - 1
    sizes = np.diff(rows.offsets)
    words = rows.data.view("<u4")
    starts = rows.offsets[:-1] // 4
    counts = sizes // 4
    h = np.full(n, _SEED, dtype=np.uint32)
    uniform = n == 0 or bool((counts == counts[0]).all())
    with np.errstate(over="ignore"):
        if uniform and n:
            matrix = words.reshape(n, int(counts[0]))
            # Leading words that are zero in every row (the header of rows without nulls) mix
            # every row's hash alike: mixed into one hash, then spread.
            first = 0
            seed = h[:1]
            while first < matrix.shape[1] and not matrix[:, first].any():
                seed = _mix(seed, np.zeros(1, dtype=np.uint32))
                first += 1
            h = np.full(n, seed[0], dtype=np.uint32)
            for j in range(first, matrix.shape[1]):
                h = _mix(h, matrix[:, j])
        else:
            for j in range(int(counts.max()) if n else 0):
                active = counts > j
                k = words[np.where(active, starts + j, 0)]
                h = np.where(active, _mix(h, k), h)
        h ^= sizes.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def _mix(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    k = k * _C1
    k = _rotl(k, 15)
    k = k * _C2
    h = h ^ k
    h = _rotl(h, 13)
    return h * np.uint32(5) + np.uint32(0xE6546B64)


def buckets(key_columns: Sequence[pa.Array], num_buckets: int | np.ndarray) -> np.ndarray:
    """Bucket of every row: ``abs(hash % num_buckets)`` with Java's truncating ``%``
    (``num_buckets`` may be given per row)."""
    hashes = hash_rows(binary_row.encode(key_columns))  # int32: |hash % n| < n fits it
    return np.asarray(np.abs(np.fmod(hashes, num_buckets)), dtype=np.int32)
