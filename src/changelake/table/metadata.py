"""A table's metadata files beyond data and manifests: schemas, the snapshot history and tags."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import re

import pyarrow as pa
from pydantic import ValidationError

from changelake.errors import (
    CorruptMetadataError,
    InvalidTagNameError,
    OptionError,
    SnapshotNotFoundError,
    TableAlreadyExistsError,
    TableNotFoundError,
    TagAlreadyExistsError,
    TagNotFoundError,
)
from changelake.options import TableOptions
from changelake.table.append import definition as append_definition
from changelake.table.context import TableContext
from changelake.table.format import file_index, snapshot, value_stats
from changelake.table.format import schema as table_schema
from changelake.table.format import tag as tag_file
from changelake.table.format.schema import TableSchema
from changelake.table.format.snapshot import Snapshot
from changelake.table.format.tag import Tag
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths
from changelake.table.merge.parse import (
    check_cross_partition,
    check_deletion_vectors,
    check_streaming_read_overwrite,
    merge_engine,
)

_SCHEMA_FILE = re.compile(r"^schema-(\d+)$")
_TAG_FILE = re.compile(r"^tag-(.+)$")
_BRANCH_DIR = re.compile(r"^branch-(.+)$")


def schema_ids(file_io: FileIO, paths: TablePaths) -> list[int]:
    """The ids of the schema files at ``paths``, sorted."""
    return sorted(int(m.group(1)) for n in file_io.list_names(paths.schema_dir) if (m := _SCHEMA_FILE.match(n)))


def latest_schema_id(file_io: FileIO, paths: TablePaths, name: str) -> int:
    """Id of the newest schema of the table at ``paths``; TableNotFoundError when there is none."""
    ids = schema_ids(file_io, paths)
    if not ids:
        raise TableNotFoundError(f"does not exist (no schema under {paths.schema_dir})", table=name)
    return max(ids)


def read_latest_schema(file_io: FileIO, paths: TablePaths, name: str) -> TableSchema:
    """The newest schema of the table at ``paths``; TableNotFoundError when there is none."""
    path = paths.schema(latest_schema_id(file_io, paths, name))
    try:
        return TableSchema.model_validate_json(file_io.read_text(path))
    except (ValidationError, ValueError) as exc:
        raise CorruptMetadataError(f"schema file is corrupt: {exc}", table=name, file=path) from None


def create_table(
    file_io: FileIO,
    root: str,
    name: str,
    schema: pa.Schema,
    primary_keys: list[str],
    partition_keys: list[str],
    options: dict[str, str],
    comment: str | None,
) -> TableContext:
    """Validate a new table's definition and write its schema 0 (atomically: of two creators,
    one wins and the other gets TableAlreadyExistsError)."""
    # Without ``bucket`` the table has bucket = -1, Paimon's default (dynamic-bucket for a
    # primary-key table, unaware for an append table), stored without the key as Paimon stores it.
    checked = dict(options)
    parsed = TableOptions.parse(checked, table=name, new=True)
    new_schema = table_schema.from_arrow(name, schema, primary_keys, partition_keys, checked, comment)
    for key, columns in (("rowkind.field", (parsed.rowkind_field,)), ("bucket-key", parsed.bucket_key),
                         ("sequence.field", parsed.sequence_field)):
        for column in columns:
            if column is not None and column not in schema.names:
                raise OptionError(f"names unknown column {column!r}", table=name, option=key)
    if parsed.rowkind_field is not None and not pa.types.is_string(schema.field(parsed.rowkind_field).type):
        raise OptionError(f"names column {parsed.rowkind_field!r} of type {schema.field(parsed.rowkind_field).type}; "
                          "a row kind column holds strings (+I, -U, +U, -D)", table=name, option="rowkind.field")
    # Paimon's rules: a key lives in one bucket only if the bucket key is part of the primary
    # key, and partitions are split into buckets by the rest of the key.
    outside = [c for c in parsed.bucket_key if primary_keys and c not in primary_keys]
    if outside:
        raise OptionError(f"names {outside}, not primary-key columns; the primary key {primary_keys} must "
                          "include every bucket-key field", table=name, option="bucket-key")
    if parsed.bucket_key and parsed.bucket == -1:
        raise OptionError("cannot be set in dynamic bucket mode (bucket = -1): the HASH index places keys; "
                          "set a fixed 'bucket' to hash by a bucket key", table=name, option="bucket-key")
    in_partition = [c for c in parsed.bucket_key if c in partition_keys]
    if in_partition:
        raise OptionError(f"names partition keys {in_partition}; bucket keys must not be partition keys",
                          table=name, option="bucket-key")
    append_definition.check(new_schema, parsed)
    value_stats.check_field_modes(parsed, [f.name for f in new_schema.fields])
    file_index.check(parsed, new_schema.arrow_schema())
    check_cross_partition(new_schema, parsed)
    check_streaming_read_overwrite(parsed)
    merge_engine(new_schema, parsed)  # rejects invalid merge-engine settings now
    check_deletion_vectors(parsed)
    paths = TablePaths(root)
    if not file_io.create_if_absent(paths.schema(0), new_schema.to_json().encode("utf-8")):
        raise TableAlreadyExistsError(f"already exists at {root}", table=name)
    return TableContext(name, file_io, paths, new_schema)


def open_context(file_io: FileIO, root: str, name: str) -> TableContext:
    """The context of the table at ``root``, at its newest schema."""
    paths = TablePaths(root)
    return TableContext(name, file_io, paths, read_latest_schema(file_io, paths, name))


def reopened(ctx: TableContext) -> TableContext:
    """The same table (or branch) at its newest schema (after another process changed it)."""
    return TableContext(ctx.name, ctx.file_io, ctx.paths, read_latest_schema(ctx.file_io, ctx.paths, ctx.name))


def main_name(ctx: TableContext) -> str:
    """``database.table`` of the table ``ctx`` is a branch of (or is)."""
    return ctx.name if ctx.paths.branch is None else ctx.name.removesuffix(f"$branch_{ctx.paths.branch}")


def main_context(ctx: TableContext) -> TableContext:
    """The table itself (its main branch), for ``ctx`` being the table or one of its branches."""
    if ctx.paths.branch is None:
        return ctx
    paths = TablePaths(ctx.paths.root)
    return TableContext(main_name(ctx), ctx.file_io, paths, read_latest_schema(ctx.file_io, paths, main_name(ctx)))


def branch_context(ctx: TableContext, branch: str) -> TableContext:
    """Branch ``branch`` of the table ``ctx`` is (or is a branch of), named
    ``database.table$branch_<name>`` as Paimon names it, at the branch's newest schema; at
    ``ctx``'s when the branch has none (Paimon copies a branch's schemas last, so a creation
    that crashed leaves snapshots and tags without them)."""
    paths = TablePaths(ctx.paths.root, branch)
    name = f"{main_name(ctx)}$branch_{branch}"
    try:
        branch_schema = read_latest_schema(ctx.file_io, paths, name)
    except TableNotFoundError:
        branch_schema = ctx.schema
    return TableContext(name, ctx.file_io, paths, branch_schema)


def branch_names(ctx: TableContext) -> list[str]:
    """The names of the table's branches (``branch/branch-<name>``, Paimon's
    ``FileSystemBranchManager``), sorted; the same for the table and each of its branches."""
    return sorted(m.group(1) for n in ctx.file_io.list_names(ctx.paths.branch_dir) if (m := _BRANCH_DIR.match(n)))


def branches(ctx: TableContext) -> list[TableContext]:
    """The table's branches, each as a context that reads the branch's snapshots, tags and
    changelogs (:func:`branch_context`)."""
    return [branch_context(ctx, name) for name in branch_names(ctx)]


def other_lines(ctx: TableContext) -> list[TableContext]:
    """Every line of the table's history but ``ctx``'s: for the table, its branches; for a
    branch, the table and its other branches. They share manifests and data files, so what
    they name is kept by the maintenance of ``ctx``."""
    others = [b for b in branches(ctx) if b.paths.branch != ctx.paths.branch]
    return others if ctx.paths.branch is None else [main_context(ctx), *others]


def identity(ctx: TableContext) -> str:
    """A fingerprint of the table: a hash of its oldest schema file, which never changes once
    written, so saved positions (stream offsets) can tell this table from another one, even
    one of the same name at the same location."""
    ids = schema_ids(ctx.file_io, ctx.paths)
    if not ids:
        raise TableNotFoundError(f"does not exist (no schema under {ctx.paths.schema_dir})", table=ctx.name)
    digest = hashlib.sha256(ctx.file_io.read_bytes(ctx.paths.schema(ids[0])))
    if ctx.paths.branch is not None:  # a branch's first schema is a copy of the table's
        digest.update(f"$branch_{ctx.paths.branch}".encode())
    return digest.hexdigest()[:16]


def snapshots(ctx: TableContext) -> list[Snapshot]:
    """Every snapshot still present, oldest first (one that expires between the listing and
    its reading is left out)."""
    found = []
    for snapshot_id in snapshot.list_ids(ctx.file_io, ctx.paths):
        with contextlib.suppress(SnapshotNotFoundError):
            found.append(ctx.snapshot(snapshot_id))
    return found


def snapshot_at(ctx: TableContext, timestamp_ms: int) -> Snapshot:
    """The newest snapshot committed at or before ``timestamp_ms``."""
    found: Snapshot | None = None
    for snapshot_id in snapshot.list_ids(ctx.file_io, ctx.paths):
        candidate = ctx.snapshot(snapshot_id)
        if candidate.time_millis > timestamp_ms:
            break
        found = candidate
    if found is None:
        raise SnapshotNotFoundError(f"no snapshot at or before {timestamp_ms}", table=ctx.name)
    return found


def _tag_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a tag (Paimon's rules, plus no path separators), or None."""
    if not isinstance(name, str) or not name.strip():
        return "is blank"
    if name.isdigit():
        return "is a pure number, which Paimon reserves for snapshot ids"
    if "/" in name or "\\" in name or name in (".", ".."):
        return "holds a path separator"
    return None


