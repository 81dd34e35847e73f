"""Which files a table still needs: everything named by a snapshot, tag or long-lived changelog
(Paimon's ``OrphanFilesClean.collectWithoutDataFile`` plus the data and changelog files of
every manifest entry, ADD or DELETE)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from changelake.errors import CorruptMetadataError
from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.format import snapshot as snapshots
from changelake.table.format.snapshot import Snapshot
from changelake.table.read import live_files

_CHANGELOG_FILE = re.compile(r"^changelog-(\d+)$")


def changelog_dir(ctx: TableContext) -> str:
    """Where Paimon keeps changelog metadata that outlived its snapshot (``changelog-N``)."""
    return f"{ctx.paths.root}/changelog"


def long_lived_changelogs(ctx: TableContext) -> list[Snapshot]:
    """The ``changelog/changelog-N`` files (snapshot-shaped JSON), oldest first."""
    directory = changelog_dir(ctx)
    ids = sorted(int(m.group(1)) for n in ctx.file_io.list_names(directory) if (m := _CHANGELOG_FILE.match(n)))
    return [snapshots.parse(ctx.file_io.read_bytes(f"{directory}/changelog-{i}"), f"{directory}/changelog-{i}")
            for i in ids]


def retained(ctx: TableContext) -> list[Snapshot]:
    """Every snapshot, tag and long-lived changelog: what decides which files must stay."""
    return [*metadata.snapshots(ctx), *metadata.tags(ctx).values(), *long_lived_changelogs(ctx)]


def files_in_use(ctx: TableContext) -> set[str]:
    """The files of :func:`retained`, read while writers may expire snapshots and changelogs:
    one whose metadata vanishes while it is read has been expired meanwhile, and what it alone
    named is being deleted with it (or is an orphan already), so it is passed over. Tags are
    never passed over: a tag whose metadata is missing is an error."""
    used = files_of_all(ctx, metadata.tags(ctx).values())
    expirable = [(snap, ctx.paths.snapshot(snap.id)) for snap in metadata.snapshots(ctx)]
    expirable += [(c, f"{changelog_dir(ctx)}/changelog-{c.id}") for c in long_lived_changelogs(ctx)]
    for snap, path in expirable:
        try:
            used |= files_of(ctx, snap)
        except CorruptMetadataError:
            if ctx.file_io.exists(path):
                raise
    return used


def files_of(ctx: TableContext, snapshot: Snapshot) -> set[str]:
    """Full paths of the files ``snapshot`` names: its manifest lists, their manifests, and the
    data and changelog files of every entry (DELETE entries too: superset is safe), with
    their extra files; the index manifest and statistics file when set."""
    used = {ctx.paths.manifest(snapshot.base_manifest_list), ctx.paths.manifest(snapshot.delta_manifest_list)}
    lists = [snapshot.base_manifest_list, snapshot.delta_manifest_list]
    if snapshot.changelog_manifest_list is not None:
        lists.append(snapshot.changelog_manifest_list)
        used.add(ctx.paths.manifest(snapshot.changelog_manifest_list))
    for list_name in lists:
        for meta in live_files.manifest_list(ctx, list_name):
            used.add(ctx.paths.manifest(meta.file_name))
            for entry in live_files.manifest_entries(ctx, meta.file_name):
                directory = ctx.bucket_dir(entry.partition, entry.bucket)
                used.add(f"{directory}/{entry.file.file_name}")
                used.update(f"{directory}/{extra}" for extra in entry.file.extra_files)
    if snapshot.index_manifest is not None:
        used.add(ctx.paths.manifest(snapshot.index_manifest))
    if snapshot.statistics is not None:
        used.add(f"{ctx.paths.root}/statistics/{snapshot.statistics}")
    return used


def files_of_all(ctx: TableContext, snapshots_: Iterable[Snapshot]) -> set[str]:
    """The union of :func:`files_of` over ``snapshots_`` (manifests are read once each)."""
    used: set[str] = set()
    for snap in snapshots_:
        used |= files_of(ctx, snap)
    return used
