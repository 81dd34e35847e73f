"""The ``changelake`` Spark data source: batch reads of a snapshot and streaming reads of the
changelog, as a Python data source (``changelake.streaming.register(spark)`` first).

Batch: ``spark.read.format("changelake").load(path)`` reads the latest snapshot, or the one
``scan.snapshot-id``, ``scan.tag-name`` or ``scan.timestamp-millis`` (``scan.timestamp``)
names, merged (one row per key; with ``read.changelog``, each a +I). One Spark partition per
planner split. A schema the user gives may name fewer columns, in any order: the read then
carries those only (Spark's Python data sources get no column pruning).

The reader takes no pushed filters; Spark evaluates every filter. Spark 4.3 keeps the plan a
Python data source makes while taking pushed filters (its read function and partitions) on the
``PythonDataSourceV2`` of the DataFrame's ``load()``, and a later query of the same DataFrame
with no filter Python is offered (none, one Python cannot take such as ``OR``, or one Spark
drops such as ``k IS NOT NULL`` on a NOT NULL column) runs that plan again without calling
Python at all: files skipped for the earlier query's filter would be missing from its rows.
Nothing the reader gets tells the two queries apart (the same pickled reader and partitions
run, the tasks differ only in Spark's execution id), so a reader that skips files for a pushed
filter cannot be right for the DataFrames users reuse.

Streaming: ``spark.readStream.format("changelake").load(path)`` reads the changes from where
``scan.mode`` says (or where ``consumer-id`` last got to), every mode of :class:`ChangeSource`;
a micro-batch's splits are packed into Spark partitions up to ``source.split.target-size``.
As in Paimon's Spark source, ``read.changelog`` (default false) decides the rows: with it, a
``rowkind`` column (+I, -U, +U, -D) comes first and every change row follows, as
``Table.changes`` reads them; without it there is no ``rowkind`` column and only the rows that
upsert a key (+I, +U) are read. Paimon reads with ``read.changelog=false`` through its
``MergeFileSplitRead.createNoMergeReader``, which keeps the -U and -D rows, and its Spark rows
drop the kind, so a retraction would look like an insert; here those rows are left out instead.

Offsets are :class:`StreamOffset` as dicts (Paimon's ``snapshotId``, ``index``,
``scanSnapshot``, and ``tableId``). ``latestOffset`` plans up to the read limit and returns where
the plan ends; ``partitions(start, end)`` plans from ``start`` again, without a limit, and cuts
the splits at ``end``: offsets count row positions, so a restarted query re-reads exactly
``[start, end)``. Paimon's admission options map to Spark's read limits:
``read.stream.maxRowsPerTrigger`` (rows as stored), ``read.stream.maxFilesPerTrigger``,
``read.stream.minRowsPerTrigger`` with ``read.stream.maxTriggerDelayMs``. Spark's Python read
limits do not compose, so Spark gets the first configured as the default limit and every
configured one applies whenever Spark passes that default back; ``ReadAllAvailable`` lifts them
all. ``Trigger.AvailableNow`` records the latest snapshot when it starts and plans no further.
When Spark commits a batch, the consumer (``consumer-id``) records the offset; Spark commits a
batch when it plans the next one (or the next run's first), so the consumer trails by a batch.
A consumer without a record is created at the query's initial offset (the snapshot a first full
read reads), so that expiry keeps everything the query, or its next run, still reads.

A table on S3 is opened with Paimon's S3 options among the read's options (``s3.endpoint``,
``s3.access-key``, ``s3.secret-key``, ``s3.session-token``, ``s3.region``,
``s3.path.style.access``: see :mod:`.storage_options`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa
from pydantic import ValidationError
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.streaming.datasource import ReadLimit as SparkReadLimit
from pyspark.sql.types import StructType

from changelake.api.scan import Scan
from changelake.api.system_tables import SystemTable
from changelake.api.table import Table
from changelake.changelog import starting
from changelake.changelog.offsets import ReadLimit, StreamOffset
from changelake.changelog.source import ROWKIND, ChangeSource, ChangeSplit, with_commit
from changelake.errors import OffsetError, OptionError, ScanError
from changelake.option_values import ScanMode
from changelake.options import TableOptions
from changelake.streaming.read_request import Output, ReadRequest
from changelake.streaming.spark_schema import arrow_schema, struct_type
from changelake.streaming.spark_writers import BatchWriter, StreamWriter, check_writable
from changelake.table.format.kv import RowKind
from changelake.table.read.planner import Split

FORMAT = "changelake"
# Spark 4.3 gives a Python data source no options when a catalog table over it is read or
# written, only the schema the table was created with: the table's location rides in the
# metadata of its first field.
LOCATION_METADATA = "changelake.location"


def register(spark: SparkSession) -> None:
    """Make ``format("changelake")`` available in ``spark`` (again is harmless)."""
    spark.dataSource.register(ChangelakeDataSource)


# -- the data source ------------------------------------------------------------------------


class ChangelakeDataSource(DataSource):
    """``format("changelake")``: the table at ``load(path)``, batch or streaming (options use
    Paimon's names, any case)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @cached_property
    def request(self) -> ReadRequest:
        """The table and options of this read."""
        return ReadRequest.of(self.options)

    def schema(self) -> StructType:
        schema = struct_type(self.request.schema, table=self.request.table.name)
        if "provider" not in self.options or not schema.fields:  # not a CREATE TABLE ... USING changelake
            return schema
        first = schema.fields[0]
        first.metadata = {**(first.metadata or {}), LOCATION_METADATA: self.request.table.location}
        return schema

    def _request_for(self, schema: StructType) -> ReadRequest:
        """This read's or write's request; for a catalog table, at the location its schema holds."""
        if self.options.get("path") or not schema.fields or LOCATION_METADATA not in (schema.fields[0].metadata or {}):
            return self.request
        return ReadRequest.of({**self.options, "path": schema.fields[0].metadata[LOCATION_METADATA]})

    def reader(self, schema: StructType) -> DataSourceReader:
        request = self._request_for(schema)
        if request.system is not None:
            return SystemTableReader(request.table, request.system, Output(arrow_schema(schema)))
        scan = batch_scan(request.read_table, request.options, read_optimized=request.read_optimized)
        scan = scan.select(*request.columns(schema))
        snapshot = scan.snapshot if request.options.read_commit_metadata else None
        committed = None if snapshot is None else (snapshot.id, snapshot.time_millis)
        return BatchReader(scan, Output(arrow_schema(schema)), kinds=request.options.read_changelog,
                           committed=committed)

    def streamReader(self, schema: StructType) -> ChangeStreamReader:
        request = self._request_for(schema)
        if request.system is not None or request.read_optimized:
            name = SystemTable.RO if request.system is None else request.system
            raise ScanError(f"system table {name.value!r} is read in batch only", table=request.table.name)
        source = ChangeSource.of(request.read_table.context, request.overrides, request.columns(schema),
                                 commit_metadata=request.options.read_commit_metadata)
        output = Output(arrow_schema(schema), upserts_only=not request.options.read_changelog)
        return ChangeStreamReader(source, Admission.of(request.options), output)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:  # noqa: FBT001  # Spark's signature
        """Spark's batch writer (see :mod:`.spark_writers` for the tables it takes)."""
        return BatchWriter(check_writable(self._request_for(schema).table, schema, overwrite=overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:  # noqa: FBT001
        """Spark's streaming writer, exactly once per micro-batch (see :mod:`.spark_writers`)."""
        ctx = check_writable(self._request_for(schema).table, schema, overwrite=overwrite)
        return StreamWriter.of(ctx, self.options)


def batch_scan(table: Table, options: TableOptions, *, read_optimized: bool = False) -> Scan:
    """The snapshot a batch read reads: the one ``scan.tag-name``, ``scan.snapshot-id`` or
    ``scan.timestamp-millis`` names (the newest at or before that time), else the latest.
    ``scan.mode`` must agree with them, as for streams."""
    mode = starting.start_mode(options)
    if mode is ScanMode.COMPACTED_FULL:
        raise OptionError("compacted-full is for streaming reads; a batch read reads one snapshot",
                          table=table.name, option="scan.mode")
    scan = table.scan(read_optimized=read_optimized, time_travel_schema=options.scan_time_travel_schema)
    if options.scan_tag_name is not None:
        return scan.at_tag(options.scan_tag_name)
    if options.scan_snapshot_id is not None:
        return scan.at_snapshot(options.scan_snapshot_id)
    if mode is ScanMode.FROM_TIMESTAMP:
        return scan.at_time(starting.start_timestamp(options))
    return scan


# -- batch ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitPartition(InputPartition):
    """One planner split of a batch read (names files, holds no rows)."""

    split: Split


class BatchReader(DataSourceReader):
    """Reads one snapshot: a Spark partition per split, merged rows as Arrow batches (with
    ``kinds``, after a ``rowkind`` column of +I: the rows of a snapshot are inserts). It takes
    no pushed filters (see the module's docstring): every row of the snapshot is read."""

    def __init__(self, scan: Scan, output: Output, *, kinds: bool, committed: tuple[int, int] | None = None) -> None:
        self.scan = scan
        self.output = output
        self.kinds = kinds
        # (snapshot id, commit time) for ``read.commit-metadata``
        self.committed = committed

    def partitions(self) -> list[InputPartition]:
        return [SplitPartition(split) for split in self.scan.plan()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark reads a placeholder partition when the plan has none (an empty table).
        if not isinstance(partition, SplitPartition):
            return
        rows = self.scan.read_split(partition.split)
        if self.kinds:
            rows = rows.add_column(0, ROWKIND, pa.repeat(pa.scalar(RowKind.INSERT.symbol), rows.num_rows))
        if self.committed is not None:
            rows = with_commit(rows, self.committed)
        yield from self.output.batches(rows)


class SystemTableReader(DataSourceReader):
    """Reads a system table (``<table>$snapshots`` and the like): one partition, read when
    Spark reads it."""

    def __init__(self, table: Table, system: SystemTable, output: Output) -> None:
        self.table = table
        self.system = system
        self.output = output

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from self.output.batches(self.table.system(self.system))


# -- streaming ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Admission:
    """How much one micro-batch reads: Paimon's ``read.stream.*`` options."""

    max_rows: int | None = None
    max_files: int | None = None
    min_rows: int | None = None
    max_delay_ms: int | None = None

    @staticmethod
    def of(options: TableOptions) -> Admission:
        """OptionError when only one of the min-rows pair is given (as Paimon)."""
        pair = {"read.stream.minRowsPerTrigger": options.read_stream_min_rows,
                "read.stream.maxTriggerDelayMs": options.read_stream_max_trigger_delay}
        missing = [key for key, value in pair.items() if value is None]
        if len(missing) == 1:
            raise OptionError("read.stream.minRowsPerTrigger and read.stream.maxTriggerDelayMs go together",
                              table=options.table, option=missing[0])
        return Admission(max_rows=options.read_stream_max_rows, max_files=options.read_stream_max_files,
                         min_rows=options.read_stream_min_rows, max_delay_ms=options.read_stream_max_trigger_delay)

    @property
    def read_limit(self) -> ReadLimit:
        """The bounds of a plan."""
        return ReadLimit(max_rows=self.max_rows, max_files=self.max_files)

    def default_limit(self) -> SparkReadLimit:
        """The configured bound Spark is told of (Spark's Python limits do not compose)."""
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        if self.min_rows is not None:
            return ReadMinRows(self.min_rows)
        return ReadAllAvailable()

    def under(self, limit: SparkReadLimit) -> Admission:
        """The admission for Spark's ``limit``: ReadAllAvailable lifts every bound, a bound
        Spark gives replaces the option's and the other options stay."""
        match limit:
            case ReadAllAvailable():
                return Admission()
            case ReadMaxRows(max_rows=rows):
                return dataclasses.replace(self, max_rows=rows)
            case ReadMaxFiles(max_files=files):
                return dataclasses.replace(self, max_files=files)
            case ReadMinRows(min_rows=rows):
                return dataclasses.replace(self, min_rows=rows)
        raise ScanError(f"Spark read limit {limit} is not supported; use read.stream.maxRowsPerTrigger, "
                        "read.stream.maxFilesPerTrigger or read.stream.minRowsPerTrigger")


@dataclass(frozen=True)
class ChangeSplitPartition(InputPartition):
    """Consecutive change splits of a micro-batch, read in stream order by one task (they
    name files and row positions, they hold no rows)."""

    splits: tuple[ChangeSplit, ...]


def packed(splits: Iterable[ChangeSplit], options: TableOptions) -> Iterator[tuple[ChangeSplit, ...]]:
    """Consecutive splits packed up to ``source.split.target-size`` (each file weighing at
    least ``source.split.open-file-cost``), as Paimon packs a scan's files into splits: a
    micro-batch of many small changelog files is a few Spark tasks, not one per file."""
    pack: list[ChangeSplit] = []
    weight = 0
    for split in splits:
        size = sum(max(f.file_size, options.split_open_file_cost) for f in split.split.files)
        if pack and weight + size > options.split_target_size:
            yield tuple(pack)
            pack, weight = [], 0
        pack.append(split)
        weight += size
    if pack:
        yield tuple(pack)


def offset_dict(offset: StreamOffset) -> dict[str, Any]:
    """An offset as Spark keeps it: a dict of primitives with Paimon's field names."""
    return offset.model_dump(by_alias=True, exclude_none=True)


def offset_of(value: Mapping[str, Any], *, table: str) -> StreamOffset:
    """The offset of an offset dict (OffsetError for one that is not a changelake offset)."""
    try:
        return StreamOffset.model_validate(value)
    except ValidationError as exc:
        raise OffsetError(f"{value!r} is not a changelake offset: {exc.errors()[0]['msg']}", table=table) from None


class ChangeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of a table's change stream.

    Spark keeps one reader for the query's life on the driver (the admission clock and the
    AvailableNow bound live here); tasks get a copy and only :meth:`read`.
    """

    def __init__(self, source: ChangeSource, admission: Admission, output: Output) -> None:
        self.source = source
        self.admission = admission
        self.output = output
        # Paimon's clock of read.stream.maxTriggerDelayMs: zero, so the first batch never waits.
        self._last_trigger_ms = 0.0
        self._start: StreamOffset | None = None
        self._end_snapshot: int | None = None

    def _offset(self, value: Mapping[str, Any]) -> StreamOffset:
        return offset_of(value, table=self.source.context.name)

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts. With ``consumer-id``, a consumer without a record is made
        to hold this start: Spark commits a batch's offsets only when it plans the next one, so
        a run that reads only the initial full read would otherwise leave nothing that keeps
        expiry off the snapshots the next run reads."""
        if self._start is None:
            self._start = self.source.initial_offset()
            if self.source.consumer_id is not None:
                self.source.hold(self._start)
        return offset_dict(self._start)

    def getDefaultReadLimit(self) -> SparkReadLimit:
        return self.admission.default_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        # A new query starts from the table as it is now, the state that bounds what it reads.
        self.initialOffset()
        latest = self.source.context.latest_snapshot()
        self._end_snapshot = 0 if latest is None else latest.id

    def latestOffset(self, start: dict[str, Any], limit: SparkReadLimit) -> dict[str, Any]:
        """Where a micro-batch from ``start`` ends: the plan up to the read limit (and the
        AvailableNow snapshot); ``start`` itself when there is nothing new or too little."""
        admission = self.admission.under(limit)
        plan = self.source.plan(self._offset(start), admission.read_limit, end_snapshot=self._end_snapshot)
        if plan.end == plan.start or (plan.splits and self._waits(admission, plan.splits)):
            return start
        if plan.splits:
            self._last_trigger_ms = time.time() * 1000
        return offset_dict(plan.end)

    def _waits(self, admission: Admission, splits: tuple[ChangeSplit, ...]) -> bool:
        """Whether to wait for more rows (minRowsPerTrigger), up to the trigger delay after the
        previous batch; never under AvailableNow, where no more rows come."""
        if admission.min_rows is None or self._end_snapshot is not None:
            return False
        if admission.max_delay_ms is not None and time.time() * 1000 - self._last_trigger_ms > admission.max_delay_ms:
            return False
        return sum(s.stop - s.start for s in splits) < admission.min_rows

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """The splits of ``[start, end)``, whatever limit planned ``end``."""
        first, last = self._offset(start), self._offset(end)
        if first == last:
            return []
        # An end at the start of a snapshot's changes needs nothing of that snapshot.
        last_snapshot = last.snapshot_id if last.index or last.scan_snapshot else last.snapshot_id - 1
        plan = self.source.plan(first, end_snapshot=last_snapshot)
        return [ChangeSplitPartition(pack) for pack in packed(before(plan.splits, last), self.source.options)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangeSplitPartition)
        for split in partition.splits:
            for chunk in self.source.read(split):
                yield from self.output.batches(chunk.data)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has the batch up to ``end``: the consumer, if any, records it."""
        if self.source.consumer_id is not None:
            self.source.commit(self._offset(end))


def before(splits: Iterable[ChangeSplit], end: StreamOffset) -> Iterator[ChangeSplit]:
    """The parts of ``splits`` (in stream order) before offset ``end``."""
    for split in splits:
        if split.snapshot_id > end.snapshot_id or (split.snapshot_id == end.snapshot_id and split.start >= end.index):
            return
        if split.snapshot_id == end.snapshot_id and split.stop > end.index:
            yield dataclasses.replace(split, stop=end.index, end=end)
        else:
            yield split
