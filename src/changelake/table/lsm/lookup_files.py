"""Local lookup files: what compactions look up in a bucket's files, kept on this machine so
that it is not decoded from the table's storage again (Paimon's ``LookupLevels`` with its local
lookup files, bounded by ``lookup.cache-max-memory-size`` and ``lookup.cache-max-disk-size``).

Data files are immutable and uniquely named, so a file's rows never go stale. Two things are
kept per file, by its path:

* its whole rows (data-file layout), for the lookups that need values (merge engines that
  merge with the previous row, the ``lookup`` and ``full-compaction`` changelog producers) and
  for the compaction that merges the file next;
* only its key columns, for the lookups of deletion vectors, which need a key's position in a
  file alone (files above level 0 are sorted by key with unique keys, so the position of a row
  is its index): a fraction of the bytes.

Rows come from the writer and the compactions as they write a file (no decoding), or from
storage on a miss. They stay in memory, least recently used first out, up to the memory limit;
beyond it they are spilled to a local temp directory as Arrow IPC files (only the key columns
when no lookup of the table needs values) and memory-mapped when used again: the pages are read
from local disk as the columns are searched, and are not the process's own memory. A spilled
file is mapped once and stays mapped (each lookup would otherwise open it again, fault its
pages in anew and wait on the store's lock meanwhile); the pages lookups made resident count
in the process's RSS, so they count toward the memory limit with the rows held in memory, and
those of the least recently used mapped files are released beyond it (``MADV_DONTNEED``: the
kernel's page cache keeps them, a later lookup maps them again). Spilled files beyond the
disk limit are deleted, least recently used first, and so are those not used for
``lookup.cache-file-retention`` (read again from storage on the next miss). Files a compaction
removed from the table are dropped.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import shutil
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc as ipc

from changelake.option_values import ChangelogProducer
from changelake.table.context import TableContext
from changelake.table.format.manifest import DataFileMeta
from changelake.table.io import scratch

# A file whose rows take more than this share of the memory limit goes straight to disk: one
# big compaction output must not push every other file out.
_LARGEST_IN_MEMORY_SHARE = 4
# At most this many spilled files stay mapped (each mapping holds a file descriptor).
_MAX_MAPPED = 256


@dataclass(frozen=True)
class _Spilled:
    """A file's rows (or only its key columns) in a local Arrow IPC file."""

    local: str
    size: int
    whole: bool
    used: float  # when it was last used (time.monotonic)


@dataclass(frozen=True)
class _Mapped:
    """A spilled file mapped into memory, and its rows (zero-copy views of the mapping)."""

    mapping: mmap.mmap
    rows: pa.Table

    def release(self) -> None:
        """Let the kernel take back the resident pages (the mapping and its rows stay valid:
        the next use maps the pages again from the page cache or the file)."""
        self.mapping.madvise(mmap.MADV_DONTNEED)


