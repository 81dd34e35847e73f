"""The data files a snapshot consists of, read through a cache of immutable manifests."""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

from changelake.table.context import TableContext
from changelake.table.format import manifest
from changelake.table.format.manifest import DataFileMeta, ManifestEntry, ManifestFileMeta
from changelake.table.format.snapshot import Snapshot

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


MANIFEST_CACHE = ManifestCache()


def manifest_list(ctx: TableContext, name: str) -> list[ManifestFileMeta]:
    """The manifests a manifest list names."""
    path = ctx.paths.manifest(name)
    return MANIFEST_CACHE.get((ctx.file_io.protocol, path), lambda: manifest.read_manifest_list(ctx.file_io, path))


def manifest_entries(ctx: TableContext, name: str) -> list[ManifestEntry]:
    """The entries of one manifest."""
    path = ctx.paths.manifest(name)
    return MANIFEST_CACHE.get((ctx.file_io.protocol, path), lambda: manifest.read_entries(ctx.file_io, path))


def remember(ctx: TableContext, name: str, parsed: list[ManifestEntry] | list[ManifestFileMeta]) -> None:
    """Cache the parsed contents of the manifest or manifest list ``name`` this process just
    wrote, so that the next commits do not read it back."""
    MANIFEST_CACHE.put((ctx.file_io.protocol, ctx.paths.manifest(name)), parsed)


def data_manifests(ctx: TableContext, snapshot: Snapshot) -> list[ManifestFileMeta]:
    """Base then delta manifests of a snapshot."""
    return manifest_list(ctx, snapshot.base_manifest_list) + manifest_list(ctx, snapshot.delta_manifest_list)


def live_entries(
    ctx: TableContext, snapshot: Snapshot, manifests: Sequence[ManifestFileMeta] | None = None
) -> list[ManifestEntry]:
    """ADD entries of every file live in the snapshot; ``manifests`` narrows the read to some
    of its manifests (those a partition filter leaves)."""
    if manifests is None:
        # A snapshot's manifest lists never change either: its merged entries are cached too
        # (a commit asks for the latest snapshot's when it flushes and again when it lands).
        lists = f"{snapshot.base_manifest_list}+{snapshot.delta_manifest_list}"
        key = (ctx.file_io.protocol, ctx.paths.manifest(lists))
        return list(MANIFEST_CACHE.get(key, lambda: _merged(ctx, data_manifests(ctx, snapshot))))
    return _merged(ctx, manifests)


def _merged(ctx: TableContext, manifests: Sequence[ManifestFileMeta]) -> list[ManifestEntry]:
    entries = [e for meta in manifests for e in manifest_entries(ctx, meta.file_name)]
    return list(manifest.merge_entries(entries).values())


def files_by_bucket(entries: Iterable[ManifestEntry]) -> dict[tuple[bytes, int], list[DataFileMeta]]:
    """Files of each (serialized partition, bucket)."""
    buckets: dict[tuple[bytes, int], list[DataFileMeta]] = defaultdict(list)
    for entry in entries:
        buckets[(entry.partition, entry.bucket)].append(entry.file)
    return buckets
