"""Schema evolution: column and option changes landing as one new ``schema/schema-<N+1>``.

The rules follow Paimon's ``SchemaManager``: a new column is nullable and takes the id after
``highestFieldId``; key and partition columns cannot be dropped or retyped, nor partition
columns renamed; a type changes only to one that holds every old value (a widening); a rename
rewrites the options naming the column as Paimon's does; options in Paimon's
``CoreOptions.IMMUTABLE_OPTIONS`` cannot change once the table has a snapshot. Every change of
a batch is validated before anything is written, and the batch lands as one schema file created
atomically; when another writer created that schema id first, the batch is re-applied to the
newer schema (Paimon's ``commitChanges`` loop).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from changelake.errors import OptionError, SchemaError
from changelake.options import TableOptions
from changelake.table import metadata
from changelake.table.append import definition as append_definition
from changelake.table.context import TableContext
from changelake.table.format import file_index, kv, snapshot, types, value_stats
from changelake.table.format.schema import DataField, TableSchema
from changelake.table.merge.parse import (
    check_cross_partition,
    check_deletion_vectors,
    check_streaming_read_overwrite,
    merge_engine,
)

# options whose values Paimon refuses beside deletion vectors (checked when one of them is set)
_PAIRED_WITH_VECTORS = frozenset({"deletion-vectors.enabled", "merge-engine", "changelog-producer"})

# Paimon's CoreOptions.IMMUTABLE_OPTIONS, refused once the table has a snapshot ...
_PAIMON_IMMUTABLE = frozenset({
    "type", "bucket-key", "bucket-function.type", "data-file.path-directory", "merge-engine",
    "sequence.snapshot-ordering", "aggregation.remove-record-on-delete",
    "partial-update.remove-record-on-delete", "partial-update.remove-record-on-sequence-group",
    "rowkind.field", "primary-key", "primary-key.nullable", "partition", "dynamic-bucket.initial-buckets",
    "force-lookup", "row-tracking.enabled", "data-evolution.enabled", "index-file-in-data-file-dir",
})
# ... and what changelake cannot follow on existing data: the sequence field orders rows already
# written; the partition directory names place files already written. (``bucket`` changes as in
# Paimon: between fixed numbers; partitions written before keep theirs until a rescale.)
IMMUTABLE_OPTIONS = _PAIMON_IMMUTABLE | {"sequence.field", "partition.default-name",
                                         "partition.legacy-name", "path"}
# Options whose value names columns: those columns are not dropped under them.
_COLUMN_OPTIONS = ("sequence.field", "rowkind.field", "bucket-key")
_FIELDS_OPTION = re.compile(r"^fields\.([^.]+)\.")
# what a column rename rewrites, as Paimon's: these lists' names, and these per-column settings' keys
_RENAMED_LISTS = ("bucket-key", "sequence.field")
_RENAMED_SETTINGS = ("aggregate-function", "ignore-retract", "distinct", "list-agg-delimiter")
_RETRIES = 20


@dataclass(frozen=True)
class AddColumn:
    """A new nullable column, at the end or after column ``after``."""

    name: str
    type: pa.DataType
    after: str | None = None
    doc: str | None = None


@dataclass(frozen=True)
class DropColumn:
    """Remove a value column (its data in older files is no longer read)."""

    name: str


@dataclass(frozen=True)
class RenameColumn:
    """Give a column other than a partition column a new name (older files keep the old one;
    reads map it by id)."""

    old: str
    new: str


@dataclass(frozen=True)
class WidenColumn:
    """Change a value column's type to one that holds every value of the old type."""

    name: str
    type: pa.DataType


@dataclass(frozen=True)
class SetOptions:
    """Set table options."""

    values: Mapping[str, str]


@dataclass(frozen=True)
class ResetOptions:
    """Remove table options (back to Paimon's defaults)."""

    keys: tuple[str, ...]


SchemaChange = AddColumn | DropColumn | RenameColumn | WidenColumn | SetOptions | ResetOptions


def commit(ctx: TableContext, changes: Sequence[SchemaChange]) -> TableContext:
    """Apply ``changes`` to the table's newest schema as one new schema file and return the
    context at that schema; nothing is written when any change is refused."""
    if not changes:
        return ctx
    for _ in range(_RETRIES):
        latest = metadata.read_latest_schema(ctx.file_io, ctx.paths, ctx.name)
        has_snapshot = snapshot.latest_id(ctx.file_io, ctx.paths) is not None
        evolved = evolve(latest, changes, table=ctx.name, has_snapshot=has_snapshot)
        if ctx.file_io.create_if_absent(ctx.paths.schema(evolved.id), evolved.to_json().encode("utf-8")):
            return TableContext(ctx.name, ctx.file_io, ctx.paths, evolved)
    raise SchemaError(f"schema changes kept racing other schema changes ({_RETRIES} attempts); try again",
                      table=ctx.name)