class LookupFiles:
    """The lookup files of one table (in one schema's data-file layout), counting hits and
    misses; ``clear`` drops everything, spilled files too."""

    def __init__(self, key_columns: Sequence[str], *, max_memory: int, max_disk: int, values: bool,
                 retention_ms: int = 3_600_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.key_columns = list(key_columns)
        self.max_memory = max_memory
        self.max_disk = max_disk
        self.retention_ms = retention_ms  # spilled files unused this long are deleted
        self._clock = clock
        # whether lookups need whole rows: spilled files keep only the key columns when not
        self.values = values
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, pa.Table] = OrderedDict()  # path -> whole rows
        self._memory_bytes = 0
        self._keys: OrderedDict[str, pa.Table] = OrderedDict()  # path -> key columns read alone
        self._spilled: OrderedDict[str, _Spilled] = OrderedDict()
        self._disk_bytes = 0
        self._mapped_files: OrderedDict[str, _Mapped] = OrderedDict()  # spilled files kept mapped
        # mapped files whose pages lookups may have made resident (least recently used first), by size
        self._resident: OrderedDict[str, int] = OrderedDict()
        self._resident_bytes = 0
        self._spill_dir: str | None = None
        self._remove_spill_dir: weakref.finalize[..., LookupFiles] | None = None

    @property
    def hit_rate(self) -> float:
        """Hits over lookups so far (0.0 before the first)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    @property
    def memory_bytes(self) -> int:
        """Bytes of the rows held in memory."""
        return self._memory_bytes

    @property
    def disk_bytes(self) -> int:
        """Bytes of the spilled files on local disk."""
        return self._disk_bytes

    @property
    def resident_bytes(self) -> int:
        """Bytes of the mapped spilled files whose pages lookups may hold resident: within the
        memory limit with :attr:`memory_bytes`, but for the file used last."""
        return self._resident_bytes

    def __contains__(self, path: object) -> bool:
        """Whether anything of the file at ``path`` is kept (in memory or on local disk)."""
        with self._lock:
            return path in self._memory or path in self._keys or path in self._spilled

    def find(self, path: str) -> pa.Table | None:
        """The whole rows of the file at ``path`` if kept (not counted as a lookup)."""
        with self._lock:
            return self._whole(path)

    def rows(self, path: str, load: Callable[[], pa.Table]) -> pa.Table:
        """The whole rows of the file at ``path``: kept, else ``load()``-ed and kept."""
        with self._lock:
            rows = self._counted(self._whole(path))
        if rows is not None:
            return rows
        rows = load()  # outside the lock: other buckets' compactions go on meanwhile
        self.put(path, rows)
        return rows

    def keys(self, path: str, load: Callable[[], pa.Table]) -> pa.Table:
        """The key columns of the file at ``path``: kept (alone or with the whole rows), else
        ``load()``-ed (the key columns only) and kept."""
        with self._lock:
            keys = self._counted(self._key_columns(path))
        if keys is not None:
            return keys
        # one chunk: a binary search maps the column as it is, without concatenating it first
        keys = load().select(self.key_columns).combine_chunks()
        with self._lock:
            if path not in self._memory and path not in self._keys and path not in self._spilled:
                self._keys[path] = keys
                self._memory_bytes += keys.nbytes
                self._bound()
        return keys

    def put(self, path: str, rows: pa.Table) -> None:
        """Keep the rows of a file just written or read (not counted as a lookup)."""
        with self._lock:
            spilled = self._spilled.get(path)
            if path in self._memory or (spilled is not None and (spilled.whole or not self.values)):
                return  # kept already as well as it would be now (the producer and compaction both put)
            keys = self._keys.pop(path, None)  # the whole rows replace the key columns alone
            if keys is not None:
                self._memory_bytes -= keys.nbytes
            self._drop_spilled(path)
            if rows.nbytes * _LARGEST_IN_MEMORY_SHARE > self.max_memory:
                self._spill(path, rows)
            else:
                self._memory[path] = rows
                self._memory_bytes += rows.nbytes
            self._bound()

    def put_file(self, bucket_dir: str, f: DataFileMeta, rows: pa.Table) -> None:
        """Keep the ``rows`` of data file ``f`` just written in ``bucket_dir``."""
        self.put(path_of(bucket_dir, f.file_name), rows)

    def discard(self, paths: Iterable[str]) -> None:
        """Forget files a compaction removed from the table."""
        with self._lock:
            for path in paths:
                for held in (self._memory, self._keys):
                    table = held.pop(path, None)
                    if table is not None:
                        self._memory_bytes -= table.nbytes
                self._drop_spilled(path)

    def clear(self) -> None:
        """Drop every kept file (spilled ones too) and reset the counts."""
        with self._lock:
            self._memory.clear()
            self._keys.clear()
            self._memory_bytes = 0
            self._spilled.clear()
            self._disk_bytes = 0
            self._mapped_files.clear()
            self._resident.clear()
            self._resident_bytes = 0
            if self._remove_spill_dir is not None:
                self._remove_spill_dir()
                self._spill_dir = self._remove_spill_dir = None
            self.hits = self.misses = 0

    def _counted(self, found: pa.Table | None) -> pa.Table | None:
        self._expire()
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found

    def _whole(self, path: str) -> pa.Table | None:
        rows = self._memory.get(path)
        if rows is not None:
            self._memory.move_to_end(path)
            return rows
        spilled = self._spilled.get(path)
        if spilled is None or not spilled.whole:
            return None
        return self._mapped(path, spilled)

    def _key_columns(self, path: str) -> pa.Table | None:
        rows = self._memory.get(path)
        if rows is not None:
            self._memory.move_to_end(path)
            return rows.select(self.key_columns)
        keys = self._keys.get(path)
        if keys is not None:
            self._keys.move_to_end(path)
            return keys
        spilled = self._spilled.get(path)
        return None if spilled is None else self._mapped(path, spilled).select(self.key_columns)

    def _mapped(self, path: str, spilled: _Spilled) -> pa.Table:
        self._spilled[path] = dataclasses.replace(spilled, used=self._clock())
        self._spilled.move_to_end(path)
        mapped = self._mapped_files.get(path)
        if mapped is None:
            # Memory-mapped: the pages are read from local disk as the columns are used.
            with open(spilled.local, "rb") as file:
                mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            rows = ipc.open_file(pa.BufferReader(pa.py_buffer(mapping))).read_all()
            mapped = self._mapped_files[path] = _Mapped(mapping, rows)
            if len(self._mapped_files) > _MAX_MAPPED:  # unmapped once no lookup uses its rows
                self._forget_mapped(next(iter(self._mapped_files)))
        self._mapped_files.move_to_end(path)
        if path not in self._resident:
            self._resident[path] = spilled.size
            self._resident_bytes += spilled.size
        self._resident.move_to_end(path)
        if self._resident_bytes + self._memory_bytes > self.max_memory:
            while self._resident_bytes + self._memory_bytes > self.max_memory and len(self._resident) > 1:
                oldest, size = self._resident.popitem(last=False)
                self._resident_bytes -= size
                self._mapped_files[oldest].release()
            # A lookup still running in another thread faults the pages of a file released
            # before back in: released again (cheap where none are resident), or they would
            # stay beyond the limit until that file is looked up again.
            for other, kept in self._mapped_files.items():
                if other not in self._resident:
                    kept.release()
        return mapped.rows

    def _forget_mapped(self, path: str) -> None:
        self._mapped_files.pop(path, None)
        size = self._resident.pop(path, None)
        if size is not None:
            self._resident_bytes -= size

    def _bound(self) -> None:
        """Spill the least recently used files over the memory limit, then delete the least
        recently used spilled files over the disk limit."""
        while self._memory_bytes > self.max_memory and (self._memory or self._keys):
            # Key columns read alone go first: they are cheap to read again.
            held = self._keys if self._keys else self._memory
            path, table = held.popitem(last=False)
            self._memory_bytes -= table.nbytes
            self._spill(path, table)
        while self._disk_bytes > self.max_disk and self._spilled:
            self._drop_spilled(next(iter(self._spilled)))
        self._expire()

    def _expire(self) -> None:
        """Delete the spilled files unused for the retention (least recently used lead)."""
        expired = self._clock() - self.retention_ms / 1000
        while self._spilled and next(iter(self._spilled.values())).used < expired:
            self._drop_spilled(next(iter(self._spilled)))

    def _spill(self, path: str, rows: pa.Table) -> None:
        if not self.max_disk:  # nothing goes to disk: the file is read from storage if needed
            return
        whole = self.values and rows.num_columns > len(self.key_columns)
        table = rows if whole else rows.select(self.key_columns).combine_chunks()  # one batch: mapped as is
        if self._spill_dir is None:
            self._spill_dir = scratch.make("lookup")
            # removed when the store is dropped (a newer schema's replaced it) or at exit
            self._remove_spill_dir = weakref.finalize(self, shutil.rmtree, self._spill_dir, ignore_errors=True)
        local = os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.arrow")
        with pa.OSFile(local, "wb") as sink, ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        spilled = _Spilled(local, os.path.getsize(local), whole, self._clock())
        self._spilled[path] = spilled
        self._disk_bytes += spilled.size

    def _drop_spilled(self, path: str) -> None:
        spilled = self._spilled.pop(path, None)
        self._forget_mapped(path)
        if spilled is not None:
            self._disk_bytes -= spilled.size
            # Mapped tables still in use keep their pages: unlinking only frees the name.
            os.unlink(spilled.local)


def path_of(bucket_dir: str, file_name: str) -> str:
    """The key of a data file of ``bucket_dir`` in a table's lookup files."""
    return f"{bucket_dir}/{file_name}"


