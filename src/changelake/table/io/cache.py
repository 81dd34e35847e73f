"""A bounded cache of immutable values (parsed manifests, footers, index files), shared by the
layers above."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

_T = TypeVar("_T")


class ManifestCache:
    """Parsed manifests and manifest lists by (filesystem, path), least recently used first out
    (and other immutable values by any key: index file bytes, constant columns).

    Manifest files never change once written, so a parsed file is valid for as long as it is
    held; the bounds only limit memory: ``max_files`` files, and with ``weigh`` (a value's
    size in bytes) ``max_bytes`` bytes. Safe to share between threads."""

    def __init__(self, max_files: int = 512, *, max_bytes: int | None = None,
                 weigh: Callable[[Any], int] | None = None) -> None:
        self.max_files = max_files
        self.max_bytes = max_bytes
        self._weigh = weigh
        self._files: OrderedDict[Hashable, object] = OrderedDict()
        self._weights: dict[Hashable, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes the cached values weigh (0 without ``weigh``)."""
        return self._bytes

    def get(self, key: Hashable, load: Callable[[], _T]) -> _T:
        """The cached value of ``key``, loading (outside the lock) on a miss."""
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
                return self._files[key]  # type: ignore[return-value]
        value = load()
        self.put(key, value)
        return value

    def peek(self, key: Hashable) -> object | None:
        """The cached value of ``key``, None on a miss."""
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
                return self._files[key]
        return None

    def put(self, key: Hashable, value: object) -> None:
        """Keep ``value`` as ``key``'s (a file this process just wrote, say)."""
        weight = self._weigh(value) if self._weigh is not None else 0
        if self.max_bytes is not None and weight > self.max_bytes:
            return
        with self._lock:
            self._bytes += weight - self._weights.pop(key, 0)
            self._files[key] = value
            self._files.move_to_end(key)
            if weight:
                self._weights[key] = weight
            while len(self._files) > self.max_files or (self.max_bytes is not None and self._bytes > self.max_bytes):
                dropped, _ = self._files.popitem(last=False)
                self._bytes -= self._weights.pop(dropped, 0)

    def clear(self) -> None:
        """Forget every cached file."""
        with self._lock:
            self._files.clear()
            self._weights.clear()
            self._bytes = 0