def evolve(schema: TableSchema, changes: Sequence[SchemaChange], *, table: str, has_snapshot: bool) -> TableSchema:
    """The schema after ``changes`` (applied in order), validated as a whole."""
    fields = list(schema.fields)
    options = dict(schema.options)
    keys = list(schema.primary_keys)  # renamed as their columns are
    highest = schema.highest_field_id
    for change in changes:
        match change:
            case AddColumn():
                # the column takes the next id, nested types the ids after it (as Paimon does)
                ids = itertools.count(highest + 1)
                field = _new_field(fields, change, ids, table)
                highest = next(ids) - 1
                at = len(fields) if change.after is None else _index(fields, change.after, table) + 1
                fields.insert(at, field)
            case DropColumn():
                _check_value_column(schema, keys, change.name, "dropped", table)
                _check_unnamed(options, change.name, "dropped", table, lists=_COLUMN_OPTIONS, settings=True)
                fields.pop(_index(fields, change.name, table))
                if not fields:
                    raise SchemaError("cannot drop every column", table=table, column=change.name)
            case RenameColumn():
                if change.old in schema.partition_keys:
                    raise SchemaError("is a partition column and cannot be renamed", table=table, column=change.old)
                _check_new_name(fields, change.new, table)
                i = _index(fields, change.old, table)
                fields[i] = fields[i].model_copy(update={"name": change.new})
                options = _renamed_in_options(options, change.old, change.new, table)
                keys = [change.new if k == change.old else k for k in keys]
            case WidenColumn():
                # Paimon widens a column the merge options name (old values are cast as read);
                # a bucket key's hash would change with its type
                _check_value_column(schema, keys, change.name, "retyped", table)
                _check_unnamed(options, change.name, "retyped", table, lists=("bucket-key",), settings=False)
                i = _index(fields, change.name, table)
                fields[i] = _widened(fields[i], change.type, table)
            case SetOptions():
                for key, value in change.values.items():
                    if options.get(key) != value:
                        _check_mutable(key, table, has_snapshot=has_snapshot)
                        _check_bucket_change(key, options.get(key), value, table, has_snapshot=has_snapshot)
                        options[key] = value
                # unknown keys, unparsable or unsupported values: as for a new table
                TableOptions.parse(dict(change.values), table=table, new=True)
            case ResetOptions():
                for key in change.keys:
                    if key in options:
                        _check_mutable(key, table, has_snapshot=has_snapshot)
                        if key == "bucket" and has_snapshot:
                            raise OptionError("cannot be reset on a table that holds data (Paimon's "
                                              "SchemaManager refuses it too); set a number of buckets",
                                              table=table, option=key)
                        del options[key]
    evolved = schema.model_copy(update={
        "id": schema.id + 1, "fields": tuple(fields), "highest_field_id": highest, "options": options,
        "primary_keys": tuple(keys),
        "time_millis": int(time.time() * 1000),
    })
    parsed = TableOptions.parse(options, table=table)
    merge_engine(evolved, parsed)  # the engine still fits the columns
    changed = {key for change in changes if isinstance(change, SetOptions) for key in change.values}
    append_definition.check(evolved, parsed, keys=changed)
    value_stats.check_field_modes(parsed, [f.name for f in evolved.fields], keys=changed)
    file_index.check(parsed, evolved.arrow_schema(), keys=changed)
    check_cross_partition(evolved, parsed)
    if changed & {"streaming-read-overwrite", "changelog-producer"}:
        check_streaming_read_overwrite(parsed)
    if any(isinstance(change, SetOptions) and _PAIRED_WITH_VECTORS & change.values.keys() for change in changes):
        check_deletion_vectors(parsed)
    return evolved


def _index(fields: list[DataField], name: str, table: str) -> int:
    for i, f in enumerate(fields):
        if f.name == name:
            return i
    raise SchemaError(f"is not a column of the table {[f.name for f in fields]}", table=table, column=name)


def _check_new_name(fields: list[DataField], name: str, table: str) -> None:
    if not isinstance(name, str) or not name:
        raise SchemaError(f"column name {name!r} is not a non-empty string", table=table)
    if any(f.name == name for f in fields):
        raise SchemaError("is already a column of the table", table=table, column=name)
    if name.startswith(kv.KEY_PREFIX) or name in (kv.SEQUENCE, kv.VALUE_KIND):
        raise SchemaError("is a name Paimon reserves for its system columns", table=table, column=name)


def _new_field(fields: list[DataField], change: AddColumn, ids: itertools.count[int], table: str) -> DataField:
    _check_new_name(fields, change.name, table)
    if not isinstance(change.type, pa.DataType):
        raise SchemaError(f"type {change.type!r} is not a pyarrow DataType", table=table, column=change.name)
    field_id = next(ids)
    # Paimon adds nullable columns only: rows already written have no value for them.
    paimon = types.to_paimon(change.type, ids, nullable=True)
    return DataField(id=field_id, name=change.name, type=paimon, description=change.doc)


