"""Branches (Paimon's ``FileSystemBranchManager``): create, delete and list a table's branches,
and fast-forward a line of the table's history to a branch.

A branch lives in ``branch/branch-<name>/`` (snapshots, schemas, tags, changelogs, consumers;
:class:`TablePaths`); its manifests, index and data files are the table's. A branch made empty
holds the table's schemas up to the latest and no snapshot; one made from a tag holds the tag,
the tagged snapshot and the schemas up to its schema (Paimon 1.x); one made from a snapshot
the snapshot and its schemas (as Paimon 0.8's ``createBranch(name, snapshotId)``).

Crash safety (every operation has kill points, ``tests/reliability``):

- create: the branch is written in a staging directory (``branch/.branch-<name>.<uuid>.tmp``,
  which no engine reads as a branch) and renamed into place, so a crash leaves no branch or the
  whole one (on object stores, where a rename is a copy key by key, the schemas land first,
  then the snapshot, then the tag: a part is an empty branch, or one without its tag);
- delete: the snapshots and tags go first, newest first, so a crash leaves a branch that reads
  (an empty one at worst) and is deleted by running the deletion again;
- fast-forward: the target's snapshots from the branch's earliest on that differ from the
  branch's go newest first, so the target reads as a prefix of its history; then its tags of
  those snapshots; then the branch's schemas, snapshots (oldest first) and tags are copied in,
  each file replaced whole, so the target reads as the prefix of the branch's history copied so
  far. Running it again completes it.
"""

from __future__ import annotations

import uuid

from changelake.errors import (
    BranchAlreadyExistsError,
    BranchNotFoundError,
    CommitConflictError,
    InvalidBranchNameError,
    SnapshotNotFoundError,
)
from changelake.table import metadata
from changelake.table.context import TableContext
from changelake.table.format import snapshot as snapshot_file
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.io.paths import TablePaths

MAIN = "main"  # Paimon's default branch: the table itself