def create_tag(ctx: TableContext, name: str, snapshot_id: int | None, *,
               time_retained: dt.timedelta | None = None) -> Snapshot:
    """Tag a snapshot (default: the latest). With ``time_retained`` the tag file also records
    its creation time and retention, as Paimon's ``createTag(name, timeRetained)`` does."""
    problem = _tag_name_problem(name)
    if problem is not None:
        raise InvalidTagNameError(f"tag name {name!r} {problem}", table=ctx.name)
    if snapshot_id is None:
        target = ctx.latest_snapshot()
        if target is None:
            raise SnapshotNotFoundError("has no snapshot to tag", table=ctx.name)
    else:
        target = ctx.snapshot(snapshot_id)
    content = tag_file.of(target, time_retained=time_retained, now=dt.datetime.now()).to_json()
    if not ctx.file_io.create_if_absent(ctx.paths.tag(name), content.encode("utf-8")):
        raise TagAlreadyExistsError(f"already has a tag {name!r}", table=ctx.name)
    return target


def tag(ctx: TableContext, name: str) -> Tag:
    """The tag ``name``: the snapshot it points to, with its creation time and retention."""
    if _tag_name_problem(name) is not None:
        raise TagNotFoundError(f"has no tag {name!r}", table=ctx.name)
    path = ctx.paths.tag(name)
    try:
        data = ctx.file_io.read_bytes(path)
    except FileNotFoundError:
        raise TagNotFoundError(f"has no tag {name!r}", table=ctx.name) from None
    return tag_file.parse(data, path)


def tags(ctx: TableContext) -> dict[str, Tag]:
    """Every tag and its snapshot, by name."""
    names = sorted(m.group(1) for n in ctx.file_io.list_names(ctx.paths.tag_dir)
                   if (m := _TAG_FILE.match(n)) and _tag_name_problem(m.group(1)) is None)
    return {name: tag(ctx, name) for name in names}


def delete_tag(ctx: TableContext, name: str) -> None:
    """Remove a tag (the snapshot it named is unaffected)."""
    if _tag_name_problem(name) is not None or not ctx.file_io.exists(ctx.paths.tag(name)):
        raise TagNotFoundError(f"has no tag {name!r}", table=ctx.name)
    ctx.file_io.delete(ctx.paths.tag(name))
