"""The data files a snapshot consists of, read through a cache of immutable manifests."""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from changelake.table.format import manifest
from changelake.table.format.manifest import DataFileMeta, ManifestEntry, ManifestFileMeta
from changelake.table.format.snapshot import Snapshot

if TYPE_CHECKING:
    from changelake.table.context import TableContext

_T = TypeVar("_T")
_CACHE_SIZE = 512
_cache: OrderedDict[tuple[str, str], object] = OrderedDict()
_lock = threading.Lock()


def _cached(key: tuple[str, str], load: Callable[[], _T]) -> _T:
    # Manifest files never change once written, so a file's parsed content can be reused
    # for as long as it is held; the cache only bounds memory.
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]  # type: ignore[return-value]
    value = load()
    with _lock:
        _cache[key] = value
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return value


def manifest_list(ctx: TableContext, name: str) -> list[ManifestFileMeta]:
    path = ctx.paths.manifest(name)
    return _cached((ctx.file_io.protocol, path), lambda: manifest.read_manifest_list(ctx.file_io, path))


def manifest_entries(ctx: TableContext, name: str) -> list[ManifestEntry]:
    path = ctx.paths.manifest(name)
    return _cached((ctx.file_io.protocol, path), lambda: manifest.read_entries(ctx.file_io, path))


def data_manifests(ctx: TableContext, snapshot: Snapshot) -> list[ManifestFileMeta]:
    """Base then delta manifests of a snapshot."""
    return manifest_list(ctx, snapshot.base_manifest_list) + manifest_list(ctx, snapshot.delta_manifest_list)


def live_entries(
    ctx: TableContext, snapshot: Snapshot, manifests: Sequence[ManifestFileMeta] | None = None
) -> list[ManifestEntry]:
    """ADD entries of every file live in the snapshot; ``manifests`` narrows the read to some
    of its manifests (those a partition filter leaves)."""
    chosen = data_manifests(ctx, snapshot) if manifests is None else manifests
    entries = [e for meta in chosen for e in manifest_entries(ctx, meta.file_name)]
    return list(manifest.merge_entries(entries).values())


def files_by_bucket(entries: Iterable[ManifestEntry]) -> dict[tuple[bytes, int], list[DataFileMeta]]:
    """Files of each (serialized partition, bucket)."""
    buckets: dict[tuple[bytes, int], list[DataFileMeta]] = defaultdict(list)
    for entry in entries:
        buckets[(entry.partition, entry.bucket)].append(entry.file)
    return buckets
