"""Columns that hold one value in every row (a raw split's partition columns), sliced from
cached arrays instead of built for every split."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from changelake.table.io.cache import ManifestCache


class ConstantColumns:
    """Arrays of one repeated value, by (type, value), least recently used first out.

    Building a constant string column writes every row's bytes again; a scan of a partitioned
    table with many raw splits would do that once per split. A cached array is grown (doubled)
    to the longest length asked for, and every request is a zero-copy slice of it. Arrow arrays
    are immutable, so slices handed out stay valid after the cache drops or clears them; the
    bound only limits what the cache itself keeps. Safe to share between threads."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._arrays = ManifestCache(max_files=1 << 20, max_bytes=max_bytes, weigh=lambda a: a.nbytes)

    def column(self, value: Any, type_: pa.DataType, length: int) -> pa.Array:
        """``value`` (of ``type_``) repeated ``length`` times."""
        key = (type_, value)
        cached: pa.Array = self._arrays.get(key, lambda: pa.repeat(pa.scalar(value, type_), length))
        if len(cached) < length:
            cached = pa.repeat(pa.scalar(value, type_), max(length, 2 * len(cached)))
            self._arrays.put(key, cached)  # not kept when it alone is over the bound
        return cached.slice(0, length)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the cache keeps."""
        return self._arrays.nbytes

    def clear(self) -> None:
        """Drop every cached array."""
        self._arrays.clear()


CONSTANT_COLUMNS = ConstantColumns()
