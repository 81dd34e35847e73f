"""The data files a snapshot consists of, read through a cache of immutable manifests."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TypeVar

from changelake.table.context import TableContext
from changelake.table.format import manifest
from changelake.table.format.manifest import DataFileMeta, ManifestEntry, ManifestFileMeta
from changelake.table.format.snapshot import Snapshot
from changelake.table.io.cache import ManifestCache

_T = TypeVar("_T")


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