def _check_value_column(schema: TableSchema, keys: Sequence[str], name: str, verb: str, table: str) -> None:
    """``name`` is neither a primary key (``keys``, as renamed so far) nor a partition column."""
    if name in keys or name in schema.partition_keys:
        role = "partition" if name in schema.partition_keys else "primary-key"
        raise SchemaError(f"is a {role} column and cannot be {verb}", table=table, column=name)


def _check_unnamed(options: Mapping[str, str], name: str, verb: str, table: str, *, lists: Sequence[str],
                   settings: bool) -> None:
    """No option of ``lists`` names column ``name``, nor (with ``settings``) a ``fields.*`` one."""
    for key in lists:
        if name in [c.strip() for c in options.get(key, "").split(",")]:
            raise SchemaError(f"is named by option {key!r} and cannot be {verb}", table=table, column=name)
    for key, value in options.items() if settings else ():
        match = _FIELDS_OPTION.match(key)
        if match and (name in match.group(1).split(",") or name in [c.strip() for c in value.split(",")]):
            raise SchemaError(f"is named by option {key!r} and cannot be {verb}", table=table, column=name)


def _renamed_in_options(options: dict[str, str], old: str, new: str, table: str) -> dict[str, str]:
    """``options`` with column ``old`` renamed ``new`` where Paimon's rename follows it
    (``SchemaManager.applyRenameColumnsToOptions``): the lists of ``bucket-key`` and
    ``sequence.field``, the keys of a column's aggregation settings, both sides of a sequence
    group. A column another option names (``rowkind.field``, a stats mode, a file index) is not
    renamed under it: Paimon would leave the option naming a column that is gone."""
    def renamed(names: str) -> str:
        return ",".join(new if n.strip() == old else n for n in names.split(","))

    out: dict[str, str] = {}
    for key, value in options.items():
        match = _FIELDS_OPTION.match(key)
        if key in _RENAMED_LISTS:
            out[key] = renamed(value)
        elif match and key.endswith(".sequence-group"):
            out[f"fields.{renamed(match.group(1))}.sequence-group"] = renamed(value)
        elif match and match.group(1) == old and key[match.end():] in _RENAMED_SETTINGS:
            out[f"fields.{new}.{key[match.end():]}"] = value
        elif (key == "rowkind.field" and value.strip() == old) or (match and old in match.group(1).split(",")):
            raise SchemaError(f"is named by option {key!r} and cannot be renamed (Paimon does not rename "
                              "it); change the option first", table=table, column=old)
        else:
            out[key] = value
    return out


def _check_bucket_change(key: str, old: str | None, new: str, table: str, *, has_snapshot: bool) -> None:
    """``bucket`` of a table that holds data changes between fixed numbers only (Paimon's
    ``SchemaManager.checkAlterTableOption`` refuses -1 either side; changelake keeps the bucket
    mode too): the partitions written before keep their number until ``table.rescale``."""
    if key != "bucket" or not has_snapshot:
        return
    if old is None or not old.strip().lstrip("-").isdigit() or int(old) < 1 or \
            not new.strip().lstrip("-").isdigit() or int(new) < 1:
        raise OptionError(f"changes from {old} to {new} only between fixed numbers of buckets (1 or more) on "
                          "a table that holds data", table=table, option=key)


def _check_mutable(key: str, table: str, *, has_snapshot: bool) -> None:
    if key in IMMUTABLE_OPTIONS and has_snapshot:
        raise OptionError("cannot be changed on a table that holds data", table=table, option=key)


def _widened(field: DataField, new: pa.DataType, table: str) -> DataField:
    old = types.to_arrow(field.type)
    if not isinstance(new, pa.DataType) or not widens(old, new):
        raise SchemaError(f"of type {old} cannot change to {new}: only widenings are allowed (int8 -> int16 "
                          "-> int32 -> int64, float32 -> float64, a decimal's precision up at the same scale)",
                          table=table, column=field.name)
    return field.model_copy(update={"type": types.to_paimon(new, iter(()), nullable=field.nullable)})


_INTEGERS = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def merged_changes(ctx: TableContext, incoming: pa.Schema, *, ignore: Sequence[str] = ()) -> list[SchemaChange]:
    """The schema changes that let rows of ``incoming`` be written without losing anything
    (Paimon's ``write.merge-schema``): its columns the table lacks, added at the end
    (nullable), and the table's columns it holds in a wider type, widened. Columns of
    ``ignore`` (a ``rowkind`` column) are left out; other differences are left to the write's
    own checks."""
    changes: list[SchemaChange] = []
    table = ctx.arrow_schema
    for field in incoming:
        if field.name in ignore:
            continue
        if field.name not in table.names:
            changes.append(AddColumn(field.name, field.type))
        elif widens(table.field(field.name).type, field.type):
            changes.append(WidenColumn(field.name, field.type))
    return changes


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a column of type ``old`` may change to ``new``: int8 -> int16 -> int32 -> int64,
    float32 -> float64, a decimal's precision up at the same scale."""
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if old == pa.float32():
        return bool(new == pa.float64())
    if pa.types.is_decimal128(old) and pa.types.is_decimal128(new):
        return bool(new.scale == old.scale and new.precision > old.precision)
    return False
