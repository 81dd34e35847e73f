"""Batch scans: an immutable builder over one snapshot, read merge-on-read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from changelake import handoff
from changelake.errors import ScanError
from changelake.option_values import TimeTravelSchema
from changelake.options import TableOptions
from changelake.table import metadata, time_travel
from changelake.table.context import TableContext
from changelake.table.format.snapshot import Snapshot
from changelake.table.read import planner, reader, sql_filter
from changelake.table.read.planner import Split


@dataclass(frozen=True)
class Scan(handoff.ArrowExports):
    """A read of one snapshot, merged to one row per key (deleted keys absent). A
    ``read_optimized`` scan reads only the top level's files, which need no merge: faster, but
    without the rows written since the last full compaction (Paimon's read-optimized table).

    A scan of a snapshot chosen by id, tag or time reads it in the schema it was committed
    with, as Paimon's time travel does (a renamed column under its old name, a dropped one
    there); the table option ``scan.time-travel.schema = latest`` reads it in the table's
    schema instead. Columns and filters name the columns of the schema read.

    Immutable: :meth:`filter`, :meth:`select`, :meth:`at_snapshot`, :meth:`at_tag` and
    :meth:`at_time` return new scans. Nothing is read until :meth:`plan` or a ``to_*`` call.
    """

    context: TableContext
    snapshot_id: int | None = None
    tag: str | None = None
    timestamp_ms: int | None = None
    row_filter: pc.Expression | None = None
    columns: tuple[str, ...] | None = None
    read_optimized: bool = False  # only files that need no merge: the top level (Paimon's ``$ro``)
    time_travel_schema: TimeTravelSchema | None = None  # None: the table's scan.time-travel.schema

    @staticmethod
    def of(
        context: TableContext,
        *,
        snapshot_id: int | None = None,
        tag: str | None = None,
        timestamp_ms: int | None = None,
        filter: pc.Expression | str | None = None,
        columns: Sequence[str] | None = None,
        read_optimized: bool = False,
        time_travel_schema: TimeTravelSchema | str | None = None,
    ) -> Scan:
        """A validated scan (ScanError for contradictory or unknown selections, OptionError for
        a ``time_travel_schema`` that is not one of :class:`TimeTravelSchema`)."""
        choice = None
        if time_travel_schema is not None:
            key = "scan.time-travel.schema"
            choice = TableOptions.parse({key: str(time_travel_schema)}, table=context.name).scan_time_travel_schema
        scan = Scan(context, snapshot_id, tag, timestamp_ms, read_optimized=read_optimized,
                    time_travel_schema=choice)
        if filter is not None:
            scan = scan.filter(filter)
        if columns is None:
            return scan
        return dataclasses.replace(scan, columns=scan.read_context.selected_columns(columns))

    def __post_init__(self) -> None:
        chosen = [n for n, v in (("snapshot_id", self.snapshot_id), ("tag", self.tag),
                                 ("timestamp_ms", self.timestamp_ms)) if v is not None]
        if len(chosen) > 1:
            raise ScanError(f"give at most one of snapshot_id, tag, timestamp_ms; got {chosen}",
                            table=self.context.name)

    # -- building ---------------------------------------------------------------------------

    def filter(self, expression: pc.Expression | str) -> Scan:
        """Only rows matching ``expression`` (combined with any earlier filter): a
        ``pyarrow.compute`` expression, or a SQL-like string (``"dt = '2024-01-01' AND amount
        > 10.5"``: comparisons, ``IN``, ``LIKE``, ``IS [NOT] NULL``, ``AND``/``OR``/``NOT``;
        literals take their column's type, so decimals and dates compare exactly)."""
        parsed = sql_filter.as_expression(expression, self.read_context.arrow_schema, self.context.name)
        if parsed is None:
            raise ScanError("filter must be a pyarrow.compute.Expression or a SQL-like string, got None",
                            table=self.context.name)
        combined = parsed if self.row_filter is None else self.row_filter & parsed
        return dataclasses.replace(self, row_filter=combined)

    def select(self, *columns: str) -> Scan:
        """Only these columns, in this order (ScanError for an unknown or repeated one)."""
        return dataclasses.replace(self, columns=self.read_context.selected_columns(columns))

    def at_snapshot(self, snapshot_id: int) -> Scan:
        """Read snapshot ``snapshot_id``."""
        return self._travelled(dataclasses.replace(self, snapshot_id=snapshot_id, tag=None, timestamp_ms=None))

    def at_tag(self, tag: str) -> Scan:
        """Read the snapshot a tag names."""
        return self._travelled(dataclasses.replace(self, snapshot_id=None, tag=tag, timestamp_ms=None))

    def at_time(self, timestamp_ms: int) -> Scan:
        """Read the newest snapshot committed at or before ``timestamp_ms``."""
        return self._travelled(dataclasses.replace(self, snapshot_id=None, tag=None, timestamp_ms=timestamp_ms))

    @staticmethod
    def _travelled(scan: Scan) -> Scan:
        """``scan`` with its columns checked against the schema of the snapshot it now reads."""
        return scan if scan.columns is None else scan.select(*scan.columns)

    # -- reading ----------------------------------------------------------------------------

    @cached_property
    def snapshot(self) -> Snapshot | None:
        """The snapshot this scan reads (None: the table has none yet)."""
        travelled = self._travelled_to
        return self.context.latest_snapshot() if travelled is None else travelled

    @cached_property
    def _travelled_to(self) -> Snapshot | None:
        """The snapshot chosen by id, tag or time (None: the scan reads the latest)."""
        if self.snapshot_id is not None:
            return self.context.snapshot(self.snapshot_id)
        if self.tag is not None:
            return metadata.tag(self.context, self.tag)
        if self.timestamp_ms is not None:
            return metadata.snapshot_at(self.context, self.timestamp_ms)
        return None

    @cached_property
    def read_context(self) -> TableContext:
        """The table at the schema this scan reads in: the snapshot's own for time travel (by
        ``scan.time-travel.schema``), else the table's."""
        travelled = self._travelled_to
        if travelled is None:
            return self.context
        choice = self.time_travel_schema or self.context.options.scan_time_travel_schema
        return time_travel.context_at(self.context, travelled, choice)

    @cached_property
    def output_schema(self) -> pa.Schema:
        """Schema of the rows this scan returns."""
        schema = self.read_context.arrow_schema
        return schema if self.columns is None else pa.schema([schema.field(c) for c in self.columns])

    def plan(self) -> list[Split]:
        """The splits to read. Per bucket, files whose key ranges overlap stay in one split
        (interval partition into sections); sections are packed up to
        ``source.split.target-size``, each file weighing at least ``source.split.open-file-cost``.
        As Paimon's batch scans, level 0 is not read for first-row tables and tables with
        deletion vectors: rows still there are read once a compaction moves them up."""
        if self.snapshot is None:
            return []
        if self.read_optimized:
            return planner.plan(self.read_context, self.snapshot, self.row_filter,
                                planner.read_optimized_levels(self.read_context))
        return planner.plan(self.read_context, self.snapshot, self.row_filter, planner.batch_levels(self.read_context))

    def read_split(self, split: Split) -> pa.Table:
        """The merged rows of one split, filtered and projected."""
        return reader.read_split(self.read_context, split, self.output_schema.names, self.row_filter)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Merged rows as a stream of record batches, a few splits in memory at a time."""
        schema = self.output_schema
        for part in reader.read_splits(self.read_context, self.plan(), schema.names, self.row_filter):
            # A projection of no columns still counts its rows; a cast would drop them.
            yield from (part.cast(schema) if schema.names and not part.schema.equals(schema) else part).to_batches()

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """Merged rows as a ``pyarrow.RecordBatchReader`` (what DuckDB, polars and Spark take)."""
        return pa.RecordBatchReader.from_batches(self.output_schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        """All merged rows of the snapshot as one Arrow table."""
        return pa.Table.from_batches(self.to_batches(), schema=self.output_schema)

