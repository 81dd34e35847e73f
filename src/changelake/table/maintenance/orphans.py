"""Orphan-file cleanup (Paimon's ``OrphanFilesClean``): delete the files no snapshot, tag,
long-lived changelog or schema names, left by writers that crashed or gave up, once they are
older than a threshold.

What is listed: the manifest directory, every bucket directory (under the partition
directories), and non-metadata files in ``snapshot/`` and ``changelog/`` of the table and of
each branch (temp files; Paimon's rule), plus our own temp files in ``schema/``, ``tag/``,
``consumer/`` and ``commit-user/``, and the index files in ``index/`` that no index manifest
names. ``statistics/`` is left alone: changelake does not write it. Directories are left in
place (removing an empty bucket directory races with a writer about to create a file in it).

Branches (``branch/branch-<name>/``, made by Paimon or pypaimon) share the table's manifest,
index and bucket directories: whatever a branch's snapshots, tags and changelogs name is in
use, as in Paimon's ``OrphanFilesClean``, which collects the used files of every branch.

Concurrent writers: a file newer than the threshold is never deleted, so a writer's files are
safe while its commit takes less time than the threshold (the default, one day, as Paimon's).
References are read before the files are listed, so a file committed meanwhile is new.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.maintenance import references

DEFAULT_OLDER_THAN = dt.timedelta(days=1)
_BUCKET = re.compile(r"^bucket-(\d+|postpone)$")
_OUR_TEMP = re.compile(r"\.[0-9a-f]{32}\.tmp$")  # FileIO.create_if_absent / overwrite_hint


def threshold_ms(older_than: dt.datetime | dt.timedelta | None) -> int:
    """The cut-off time in epoch milliseconds: files modified before it may go."""
    now = dt.datetime.now(dt.UTC)
    if older_than is None:
        older_than = DEFAULT_OLDER_THAN
    if isinstance(older_than, dt.timedelta):
        cutoff = now - older_than
    else:
        cutoff = older_than if older_than.tzinfo is not None else older_than.astimezone()
    return int(cutoff.timestamp() * 1000)


def _modified_ms(info: dict[str, Any]) -> int | None:
    """A listing entry's modification time (None when the filesystem does not say)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        value = info.get(key)
        if isinstance(value, int | float):
            return int(value * 1000)
        if isinstance(value, dt.datetime):
            return int(value.timestamp() * 1000)
    return None


def _listing(ctx: TableContext, directory: str) -> list[dict[str, Any]]:
    return ctx.file_io.list_entries(directory)


def _not_our_temp(name: str) -> bool:
    return not _OUR_TEMP.search(name)


def _name(info: dict[str, Any]) -> str:
    return str(info["name"]).rstrip("/").rsplit("/", 1)[-1]


def _is_dir(info: dict[str, Any]) -> bool:
    return info.get("type") == "directory"


def _bucket_dirs(ctx: TableContext, directory: str, depth: int) -> list[str]:
    """The bucket directories below ``directory`` with ``depth`` partition levels to go."""
    found: list[str] = []
    for info in _listing(ctx, directory):
        if not _is_dir(info):
            continue
        name, path = _name(info), f"{directory}/{_name(info)}"
        if depth == 0 and _BUCKET.match(name):
            found.append(path)
        elif depth > 0 and "=" in name:
            found.extend(_bucket_dirs(ctx, path, depth - 1))
    return found


def _candidates(ctx: TableContext, used: set[str],
                progress: Callable[[int, int], None] | None) -> list[tuple[str, int | None]]:
    """Every listed file that nothing names, with its modification time; ``progress`` gets
    (directories listed, directories)."""
    root = ctx.paths.root
    keep_metadata: dict[str, Callable[[str], bool]] = {
        ctx.paths.schema_dir: _not_our_temp,
        ctx.paths.tag_dir: _not_our_temp,
        ctx.paths.consumer_dir: _not_our_temp,
        **{f"{ctx.paths.commit_user_dir}/{_name(i)}": _not_our_temp
           for i in _listing(ctx, ctx.paths.commit_user_dir) if _is_dir(i)},
    }
    for paths in [ctx.paths, *(branch.paths for branch in metadata.branches(ctx))]:
        keep_metadata[paths.snapshot_dir] = lambda n: n.startswith("snapshot-") or n in ("EARLIEST", "LATEST")
        keep_metadata[paths.changelog_dir] = lambda n: n.startswith("changelog-") or n in ("EARLIEST", "LATEST")
    data_dirs = [ctx.paths.manifest_dir, ctx.paths.index_dir, *_bucket_dirs(ctx, root, len(ctx.partition_keys))]
    total = len(keep_metadata) + len(data_dirs)
    found: list[tuple[str, int | None]] = []
    for listed, (directory, keep) in enumerate(keep_metadata.items(), start=1):
        found.extend((f"{directory}/{_name(i)}", _modified_ms(i)) for i in _listing(ctx, directory)
                     if not _is_dir(i) and not keep(_name(i)))
        if progress is not None:
            progress(listed, total)
    for listed, directory in enumerate(data_dirs, start=len(keep_metadata) + 1):
        for info in _listing(ctx, directory):
            path = f"{directory}/{_name(info)}"
            if not _is_dir(info) and path not in used:
                found.append((path, _modified_ms(info)))
        if progress is not None:
            progress(listed, total)
    return found


def remove_orphan_files(ctx: TableContext, older_than: dt.datetime | dt.timedelta | None, *,
                        dry_run: bool, progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Delete (or with ``dry_run`` only list) the orphan files modified before ``older_than``
    (a time, or an age; default one day); returns their paths, sorted. ``progress`` gets
    (directories listed, directories) while the table's directories are searched."""
    cutoff = threshold_ms(older_than)
    used = references.files_in_use(ctx)
    orphans = sorted(path for path, modified in _candidates(ctx, used, progress)
                     if modified is not None and modified < cutoff)
    if not dry_run:
        for path in orphans:
            killpoints.reached(KillPoint.ORPHAN_FILE)
            ctx.file_io.delete(path)
    return orphans
