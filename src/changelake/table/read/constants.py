"""Columns that hold one value in every row (a raw split's partition columns), sliced from
cached arrays instead of built for every split."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import pyarrow as pa


class ConstantColumns:
    """Arrays of one repeated value, by (type, value), least recently used first out.

    Building a constant string column writes every row's bytes again; a scan of a partitioned
    table with many raw splits would do that once per split. A cached array is grown (doubled)
    to the longest length asked for, and every request is a zero-copy slice of it. Arrow arrays
    are immutable, so slices handed out stay valid after the cache drops or clears them; the
    bound only limits what the cache itself keeps. Safe to share between threads."""

    def __init__(self, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._arrays: OrderedDict[tuple[pa.DataType, Any], pa.Array] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def column(self, value: Any, type_: pa.DataType, length: int) -> pa.Array:
        """``value`` (of ``type_``) repeated ``length`` times."""
        key = (type_, value)
        with self._lock:
            cached = self._arrays.get(key)
            if cached is not None and len(cached) >= length:
                self._arrays.move_to_end(key)
                return cached.slice(0, length)
        grown = pa.repeat(pa.scalar(value, type_), max(length, 2 * (len(cached) if cached is not None else 0)))
        if grown.nbytes > self.max_bytes:
            return grown.slice(0, length)
        with self._lock:
            previous = self._arrays.pop(key, None)
            self._bytes += grown.nbytes - (previous.nbytes if previous is not None else 0)
            self._arrays[key] = grown
            while self._bytes > self.max_bytes:
                _, dropped = self._arrays.popitem(last=False)
                self._bytes -= dropped.nbytes
        return grown.slice(0, length)

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the cache keeps."""
        return self._bytes

    def clear(self) -> None:
        """Drop every cached array."""
        with self._lock:
            self._arrays.clear()
            self._bytes = 0


CONSTANT_COLUMNS = ConstantColumns()
