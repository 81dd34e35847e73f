"""Building a table's merge engine from its schema and options, with every check Paimon makes on
them (and a clear refusal of what changelake does not implement).

The table-wide options come typed from :class:`TableOptions`; the per-column options
``fields.<names>.<setting>`` are read here from the raw options.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import TypedDict

import pyarrow as pa

from changelake.errors import OptionError
from changelake.option_values import ChangelogProducer, MergeEngineKind, SortOrder, parse_bool
from changelake.options import TableOptions
from changelake.table.format.schema import TableSchema
from changelake.table.merge.aggregates import PARTIAL_UPDATE_FUNCTIONS, AggregateFunction, FieldAggregate
from changelake.table.merge.engines import (
    Aggregation,
    Deduplicate,
    FirstRow,
    MergeEngine,
    PartialUpdate,
    SequenceGroup,
)

_FIELDS = "fields."
_DEFAULT_FUNCTION = "fields.default-aggregate-function"
_FIELD_SUFFIXES = ("aggregate-function", "sequence-group", "ignore-retract", "list-agg-delimiter", "distinct")


def merge_engine(schema: TableSchema, options: TableOptions) -> MergeEngine:
    """The merge engine a table's schema and options describe; OptionError naming the table
    and the option for anything Paimon would reject (or changelake does not implement)."""
    return _Parser(schema, options).parse()


def check_deletion_vectors(options: TableOptions) -> None:
    """OptionError for deletion vectors beside what Paimon refuses them with, whose readers
    then do not open the table (``SchemaValidation``): the first-row engine, which never
    deletes an older row, and producers other than none, input and lookup. Checked when a
    definition is made or changed; tables that already have one stay readable."""
    if not options.deletion_vectors_enabled:
        return
    if options.merge_engine is MergeEngineKind.FIRST_ROW:
        raise OptionError("cannot be true with merge-engine first-row: it never deletes an older row, and Paimon "
                          "refuses the pair", table=options.table, option="deletion-vectors.enabled")
    if options.changelog_producer is ChangelogProducer.FULL_COMPACTION:
        raise OptionError("cannot be true with changelog-producer full-compaction: Paimon pairs deletion vectors "
                          "with producer none, input or lookup only", table=options.table,
                          option="deletion-vectors.enabled")


def check_streaming_read_overwrite(options: TableOptions) -> None:
    """OptionError for ``streaming-read-overwrite`` beside a producer that writes changelog on
    compaction (lookup, full-compaction): streams would read an overwrite's changes twice, and
    Paimon documents the pair as refused. Checked when a definition is made or changed."""
    if options.streaming_read_overwrite and options.changelog_producer in (ChangelogProducer.LOOKUP,
                                                                            ChangelogProducer.FULL_COMPACTION):
        raise OptionError(f"cannot be true with changelog-producer {options.changelog_producer.value}: streams "
                          "would read an overwrite's changes twice", table=options.table,
                          option="streaming-read-overwrite")


def check_cross_partition(schema: TableSchema, options: TableOptions) -> None:
    """OptionError for what Paimon refuses when the primary key lacks a partition column (a
    cross-partition update, ``SchemaValidation``): any ``bucket`` but -1, and ``sequence.field``
    (a key's rows in two partitions have no common order)."""
    missing = [k for k in schema.partition_keys if k not in schema.primary_keys]
    if not schema.primary_keys or not missing:
        return
    what = (f"the primary keys {list(schema.primary_keys)} lack the partition keys {missing} (a cross-partition "
            "update: a key may move between partitions)")
    if options.bucket != -1:
        raise OptionError(f"must be -1 (dynamic bucket mode, the default) when {what}", table=options.table,
                          option="bucket")
    if options.sequence_field:
        raise OptionError(f"cannot be set when {what}", table=options.table, option="sequence.field")


class _Shared(TypedDict):
    """The settings every engine has."""

    table: str
    primary_keys: tuple[str, ...]
    sequence_fields: tuple[str, ...]
    sequence_order: SortOrder
    ignore_delete: bool
    not_null: frozenset[str]


class _Parser:
    def __init__(self, schema: TableSchema, options: TableOptions) -> None:
        self.options = options
        self.raw = options.raw
        self.table = options.table
        self.arrow = schema.arrow_schema()
        self.names = list(self.arrow.names)
        self.primary_keys = tuple(schema.primary_keys)

    def fail(self, key: str, message: str) -> OptionError:
        return OptionError(message, table=self.table, option=key)

    def flag(self, key: str) -> bool:
        try:
            return parse_bool(self.raw.get(key, "false"))
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def field_options(self, suffix: str) -> dict[tuple[str, ...], tuple[str, str]]:
        """``fields.<names>.<suffix>`` options: names -> (option key, value)."""
        out: dict[tuple[str, ...], tuple[str, str]] = {}
        for key, value in self.raw.items():
            if key.startswith(_FIELDS) and key.endswith("." + suffix) and key != _DEFAULT_FUNCTION:
                names = key[len(_FIELDS) : -len(suffix) - 1]
                out[tuple(n.strip() for n in names.split(","))] = (key, value)
        return out

    def check_field_names(self) -> None:
        for key in self.raw:
            if not key.startswith(_FIELDS) or key == _DEFAULT_FUNCTION:
                continue
            names, _, suffix = key[len(_FIELDS) :].rpartition(".")
            if suffix not in _FIELD_SUFFIXES:
                continue
            for name in names.split(","):
                if name.strip() not in self.names:
                    hint = difflib.get_close_matches(name.strip(), self.names, n=1)
                    raise self.fail(
                        key,
                        f"column {name.strip()!r} is not in the table"
                        + (f"; did you mean {hint[0]!r}?" if hint else ""),
                    )

    def parse(self) -> MergeEngine:
        self.check_field_names()
        shared = _Shared(
            table=self.table,
            primary_keys=self.primary_keys,
            sequence_fields=self.sequence_fields(),
            sequence_order=self.options.sequence_sort_order,
            ignore_delete=self.options.ignore_delete,
            not_null=frozenset(f.name for f in self.arrow if not f.nullable) | set(self.primary_keys),
        )
        for names, (key, _) in self.field_options("aggregate-function").items():
            for column in names:
                if column in self.primary_keys:
                    raise self.fail(key, f"{column!r} is a primary-key column and cannot be aggregated")
        return _BUILDERS[self.options.merge_engine](self, shared)

    def sequence_fields(self) -> tuple[str, ...]:
        fields = self.options.sequence_field
        for name in fields:
            if name not in self.names:
                raise self.fail("sequence.field", f"column {name!r} is not in the table")
            if fields.count(name) > 1:
                raise self.fail("sequence.field", f"column {name!r} is named twice")
            if f"{_FIELDS}{name}.aggregate-function" in self.raw:
                raise self.fail(
                    f"{_FIELDS}{name}.aggregate-function", f"{name!r} is a sequence field and cannot be aggregated"
                )
            if pa.types.is_nested(self.arrow.field(name).type):
                raise self.fail(
                    "sequence.field", f"column {name!r} of type {self.arrow.field(name).type} cannot order rows"
                )
        return fields

    def function(self, column: str) -> tuple[str, str] | None:
        """(option key, function name) of a column, from its own option or the default."""
        key = f"{_FIELDS}{column}.aggregate-function"
        if key in self.raw:
            return key, self.raw[key]
        if self.options.default_aggregate_function is not None:
            return _DEFAULT_FUNCTION, self.options.default_aggregate_function
        return None

    def aggregate(self, column: str, key: str, text: str) -> FieldAggregate:
        try:
            function = AggregateFunction.named(text)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None
        data_type = self.arrow.field(column).type
        if not function.applies_to(data_type):
            needs = (
                " (count applies to TINYINT, SMALLINT, INT and BIGINT columns)"
                if function is AggregateFunction.COUNT
                else ""
            )
            raise self.fail(
                key,
                f"aggregate function {function.value!r} does not apply to column {column!r} of type {data_type}{needs}",
            )
        ignore_retract = self.flag(f"{_FIELDS}{column}.ignore-retract")
        delimiter = self.raw.get(f"{_FIELDS}{column}.list-agg-delimiter", ",")
        distinct = self.flag(f"{_FIELDS}{column}.distinct")
        if function is AggregateFunction.LISTAGG and distinct and not delimiter:
            raise self.fail(f"{_FIELDS}{column}.list-agg-delimiter", "listagg with distinct needs a delimiter")
        return FieldAggregate(
            column=column, function=function, ignore_retract=ignore_retract, delimiter=delimiter, distinct=distinct
        )

    # -- one builder per engine ---------------------------------------------------------------

    def deduplicate(self, shared: _Shared) -> MergeEngine:
        return Deduplicate(**shared)

    def first_row(self, shared: _Shared) -> MergeEngine:
        if shared["sequence_fields"]:
            raise self.fail("sequence.field", "the first-row merge engine does not support a sequence field")
        return FirstRow(**shared)

    def aggregation(self, shared: _Shared) -> MergeEngine:
        remove = self.options.aggregation_remove_record_on_delete
        aggregates = []
        for column in self.names:
            if column in self.primary_keys:
                continue
            if column in shared["sequence_fields"]:  # Paimon aggregates sequence fields with last_value
                ignore_retract = self.flag(f"{_FIELDS}{column}.ignore-retract")
                aggregates.append(
                    FieldAggregate(column=column, function=AggregateFunction.LAST_VALUE, ignore_retract=ignore_retract)
                )
                continue
            found = self.function(column)
            key, text = found if found is not None else ("", AggregateFunction.LAST_NON_NULL_VALUE.value)
            aggregate = self.aggregate(column, key, text)
            if remove and aggregate.ignore_retract:
                raise self.fail(
                    f"{_FIELDS}{column}.ignore-retract",
                    "conflicts with 'aggregation.remove-record-on-delete'; do not set both",
                )
            aggregates.append(aggregate)
        return Aggregation(**shared, remove_record_on_delete=remove, aggregates=tuple(aggregates))

    def partial_update(self, shared: _Shared) -> MergeEngine:
        remove = self.options.partial_update_remove_record_on_delete
        groups: list[SequenceGroup] = []
        protected: dict[str, str] = {}
        sequence_owner: dict[str, str] = {}
        for sequence_fields, (key, value) in self.field_options("sequence-group").items():
            fields = tuple(f.strip() for f in value.split(",") if f.strip())
            for name in sequence_fields + fields:
                if name not in self.names:
                    raise self.fail(key, f"column {name!r} is not in the table")
                if name in self.primary_keys:
                    raise self.fail(key, f"primary-key column {name!r} cannot be in a sequence group")
            for name in sequence_fields:
                if pa.types.is_nested(self.arrow.field(name).type):
                    raise self.fail(key, f"column {name!r} of type {self.arrow.field(name).type} cannot order a group")
                if name in sequence_owner or name in protected:
                    raise self.fail(key, f"column {name!r} is already in another sequence group")
                sequence_owner[name] = key
            for name in fields:
                if name in protected or name in sequence_owner:
                    raise self.fail(key, f"column {name!r} is defined repeatedly by multiple sequence groups")
                protected[name] = key
            groups.append(SequenceGroup(sequence_fields, fields))
        if remove and shared["ignore_delete"]:
            raise self.fail("partial-update.remove-record-on-delete", "conflicts with 'ignore-delete'; do not set both")
        if remove and groups:
            raise self.fail("partial-update.remove-record-on-delete", "conflicts with sequence groups; do not set both")
        delete_group = self.delete_group(groups)
        aggregates = []
        for column in self.names:
            if column in self.primary_keys or column in sequence_owner:
                continue
            found = self.function(column)
            if found is None:
                continue
            key, text = found
            aggregate = self.aggregate(column, key, text)
            if column not in protected:
                if aggregate.function is not AggregateFunction.LAST_NON_NULL_VALUE:
                    raise self.fail(
                        key,
                        f"column {column!r} is not in a sequence group; partial-update aggregates only "
                        "sequence-group columns (except last_non_null_value)",
                    )
                continue
            if aggregate.function not in PARTIAL_UPDATE_FUNCTIONS:
                raise self.fail(
                    key,
                    f"changelake supports only {', '.join(sorted(PARTIAL_UPDATE_FUNCTIONS))} in partial-update "
                    f"sequence groups, not {aggregate.function.value!r}",
                )
            aggregates.append(aggregate)
        return PartialUpdate(
            **shared,
            remove_record_on_delete=remove,
            sequence_groups=tuple(groups),
            delete_group=delete_group,
            aggregates=tuple(aggregates),
        )

    def delete_group(self, groups: Sequence[SequenceGroup]) -> int | None:
        """Index of the group of ``partial-update.remove-record-on-sequence-group``, if set."""
        key = "partial-update.remove-record-on-sequence-group"
        names = self.options.partial_update_remove_record_on_sequence_group
        if not names:
            return None
        if self.options.ignore_delete:
            raise self.fail(key, "conflicts with 'ignore-delete'; do not set both")
        found = set()
        for name in names:
            owners = [i for i, g in enumerate(groups) if name in g.sequence_fields]
            if not owners:
                raise self.fail(key, f"{name!r} must be a sequence field of a sequence group")
            found.add(owners[0])
        if len(found) != 1:
            raise self.fail(key, "changelake supports removing records on exactly one sequence group")
        return found.pop()


_BUILDERS: dict[MergeEngineKind, Callable[[_Parser, _Shared], MergeEngine]] = {
    MergeEngineKind.DEDUPLICATE: _Parser.deduplicate,
    MergeEngineKind.FIRST_ROW: _Parser.first_row,
    MergeEngineKind.PARTIAL_UPDATE: _Parser.partial_update,
    MergeEngineKind.AGGREGATION: _Parser.aggregation,
}
