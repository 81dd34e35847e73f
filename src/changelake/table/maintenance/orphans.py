"""Orphan-file cleanup (Paimon's ``OrphanFilesClean``): delete the files no snapshot, tag,
long-lived changelog or schema names, left by writers that crashed or gave up, once they are
older than a threshold.

What is listed: the manifest directory, every bucket directory (under the partition
directories), and non-metadata files in ``snapshot/`` and ``changelog/`` of the table and of
each branch (temp files; Paimon's rule), plus our own temp files in ``schema/``, ``tag/``,
``consumer/`` and ``commit-user/``, and the index files in ``index/`` that no index manifest
names. ``statistics/`` is left alone: changelake does not write it. Directories are left in
place (removing an empty bucket directory races with a writer about to create a file in it).
A table's external paths (``data-file.external-paths``) are searched too, their bucket
directories only, and there only files named as data or changelog files go.

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
from collections.abc import Callable, Container, Iterable
from typing import Any

from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.io import external_paths, killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.maintenance import references

DEFAULT_OLDER_THAN = dt.timedelta(days=1)
_BUCKET = re.compile(r"^bucket-(\d+|postpone)$")
_OUR_TEMP = re.compile(r"\.[0-9a-f]{32}\.tmp$")  # FileIO.create_if_absent / overwrite_hint
# where branches.create writes a branch before renaming it into place; one a crash left is
# listed by no engine, and its files are orphans once past the cut-off
_STAGED_BRANCH = re.compile(r"^\.branch-.+\.[0-9a-f]{32}\.tmp$")


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


def metadata_directories(ctx: TableContext) -> dict[str, Callable[[str], bool]]:
    """The metadata directories searched, each with whether a file (by path) is kept there
    (everything else in them is an orphan): snapshots and changelogs (of the table and of each
    branch), and beside schemas, tags, consumers and commit users all but our own temp files."""
    ctx = metadata.main_context(ctx)  # the whole table's, when asked of a branch

    def not_temp(path: str) -> bool:
        return not _OUR_TEMP.search(path)

    def snapshot_file(path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.startswith("snapshot-") or name in ("EARLIEST", "LATEST")

    def changelog_file(path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return name.startswith("changelog-") or name in ("EARLIEST", "LATEST")

    kept: dict[str, Callable[[str], bool]] = {
        ctx.paths.schema_dir: not_temp,
        ctx.paths.tag_dir: not_temp,
        ctx.paths.consumer_dir: not_temp,
        **{f"{ctx.paths.commit_user_dir}/{_name(i)}": not_temp
           for i in _listing(ctx, ctx.paths.commit_user_dir) if _is_dir(i)},
    }
    for paths in [ctx.paths, *(branch.paths for branch in metadata.branches(ctx))]:
        kept[paths.snapshot_dir] = snapshot_file
        kept[paths.changelog_dir] = changelog_file
    for staged in _staged_branches(ctx):
        kept.update({f"{staged}/{_name(i)}": _never for i in _listing(ctx, staged) if _is_dir(i)})
    return kept


def _never(path: str) -> bool:
    return False


def _staged_branches(ctx: TableContext) -> list[str]:
    """The staging directories of branches whose creation never finished."""
    return [f"{ctx.paths.branch_dir}/{_name(i)}" for i in _listing(ctx, ctx.paths.branch_dir)
            if _is_dir(i) and _STAGED_BRANCH.match(_name(i))]


def data_directories(ctx: TableContext) -> list[str]:
    """The directories whose files must each be named by a snapshot, tag or changelog: the
    manifest and index directories and every bucket directory (under
    ``data-file.path-directory`` when set)."""
    return [ctx.paths.manifest_dir, ctx.paths.index_dir,
            *_bucket_dirs(ctx, ctx.data_root, len(ctx.partition_keys))]


def external_directories(ctx: TableContext) -> list[str]:
    """The bucket directories under each external path of the table
    (``data-file.external-paths``, at the bucket's path relative to the table), as Paimon's
    ``OrphanFilesClean`` lists them: whatever data files there no snapshot, tag or changelog
    names are orphans."""
    directory = ctx.options.data_file_path_directory
    roots = [root if not directory else f"{root}/{directory.strip('/')}"
             for root in external_paths.listed_roots(ctx.file_io, ctx.options)]
    return [d for root in dict.fromkeys(roots) if root != ctx.data_root
            for d in _bucket_dirs(ctx, root, len(ctx.partition_keys))]


def kept_externally(ctx: TableContext, used: Container[str]) -> Callable[[str], bool]:
    """Whether a file (by path) in a bucket directory under an external path is kept: ``used``
    holds it, or it is not named as a data or changelog file (an external path may hold files
    that are not the table's: only the table's own kind of file can be its orphan)."""
    prefixes = (ctx.options.data_file_prefix, ctx.options.changelog_file_prefix)

    def kept(path: str) -> bool:
        return path in used or not path.rsplit("/", 1)[-1].startswith(prefixes)
    return kept


def orphans_in(ctx: TableContext, directory: str, is_kept: Callable[[str], bool], cutoff_ms: int) -> list[str]:
    """The paths of the files in ``directory`` that ``is_kept`` (given a file's path) does not
    keep and that were modified before ``cutoff_ms`` (a file whose time the filesystem does
    not give is kept)."""
    found = []
    for info in _listing(ctx, directory):
        path = f"{directory}/{_name(info)}"
        modified = _modified_ms(info)
        if not _is_dir(info) and modified is not None and modified < cutoff_ms and not is_kept(path):
            found.append(path)
    return found


def delete(ctx: TableContext, paths: Iterable[str]) -> None:
    """Delete orphan files (a kill point before each), then the staging directories of
    unfinished branches left empty by it."""
    staged = set()
    for path in paths:
        killpoints.reached(KillPoint.ORPHAN_FILE)
        ctx.file_io.delete(path)
        parts = path.rsplit("/", 3)
        if len(parts) == 4 and _STAGED_BRANCH.match(parts[1]):
            staged.add(f"{parts[0]}/{parts[1]}")
    for directory in sorted(staged):
        if not any(_listing(ctx, f"{directory}/{_name(i)}") for i in _listing(ctx, directory) if _is_dir(i)):
            ctx.file_io.delete_tree(directory)


def remove_orphan_files(ctx: TableContext, older_than: dt.datetime | dt.timedelta | None, *,
                        dry_run: bool, progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Delete (or with ``dry_run`` only list) the orphan files modified before ``older_than``
    (a time, or an age; default one day); returns their paths, sorted. ``progress`` gets
    (directories listed, directories) while the table's directories are searched."""
    cutoff = threshold_ms(older_than)
    used = references.files_in_use(ctx)
    external_kept = kept_externally(ctx, used)
    searches = [*metadata_directories(ctx).items(),
                *((directory, used.__contains__) for directory in data_directories(ctx)),
                *((directory, external_kept) for directory in external_directories(ctx))]
    found: list[str] = []
    for listed, (directory, is_kept) in enumerate(searches, start=1):
        found += orphans_in(ctx, directory, is_kept, cutoff)
        if progress is not None:
            progress(listed, len(searches))
    orphans = sorted(found)
    if not dry_run:
        delete(ctx, orphans)
    return orphans
