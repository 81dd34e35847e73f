"""The lookup cache: local copies of a bucket's higher-level files, so that a compaction that
looks up previous values does not read them from the table's storage again.

Files are cached whole, as Arrow tables in the data-file layout, keyed by their path (file
names are unique: a file never changes once written). The tables stay in memory up to
``lookup.cache-max-memory-size``; beyond it the least recently used are spilled to a local
temp directory as Arrow IPC files and memory-mapped when used again (Paimon's lookup files,
which it keeps on local disk).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.ipc as ipc


class LookupCache:
    """A bounded cache of files by path, counting hits and misses (``clear`` empties both)."""

    def __init__(self, max_memory: int) -> None:
        self.max_memory = max_memory
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, pa.Table] = OrderedDict()
        self._memory_bytes = 0
        self._spilled: dict[str, str] = {}
        self._spill_dir: str | None = None
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self) -> float:
        """Hits over lookups so far (0.0 before the first)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def get(self, path: str, load: Callable[[], pa.Table]) -> pa.Table:
        """The file at ``path``, from the cache or else ``load()``-ed and cached."""
        with self._lock:
            table = self._memory.get(path)
            if table is not None:
                self._memory.move_to_end(path)
                self.hits += 1
                return table
            spilled = self._spilled.get(path)
            if spilled is not None:
                self.hits += 1
                # Memory-mapped: the pages are read from local disk as the columns are used.
                return ipc.open_file(pa.memory_map(spilled)).read_all()
            self.misses += 1
        table = load()  # outside the lock: other buckets' compactions go on meanwhile
        self.put(path, table)
        return table

    def put(self, path: str, table: pa.Table) -> None:
        """Cache the rows of a file just written (not counted as a lookup)."""
        with self._lock:
            if path not in self._memory and path not in self._spilled:
                self._memory[path] = table
                self._memory_bytes += table.nbytes
                self._spill_over_limit()

    def discard(self, paths: Iterable[str]) -> None:
        """Forget files a compaction removed from the table."""
        with self._lock:
            for path in paths:
                table = self._memory.pop(path, None)
                if table is not None:
                    self._memory_bytes -= table.nbytes
                spilled = self._spilled.pop(path, None)
                if spilled is not None:
                    os.unlink(spilled)

    def clear(self) -> None:
        """Drop every cached file (spilled ones too) and reset the counts."""
        with self._lock:
            self._memory.clear()
            self._memory_bytes = 0
            self._spilled.clear()
            if self._spill_dir is not None:
                shutil.rmtree(self._spill_dir, ignore_errors=True)
                self._spill_dir = None
            self.hits = self.misses = 0

    def _spill_over_limit(self) -> None:
        while self._memory_bytes > self.max_memory and self._memory:
            path, table = self._memory.popitem(last=False)
            self._memory_bytes -= table.nbytes
            if self._spill_dir is None:
                self._spill_dir = tempfile.mkdtemp(prefix="changelake-lookup-")
            local = os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.arrow")
            with pa.OSFile(local, "wb") as sink, ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            self._spilled[path] = local


_CACHES: dict[tuple[str, int], LookupCache] = {}
_CACHES_LOCK = threading.Lock()


def cache_for(location: str, max_memory: int, schema_id: int) -> LookupCache:
    """The process's lookup cache of the table at ``location`` (one per table, shared by its
    writers and compactions; its limit follows the latest ``lookup.cache-max-memory-size``).
    Files are cached in the layout of a schema, so each schema has its own cache; a newer
    schema's cache replaces the older ones (writers still on an older schema keep theirs)."""
    with _CACHES_LOCK:
        cache = _CACHES.get((location, schema_id))
        if cache is None:
            for key in [k for k in _CACHES if k[0] == location and k[1] < schema_id]:
                del _CACHES[key]
            cache = _CACHES[(location, schema_id)] = LookupCache(max_memory)
        cache.max_memory = max_memory
        return cache
