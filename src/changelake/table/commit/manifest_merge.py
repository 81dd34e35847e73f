"""Manifest compaction: keep the number of manifests a scan reads small as commits pile up.

Minor: consecutive manifests are merged once they add up to ``manifest.target-file-size``,
and the small tail once it has ``manifest.merge-min-count`` files. Full: when small or
delete-carrying manifests add up to ``manifest.full-compaction-threshold-size``, everything is
rewritten as the live files only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from changelake.table.context import TableContext
from changelake.table.format import manifest
from changelake.table.format.manifest import FileKind, ManifestEntry, ManifestFileMeta
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import live_files

WriteManifest = Callable[[Sequence[ManifestEntry]], ManifestFileMeta]


def _entries(ctx: TableContext, metas: Sequence[ManifestFileMeta]) -> list[ManifestEntry]:
    return [e for m in metas for e in live_files.manifest_entries(ctx, m.file_name)]


def _cancel(entries: Sequence[ManifestEntry]) -> list[ManifestEntry]:
    """ADDs and DELETEs of the same file cancel; DELETEs of files added elsewhere remain."""
    added: dict[tuple[bytes, int, int, str], ManifestEntry] = {}
    deleted: dict[tuple[bytes, int, int, str], ManifestEntry] = {}
    for e in entries:
        if e.kind == FileKind.ADD:
            added[e.identifier] = e
        elif e.identifier in added:
            del added[e.identifier]
        else:
            deleted[e.identifier] = e
    return [*deleted.values(), *added.values()]


def _write_rolling(entries: list[ManifestEntry], per_file: int, write: WriteManifest) -> list[ManifestFileMeta]:
    written = []
    for i in range(0, len(entries), max(1, per_file)):
        written.append(write(entries[i : i + per_file]))
        killpoints.reached(KillPoint.MANIFEST_COMPACTION)
    return written


def merge(ctx: TableContext, metas: list[ManifestFileMeta], write: WriteManifest) -> list[ManifestFileMeta]:
    """The manifests a new snapshot's base list should name instead of ``metas``."""
    options = ctx.options
    target = options.manifest_target_file_size
    total_entries = sum(m.num_added_files + m.num_deleted_files for m in metas)
    bytes_per_entry = max(1, sum(m.file_size for m in metas) // max(1, total_entries))
    per_file = max(1, target // bytes_per_entry)
    unsettled = sum(m.file_size for m in metas if m.num_deleted_files or m.file_size < target)
    if unsettled >= options.manifest_full_compaction_size and len(metas) > 1:
        live = list(manifest.merge_entries(_entries(ctx, metas)).values())
        return _write_rolling(live, per_file, write)
    result: list[ManifestFileMeta] = []
    candidates: list[ManifestFileMeta] = []
    size = 0

    def flush() -> None:
        if len(candidates) == 1:
            result.append(candidates[0])
        elif candidates:
            result.extend(_write_rolling(_cancel(_entries(ctx, candidates)), per_file, write))
        candidates.clear()

    for meta in metas:
        candidates.append(meta)
        size += meta.file_size
        if size >= target:
            flush()
            size = 0
    if len(candidates) >= options.manifest_merge_min_count:
        flush()
    else:
        result.extend(candidates)
    return result