def looks_up(ctx: TableContext) -> bool:
    """Whether compactions of the table look files up: deletion vectors, the first-row merge
    engine, the ``lookup`` and ``full-compaction`` producers."""
    options = ctx.options
    return options.deletion_vectors_enabled or ctx.merge_engine.needs_lookup or options.changelog_producer in (
        ChangelogProducer.LOOKUP, ChangelogProducer.FULL_COMPACTION)


def _needs_values(ctx: TableContext) -> bool:
    """Whether some lookup of the table needs a file's values, not only its keys."""
    options = ctx.options
    producer = options.changelog_producer in (ChangelogProducer.LOOKUP, ChangelogProducer.FULL_COMPACTION)
    merges_older = options.deletion_vectors_enabled and not ctx.merge_engine.needs_lookup \
        and not ctx.merge_engine.keeps_last_row
    return producer or merges_older


# Tables that look nothing up keep the rows of files just written up to this much: the next
# compactions merge them without decoding them again.
WRITTEN_ROWS_MEMORY = 128 * 1024 * 1024

_STORES: dict[tuple[str, int], LookupFiles] = {}
_STORES_LOCK = threading.Lock()


def store_for(ctx: TableContext) -> LookupFiles | None:
    """The process's lookup files of the table (None for a ``write-only`` one, which never
    compacts), shared by its writers and compactions; its limits follow the latest options.
    A table whose compactions look nothing up keeps only the rows of files just written, in
    memory (at most :data:`WRITTEN_ROWS_MEMORY`, never on disk), for the compactions that merge
    them next. Rows are kept in the layout of a schema, so each schema has its own; a newer
    schema's replaces the older ones (writers still on an older schema keep theirs)."""
    options = ctx.options
    lookups = looks_up(ctx)
    if options.write_only and not lookups:
        return None
    max_memory = options.lookup_cache_max_memory_size if lookups else WRITTEN_ROWS_MEMORY
    max_disk = options.lookup_cache_max_disk_size if lookups else 0
    location = ctx.file_io.url(ctx.paths.metadata_root)  # a branch has its own rows
    with _STORES_LOCK:
        store = _STORES.get((location, ctx.schema.id))
        if store is None:
            for key in [k for k in _STORES if k[0] == location and k[1] < ctx.schema.id]:
                del _STORES[key]
            store = _STORES[(location, ctx.schema.id)] = LookupFiles(
                ctx.key_columns, max_memory=max_memory, max_disk=max_disk, values=_needs_values(ctx))
        store.max_memory = max_memory
        store.max_disk = max_disk
        store.retention_ms = options.lookup_cache_file_retention
        return store