def _name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a new branch (Paimon's ``BranchManager.validateBranch``, plus
    no path separators: the name is a directory's), or None."""
    if not isinstance(name, str) or not name.strip():
        return "is blank"
    if name == MAIN:
        return "is the default branch, the table itself"
    if name.isdigit():
        return "is a pure number, which Paimon forbids"
    if "/" in name or "\\" in name or name in (".", ".."):
        return "holds a path separator"
    return None


def exists(ctx: TableContext, name: str) -> bool:
    """Whether the table has branch ``name``."""
    return _name_problem(name) is None and ctx.file_io.exists(TablePaths(ctx.paths.root, name).metadata_root)


def checked(ctx: TableContext, name: str) -> TableContext:
    """The context of existing branch ``name`` (BranchNotFoundError naming it otherwise);
    ``main`` is the table itself."""
    if name == MAIN:
        return metadata.main_context(ctx)
    if not exists(ctx, name):
        raise BranchNotFoundError(f"has no branch {name!r}", table=metadata.main_name(ctx))
    return metadata.branch_context(ctx, name)


def create(ctx: TableContext, name: str, *, from_tag: str | None = None, from_snapshot: int | None = None) -> None:
    """Create branch ``name`` of the table ``ctx`` is (or is a branch of): empty, or from a tag
    or a snapshot of ``ctx``'s line. Nothing changes on an invalid or taken name, or a missing
    tag or snapshot."""
    table = metadata.main_name(ctx)
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidBranchNameError(f"branch name {name!r} {problem}", table=table)
    if from_tag is not None and from_snapshot is not None:
        raise ValueError("create_branch takes at most one of from_tag and from_snapshot")
    if exists(ctx, name):
        raise BranchAlreadyExistsError(f"already has a branch {name!r}", table=table)
    files: dict[str, bytes] = {}  # path under the branch directory -> content
    start: Snapshot | None = None
    if from_tag is not None:
        start = Snapshot.model_validate(metadata.tag(ctx, from_tag).model_dump())
        files[f"tag/tag-{from_tag}"] = ctx.file_io.read_bytes(ctx.paths.tag(from_tag))
    elif from_snapshot is not None:
        start = ctx.snapshot(from_snapshot)
    if start is not None:
        try:
            files[f"snapshot/snapshot-{start.id}"] = ctx.file_io.read_bytes(ctx.paths.snapshot(start.id))
        except FileNotFoundError:  # expired, while the tag keeps its files: written from the tag
            files[f"snapshot/snapshot-{start.id}"] = start.to_json().encode("utf-8")
    last_schema = metadata.latest_schema_id(ctx.file_io, ctx.paths, ctx.name) if start is None else start.schema_id
    for schema_id in range(last_schema + 1):  # the files of older schemas may still be read
        if ctx.file_io.exists(ctx.paths.schema(schema_id)):
            files[f"schema/schema-{schema_id}"] = ctx.file_io.read_bytes(ctx.paths.schema(schema_id))
    staging = f"{ctx.paths.branch_dir}/.branch-{name}.{uuid.uuid4().hex}.tmp"
    for relative, content in sorted(files.items()):
        ctx.file_io.write_bytes(f"{staging}/{relative}", content)
    killpoints.reached(KillPoint.BRANCH_CREATED)
    target = TablePaths(ctx.paths.root, name).metadata_root
    if ctx.file_io.exists(target):  # another process made it meanwhile
        ctx.file_io.delete_tree(staging)
        raise BranchAlreadyExistsError(f"already has a branch {name!r}", table=table)
    ctx.file_io.rename(staging, target)


def delete(ctx: TableContext, name: str) -> None:
    """Delete branch ``name`` (its directory; the table's files it named are left to expiry
    and orphan cleanup of the table, as in Paimon)."""
    if name == MAIN:
        raise InvalidBranchNameError(f"branch name {name!r} is the default branch, the table itself",
                                     table=metadata.main_name(ctx))
    branch = checked(ctx, name)
    io, paths = branch.file_io, branch.paths
    for snapshot_id in reversed(snapshot_file.list_ids(io, paths)):
        killpoints.reached(KillPoint.BRANCH_DELETE)
        io.delete(paths.snapshot(snapshot_id))
    for tag_name in metadata.tags(branch):
        killpoints.reached(KillPoint.BRANCH_DELETE)
        io.delete(paths.tag(tag_name))
    io.delete_tree(paths.metadata_root)


def fast_forward(ctx: TableContext, name: str) -> None:
    """Replace ``ctx``'s snapshots, schemas and tags from branch ``name``'s earliest snapshot on
    with the branch's (Paimon's ``fastForward``): ``ctx`` then reads as the branch does. Stop
    writers of ``ctx`` first. A file both already hold alike is left in place; the files only
    the replaced snapshots named are left for orphan cleanup, as in Paimon."""
    table = metadata.main_name(ctx)
    if name == MAIN or (isinstance(name, str) and not name.strip()):
        raise InvalidBranchNameError(f"branch name {name!r} cannot be fast-forwarded to", table=table)
    if name == ctx.paths.branch:
        raise InvalidBranchNameError(f"branch {name!r} cannot be fast-forwarded to itself", table=table)
    branch = checked(ctx, name)
    io, here, there = ctx.file_io, ctx.paths, branch.paths
    snapshots = {i: io.read_bytes(there.snapshot(i)) for i in snapshot_file.list_ids(io, there)}
    if not snapshots:
        raise SnapshotNotFoundError(f"branch {name!r} has no snapshot to fast-forward to", table=table)
    earliest = snapshot_file.parse(snapshots[min(snapshots)], there.snapshot(min(snapshots)))
    below = [i for i in snapshot_file.list_ids(io, here) if i < earliest.id]
    # The snapshots kept below the branch's start must be its history: one committed after the
    # branch's earliest snapshot (the table rolled back past the branch's start and written
    # since) is not, and the two lines joined would have expiry delete files the branch's
    # snapshots read and lose schemas that snapshot reads. Refused before anything changes.
    if below and ctx.snapshot(below[-1]).time_millis > earliest.time_millis:
        raise CommitConflictError(
            f"snapshot {below[-1]} was committed after branch {name!r}'s earliest snapshot {earliest.id} "
            "(rolled back past the branch's start and written since): it is not the branch's history, so the "
            "branch cannot be fast-forwarded to; roll back before it first", table=table)
    schemas = {i: io.read_bytes(there.schema(i)) for i in metadata.schema_ids(io, there)}
    tags = {n: io.read_bytes(there.tag(n)) for n in metadata.tags(branch)}

    def differs(path: str, content: bytes | None) -> bool:
        try:
            return io.read_bytes(path) != content
        except FileNotFoundError:
            return content is not None

    def delete(path: str) -> None:
        killpoints.reached(KillPoint.FAST_FORWARD)
        io.delete(path)

    def copy(path: str, content: bytes) -> None:
        killpoints.reached(KillPoint.FAST_FORWARD)
        io.overwrite_hint(path, content.decode("utf-8"))  # replaced whole, as a hint is

    io.delete(f"{here.snapshot_dir}/{snapshot_file.LATEST}")  # it may name a snapshot about to go
    # Newest first: the table reads as a prefix of its own history until the branch's lands.
    for snapshot_id in reversed(snapshot_file.list_ids(io, here)):
        if snapshot_id >= earliest.id and differs(here.snapshot(snapshot_id), snapshots.get(snapshot_id)):
            delete(here.snapshot(snapshot_id))
    for tag_name, tagged in metadata.tags(ctx).items():
        if tagged.id >= earliest.id and differs(here.tag(tag_name), tags.get(tag_name)):
            delete(here.tag(tag_name))
    # Schemas before the snapshots that use them; the snapshots left use only ids both share.
    for schema_id, content in sorted(schemas.items()):
        if schema_id >= earliest.schema_id and differs(here.schema(schema_id), content):
            copy(here.schema(schema_id), content)
    for schema_id in metadata.schema_ids(io, here):
        if schema_id >= earliest.schema_id and schema_id not in schemas:
            delete(here.schema(schema_id))
    for snapshot_id, content in sorted(snapshots.items()):  # oldest first: a prefix of the branch's
        if differs(here.snapshot(snapshot_id), content):
            copy(here.snapshot(snapshot_id), content)
    for tag_name, content in sorted(tags.items()):
        if differs(here.tag(tag_name), content):
            copy(here.tag(tag_name), content)
    snapshot_file.commit_hint(io, here, snapshot_file.LATEST, max(snapshots))
    snapshot_file.commit_hint(io, here, snapshot_file.EARLIEST, snapshot_file.list_ids(io, here)[0])
