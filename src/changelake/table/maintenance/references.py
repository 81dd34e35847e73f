"""Which files a table still needs: everything named by a snapshot, tag or long-lived changelog
of the table or of any of its branches (Paimon's ``OrphanFilesClean``: its
``collectWithoutDataFile`` for every valid branch, plus the data and changelog files of every
manifest entry, ADD or DELETE). A branch shares the table's manifest and bucket directories, so
the files its snapshots name are the table's files too."""

from __future__ import annotations

from collections.abc import Iterable

from changelake.errors import CorruptMetadataError
from changelake.table import decoupled_changelog, metadata
from changelake.table.context import TableContext
from changelake.table.format.snapshot import Snapshot
from changelake.table.read import deletion_vectors, live_files


def long_lived_changelogs(ctx: TableContext) -> list[Snapshot]:
    """The ``changelog/changelog-N`` files (snapshot-shaped JSON), oldest first (one expired
    meanwhile is left out)."""
    return [c for i in decoupled_changelog.ids(ctx) if (c := decoupled_changelog.read(ctx, i)) is not None]


def files_in_use(ctx: TableContext) -> set[str]:
    """The files of every snapshot, tag and long-lived changelog of the table and of its
    branches."""
    return _files_of_history(ctx) | files_of_branches(ctx)


def files_of_branches(ctx: TableContext) -> set[str]:
    """The files the snapshots, tags and long-lived changelogs of the other lines of the
    table's history name (:func:`metadata.other_lines`: of a table, its branches, empty
    without; of a branch, the table and its other branches): expiry, rollback and orphan
    cleanup of ``ctx`` keep them."""
    used: set[str] = set()
    for branch in metadata.other_lines(ctx):
        used |= _files_of_history(branch)
    return used


def _files_of_history(ctx: TableContext) -> set[str]:
    """The files of every snapshot, tag and long-lived changelog of ``ctx`` (the table, or a
    branch), read while writers may expire snapshots and changelogs: one whose metadata
    vanishes while it is read has been expired meanwhile, and what it alone named is being
    deleted with it (or is an orphan already), so it is passed over. Tags are never passed
    over: a tag whose metadata is missing is an error."""
    used = files_of_all(ctx, metadata.tags(ctx).values())
    for snap in metadata.snapshots(ctx):
        try:
            used |= files_of(ctx, snap)
        except CorruptMetadataError:
            if ctx.file_io.exists(ctx.paths.snapshot(snap.id)):
                raise
    for changelog in long_lived_changelogs(ctx):
        try:
            used |= files_of_changelog(ctx, changelog)
        except CorruptMetadataError:
            if ctx.file_io.exists(ctx.paths.changelog(changelog.id)):
                raise
    return used


def _named(ctx: TableContext, list_name: str, *, with_entries: bool = True) -> set[str]:
    """A manifest list, its manifests and (``with_entries``) the data or changelog files of
    their entries, with extra files."""
    used = {ctx.paths.manifest(list_name)}
    for meta in live_files.manifest_list(ctx, list_name):
        used.add(ctx.paths.manifest(meta.file_name))
        if not with_entries:
            continue
        for entry in live_files.manifest_entries(ctx, meta.file_name):
            used.update(ctx.entry_paths(entry))  # extra files lie beside their data file
    return used


def files_of(ctx: TableContext, snapshot: Snapshot) -> set[str]:
    """Full paths of the files a snapshot or tag names: its manifest lists, their manifests,
    and the data and changelog files of every entry (DELETE entries too: superset is safe);
    the index manifest, its index files and the statistics file when set."""
    used = _named(ctx, snapshot.base_manifest_list) | _named(ctx, snapshot.delta_manifest_list)
    # A tag holds its data files, not its changelog: expiry deleted the changelog of a tagged
    # snapshot that expired (as Paimon's SnapshotDeletion does), so a missing list is fine.
    changelog = snapshot.changelog_manifest_list
    if changelog is not None and ctx.file_io.exists(ctx.paths.manifest(changelog)):
        used |= _named(ctx, changelog)
    index_manifests, index_files = deletion_vectors.index_files_of(ctx, snapshot)
    used.update(ctx.paths.manifest(name) for name in index_manifests)
    used |= index_files
    if snapshot.statistics is not None:
        used.add(f"{ctx.paths.root}/statistics/{snapshot.statistics}")
    return used


def files_of_changelog(ctx: TableContext, changelog: Snapshot) -> set[str]:
    """The files a long-lived changelog still names: its changelog manifests and files; and
    when it kept its data manifests (no producer), those, with the files of its delta. (Its
    base manifests may be gone already: the expiry of an older changelog deletes the ones
    they share, as Paimon's ``ChangelogDeletion`` does, so only the base list's own names
    count.)"""
    used = set() if changelog.changelog_manifest_list is None else _named(ctx, changelog.changelog_manifest_list)
    if ctx.file_io.exists(ctx.paths.manifest(changelog.delta_manifest_list)):
        used |= _named(ctx, changelog.delta_manifest_list)
        used |= _named(ctx, changelog.base_manifest_list, with_entries=False)
    return used


def files_of_all(ctx: TableContext, snapshots_: Iterable[Snapshot]) -> set[str]:
    """The union of :func:`files_of` over ``snapshots_`` (manifests are read once each)."""
    used: set[str] = set()
    for snap in snapshots_:
        used |= files_of(ctx, snap)
    return used
