"""The stateless change-scan API: plan the splits from an offset up to a read limit, read any
split in any process. :class:`ChangeStream` and the Spark source are built on it.

Positions: a snapshot's read (its full read, or its delta or changelog files) is a fixed
sequence of units (planner splits, in plan order), and unit ``k`` spans the positions
``[S_k, S_k + rows stored in its files)``. A delta or changelog unit is one file whose rows are
read as stored, so row ``r`` of the file is position ``S_k + r``; a full-read unit is merged, and
its ``r``-th merged row is position ``S_k + r`` (merging never makes more rows than it reads, so
positions stay unique). Offsets count positions, not filtered rows, so a split can start and end
anywhere and resuming never reads a row twice or skips one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from changelake.changelog import consumers, follow_up, starting
from changelake.changelog.offsets import ChangeKind, ReadLimit, StreamOffset
from changelake.errors import (
    OffsetError,
    RolledBackOffsetError,
    SnapshotExpiredError,
    SnapshotNotFoundError,
)
from changelake.option_values import POSTPONE_BUCKET, ChangelogProducer, ScanMode
from changelake.options import TableOptions, check_keys
from changelake.table import decoupled_changelog, metadata, time_travel
from changelake.table.context import TableContext
from changelake.table.format import kv
from changelake.table.format import snapshot as snapshots
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.maintenance import rollback
from changelake.table.read import planner, reader, sql_filter
from changelake.table.read.planner import Split

ROWKIND = "rowkind"
DEFAULT_MAX_ROWS = 1 << 17
_SYMBOLS = pa.array(kv.ROW_KIND_SYMBOLS, pa.string())


@dataclass(frozen=True)
class ChangeSplit:
    """Positions ``[start, stop)`` of one unit (``split``, whose first position is
    ``unit_start``) of snapshot ``snapshot_id``'s read; ``end`` is the offset after it.
    Picklable and small: it names files, it holds no rows."""

    snapshot_id: int
    kind: ChangeKind
    split: Split
    unit_start: int
    start: int
    stop: int
    end: StreamOffset

    @property
    def merged(self) -> bool:
        """Whether the split's rows are read merged, as inserts (a full read's, an overwrite's
        added files) or as deletes (an overwrite's removed files), rather than as stored with
        their row kinds. Postpone-bucket files are read as stored, as Paimon's no-merge reader
        of ``bucket-postpone/`` does."""
        return self.kind in (ChangeKind.FULL, ChangeKind.OVERWRITE) and self.split.bucket != POSTPONE_BUCKET

    @property
    def rows(self) -> tuple[int, int]:
        """The split's positions relative to its unit."""
        return self.start - self.unit_start, self.stop - self.unit_start


@dataclass(frozen=True)
class ChangePlan:
    """The splits between two offsets: reading them all moves a stream from ``start`` to
    ``end`` (``end == start`` and no splits: nothing new)."""

    start: StreamOffset
    splits: tuple[ChangeSplit, ...]
    end: StreamOffset


@dataclass(frozen=True)
class ChangeChunk:
    """Rows of a split (``rowkind`` then the stream's columns) and the offset after them."""

    data: pa.Table
    offset: StreamOffset


# The columns ``commit_metadata`` adds: the snapshot a change was committed in (for a full
# read, the snapshot read) and its commit time.
COMMIT_METADATA = (pa.field("_commit_snapshot", pa.int64(), nullable=False),
                   pa.field("_commit_timestamp", pa.timestamp("ms", tz="UTC")))


@dataclass(frozen=True)
class ChangeSource:
    """A table's change stream as a stateless planner and reader.

    ``options`` are the table's options with the stream's own over them (``scan.mode``,
    ``scan.snapshot-id``, ``consumer-id``, ...); ``columns`` and ``row_filter`` select what
    each row carries; ``commit_metadata`` adds the snapshot each change was committed in and
    its commit time (``_commit_snapshot``, ``_commit_timestamp``, as Delta's change feed
    carries its commit version and time). Cheap to pickle (the table context pickles small).
    """

    context: TableContext
    options: TableOptions
    columns: tuple[str, ...]
    row_filter: pc.Expression | None = None
    commit_metadata: bool = False

    @staticmethod
    def of(context: TableContext, options: Mapping[str, str] | None = None, columns: Sequence[str] | None = None,
           row_filter: pc.Expression | str | None = None, *, commit_metadata: bool = False) -> ChangeSource:
        """A checked source: ``options`` (Paimon names of known options, strings) over the
        table's, the scan mode and consumer id valid, ``columns`` known and each given once (default: all),
        ``row_filter`` an expression or a SQL-like string on the table's columns."""
        name = context.name
        check_keys(options or {}, name)
        parsed = TableOptions.parse({**context.schema.options, **(options or {})}, table=name)
        starting.start_mode(parsed)
        # a stream from a snapshot, tag or time reads in that snapshot's schema, as Paimon's
        context = time_travel.read_context(context, parsed)
        if parsed.consumer_id is not None:
            consumers.check_id(context, parsed.consumer_id)
        chosen = tuple(context.arrow_schema.names) if columns is None else context.selected_columns(columns)
        return ChangeSource(context, parsed, chosen, sql_filter.as_expression(row_filter, context.arrow_schema, name),
                            commit_metadata)

    @cached_property
    def identity(self) -> str:
        """The table's fingerprint (a hash of its first schema)."""
        return metadata.identity(self.context)

    @property
    def table_id(self) -> str:
        """What offsets made now carry: :attr:`identity`, then ``.rN`` after N rollbacks (listed
        afresh, so offsets from before a rollback are told apart from those after it)."""
        return self._table_id(self._rollbacks())

    def _rollbacks(self) -> list[rollback.RollbackRecord]:
        # Each record is read once per process (they never change); a call lists rollback/.
        return rollback.RECORDS.records(self.context, self.identity)

    def _table_id(self, rollbacks: Sequence[rollback.RollbackRecord]) -> str:
        return f"{self.identity}.r{len(rollbacks)}" if rollbacks else self.identity

    @cached_property
    def schema(self) -> pa.Schema:
        """``rowkind`` (+I, -U, +U, -D) then the selected columns (then the commit metadata)."""
        return pa.schema([*self._row_schema, *(COMMIT_METADATA if self.commit_metadata else ())])

    @cached_property
    def _row_schema(self) -> pa.Schema:
        fields = [self.context.arrow_schema.field(c) for c in self.columns]
        return pa.schema([pa.field(ROWKIND, pa.string(), nullable=False), *fields])

    @property
    def consumer_id(self) -> str | None:
        """The consumer (``consumer-id``) whose progress this source records, if any."""
        return self.options.consumer_id

    def offset(self, snapshot_id: int, index: int = 0, *, full: bool = False) -> StreamOffset:
        """An offset of this table."""
        return StreamOffset(snapshotId=snapshot_id, index=index, scanSnapshot=full, tableId=self.table_id)

    # -- starting ---------------------------------------------------------------------------

    def initial_offset(self) -> StreamOffset:
        """Where a new stream starts: the consumer's next snapshot when ``consumer-id`` names
        one that has recorded progress (unless ``consumer.ignore-progress``), else by
        ``scan.mode``."""
        if self.consumer_id is not None and not self.options.consumer_ignore_progress:
            recorded = consumers.next_snapshot(self.context, self.consumer_id)
            if recorded is not None:
                starting.check_follow_up_start(self.context, recorded, "consumer-id")
                return self.offset(recorded)
        snapshot_id, full = starting.starting_position(self.context, self.options)
        return self.offset(snapshot_id, full=full)

    def check(self, offset: StreamOffset) -> StreamOffset:
        """``offset`` if it can be read from: OffsetError when it belongs to another table or
        lies beyond this table's history, SnapshotExpiredError when its snapshot expired."""
        rollbacks = self._rollbacks()
        current = self._table_id(rollbacks)
        if offset.table_id is not None and offset.table_id != current:
            self._check_rollbacks(offset, rollbacks)
        try:
            starting.check_follow_up_start(self.context, offset.snapshot_id, None)
        except SnapshotNotFoundError as exc:
            if type(exc) is SnapshotNotFoundError:
                raise OffsetError(f"offset {offset.to_json()} is beyond this table's history: {exc.message}",
                                  table=self.context.name) from None
            if not self._starts_anew(offset):
                raise
            snapshot_id, full = starting.starting_position(self.context, self.options)
            return StreamOffset(snapshotId=snapshot_id, scanSnapshot=full, tableId=current)
        return offset if offset.table_id == current else offset.model_copy(update={"table_id": current})

    def _starts_anew(self, offset: StreamOffset) -> bool:
        """Whether an expired ``offset`` is the start of a ``latest-full`` (or ``compacted-full``)
        stream that has read nothing yet: one made on an empty table starts at snapshot 1 in
        full, which may expire before it comes to read it. Paimon's stream picks its first
        snapshot when it first plans; so does this one, instead of failing."""
        return offset.scan_snapshot and offset.index == 0 and \
            starting.start_mode(self.options) in (ScanMode.LATEST_FULL, ScanMode.COMPACTED_FULL)

    def _check_rollbacks(self, offset: StreamOffset, rollbacks: Sequence[rollback.RollbackRecord]) -> None:
        """OffsetError unless ``offset`` (of another table id) is of this table before some
        rollbacks, and lies at or before each of their targets (the start of the next snapshot
        after a target is fine: that snapshot is read whole once committed again)."""
        table, _, generation = (offset.table_id or "").partition(".r")
        if table != self.identity or not (generation == "" or generation.isdigit()):
            raise OffsetError(f"offset {offset.to_json()} belongs to another table", table=self.context.name)
        for record in rollbacks[int(generation or 0):]:
            at_next = offset.snapshot_id == record.snapshot_id + 1 and offset.index == 0 and not offset.scan_snapshot
            if offset.snapshot_id > record.snapshot_id and not at_next:
                raise RolledBackOffsetError(
                    f"offset {offset.to_json()} lies after snapshot {record.snapshot_id}, to which the table was "
                    f"rolled back (from snapshot {record.latest_before}); start the stream anew",
                    table=self.context.name)

    # -- planning ---------------------------------------------------------------------------

    def plan(self, start: StreamOffset | None = None, limit: ReadLimit | None = None, *,
             end_snapshot: int | None = None) -> ChangePlan:
        """The splits from ``start`` (default: :meth:`initial_offset`) up to ``limit`` (default:
        everything committed), not past snapshot ``end_snapshot``; reads only metadata."""
        first = self.initial_offset() if start is None else self.check(start)
        limit = limit or ReadLimit()
        rows_left, files_left = limit.max_rows, limit.max_files
        splits: list[ChangeSplit] = []

        def over_limit(files: int) -> bool:
            # The first split of a plan is always taken, so that every plan makes progress.
            return (rows_left is not None and rows_left <= 0) or (
                files_left is not None and bool(splits) and files > files_left)

        offset = first
        exhausted = False
        while not exhausted:
            if end_snapshot is not None and offset.snapshot_id > end_snapshot:
                break
            units = self._units(offset)
            if units is None:
                break
            kind, unit_splits = units
            if kind is None:  # a snapshot the follow-up scanner skips
                offset = _at(offset, offset.snapshot_id + 1)
                continue
            total = sum(u.row_count for u in unit_splits)
            position, unit_start = offset.index, 0
            for unit in unit_splits:
                unit_stop = unit_start + unit.row_count
                if unit_stop > position:
                    exhausted = over_limit(len(unit.files))
                    if exhausted:
                        break
                    stop = unit_stop if rows_left is None else min(unit_stop, position + rows_left)
                    end = self._after(offset, stop, total)
                    splits.append(ChangeSplit(offset.snapshot_id, kind, unit, unit_start, position, stop, end))
                    rows_left = None if rows_left is None else rows_left - (stop - position)
                    files_left = None if files_left is None else files_left - len(unit.files)
                    position = stop
                    exhausted = over_limit(1)
                unit_start = unit_stop
            offset = self._after(offset, position, total)
        return ChangePlan(first, tuple(splits), offset)

    def _after(self, offset: StreamOffset, position: int, total: int) -> StreamOffset:
        """The offset at ``position`` of ``offset``'s snapshot read: once the read is done, the
        next snapshot's changes (after a full read of a table with deletion vectors, the same
        snapshot's: :func:`starting.changes_follow_full_read`)."""
        if position >= total:
            if offset.scan_snapshot and starting.changes_follow_full_read(self.options) and \
                    self.context.snapshot(offset.snapshot_id).commit_kind is not CommitKind.OVERWRITE:
                return _at(offset, offset.snapshot_id)
            return _at(offset, offset.snapshot_id + 1)
        return _at(offset, offset.snapshot_id, position, full=offset.scan_snapshot)

    def _units(self, offset: StreamOffset) -> tuple[ChangeKind | None, list[Split]] | None:
        """What the read of ``offset``'s snapshot consists of (None: the snapshot is yet to
        come; kind None: the snapshot has nothing to read)."""
        snapshot = self._snapshot(offset.snapshot_id, full=offset.scan_snapshot)
        if snapshot is None:
            return None
        if offset.scan_snapshot:
            levels = starting.full_read_levels(self.options)
            # Without a changelog producer, Paimon's streams read postpone-bucket files as they
            # are (with one, the compaction that moves them into real buckets writes changelog).
            postpone = self.options.changelog_producer is ChangelogProducer.NONE
            return ChangeKind.FULL, planner.plan(self.context, snapshot, self.row_filter, levels, postpone=postpone)
        kind = follow_up.change_kind(self.context, self.options, snapshot)
        if kind is None:
            return None, []
        return kind, follow_up.change_splits(self.context, snapshot, kind, self.row_filter)

    def _snapshot(self, snapshot_id: int, *, full: bool = False) -> Snapshot | None:
        """The snapshot whose changes (or, ``full``, whose rows) come next; its kept
        changelog when it expired (changes only), None when it is yet to come."""
        try:
            return self.context.snapshot(snapshot_id)
        except SnapshotNotFoundError:
            kept = None if full else decoupled_changelog.read(self.context, snapshot_id)
            if kept is not None:
                return kept
            # Gone because it expired (raises), or not committed yet (None).
            if full and snapshot_id <= (snapshots.latest_id(self.context.file_io, self.context.paths) or 0):
                try:  # committed between the read and the listing, or expired: its rows are gone
                    return self.context.snapshot(snapshot_id)
                except SnapshotNotFoundError:
                    raise SnapshotExpiredError(f"snapshot {snapshot_id} expired during its full read",
                                               table=self.context.name) from None
            starting.check_follow_up_start(self.context, snapshot_id, None)
            latest = snapshots.latest_id(self.context.file_io, self.context.paths)
            if latest is None or snapshot_id > latest:
                return None
            # Committed between the read and the listing: read it now (a real gap raises).
            return self.context.snapshot(snapshot_id)

    # -- reading ----------------------------------------------------------------------------

    def load(self, split: ChangeSplit) -> pa.Table:
        """The rows at the split's positions, before the filter: for a full read the merged
        rows (possibly fewer than positions), else ``_VALUE_KIND`` and the rows as stored."""
        needed = list(self.context.arrow_schema.names) if self.row_filter is not None else list(self.columns)
        if split.merged:
            return reader.read_split(self.context, split.split, needed, None, split.rows)
        return reader.read_changes(self.context, split.split, needed, split.rows)

    def chunks(self, split: ChangeSplit, rows: pa.Table, max_rows: int = DEFAULT_MAX_ROWS) -> Iterator[ChangeChunk]:
        """``rows`` (what :meth:`load` returned) in chunks of at most ``max_rows`` positions,
        filtered and projected, each with the offset after it (empty chunks are left out)."""
        committed = self._commit_of(split.snapshot_id) if self.commit_metadata else None
        for first in range(0, rows.num_rows, max_rows):
            part = rows.slice(first, max_rows)
            last = first + max_rows >= rows.num_rows
            offset = split.end if last else _at(split.end, split.snapshot_id, split.start + first + max_rows,
                                                full=split.kind is ChangeKind.FULL)
            data = self._output(part, merged=split.merged, reverse=split.split.reversed)
            if data.num_rows:
                yield ChangeChunk(data if committed is None else with_commit(data, committed), offset)

    def read(self, split: ChangeSplit, max_rows: int = DEFAULT_MAX_ROWS) -> Iterator[ChangeChunk]:
        """The split's rows in chunks of at most ``max_rows``, each with the offset after it."""
        yield from self.chunks(split, self.load(split), max_rows)

    def to_batches(self, split: ChangeSplit, max_rows: int = DEFAULT_MAX_ROWS) -> Iterator[pa.RecordBatch]:
        """The split's rows as record batches (what a Spark task returns)."""
        for chunk in self.read(split, max_rows):
            yield from chunk.data.to_batches()

    def _commit_of(self, snapshot_id: int) -> tuple[int, int | None]:
        """The snapshot a split's rows come from and its commit time (read once per split)."""
        committed = self._snapshot(snapshot_id)
        return snapshot_id, committed.time_millis if committed is not None else None

    def _output(self, rows: pa.Table, *, merged: bool, reverse: bool) -> pa.Table:
        rows = reader.apply_filter(self.context, rows, self.row_filter)
        if merged:  # a removed file's merged rows as -D (Paimon's ReverseReader), else as +I
            kind = kv.DELETE if reverse else kv.INSERT
            kinds: pa.Array = pa.repeat(pa.scalar(kv.ROW_KIND_SYMBOLS[kind]), rows.num_rows)
        elif reverse:
            # A removed postpone-bucket file, as stored: its inserts and update-afters as -D; a
            # retraction retracts a row the overwrite removed as well, so it brings nothing back.
            rows = rows.filter(pc.is_in(rows.column(kv.VALUE_KIND), pa.array([kv.INSERT, kv.UPDATE_AFTER], pa.int8())))
            kinds = pa.repeat(pa.scalar(kv.ROW_KIND_SYMBOLS[kv.DELETE]), rows.num_rows)
        else:
            kinds = _SYMBOLS.take(rows.column(kv.VALUE_KIND))
        return pa.Table.from_arrays([kinds, *(rows.column(c) for c in self.columns)], schema=self._row_schema)

    # -- consumers --------------------------------------------------------------------------

    def hold(self, start: StreamOffset) -> None:
        """Make the consumer (``consumer-id``) hold ``start``'s snapshot when it has no record
        yet, so that expiry keeps what a stream from ``start`` reads, a first full read
        included, before the stream commits anything. A consumer that has a record keeps it:
        it protects what a stream resumed from a checkpoint still reads."""
        if self.consumer_id is None:
            raise OffsetError("the stream has no consumer-id to hold snapshots under", table=self.context.name,
                              option="consumer-id")
        if consumers.next_snapshot(self.context, self.consumer_id) is None:
            consumers.record(self.context, self.consumer_id, self.check(start).snapshot_id)

    def commit(self, offset: StreamOffset) -> None:
        """Record ``offset`` as the consumer's progress (``consumer-id``): its snapshot is the
        next one to read, so a snapshot read in part is read again from its start. An offset
        inside a first full read records nothing (a consumer resumes at changes only, and the
        full read has not finished)."""
        if self.consumer_id is None:
            raise OffsetError("the stream has no consumer-id to record progress under", table=self.context.name,
                              option="consumer-id")
        self.check(offset)
        if not offset.scan_snapshot:
            consumers.record(self.context, self.consumer_id, offset.snapshot_id)


def with_commit(data: pa.Table, committed: tuple[int, int | None]) -> pa.Table:
    """``data`` with the snapshot its rows come from and that snapshot's commit time."""
    snapshot_id, millis = committed
    snapshot_field, time_field = COMMIT_METADATA
    return (data.append_column(snapshot_field, pa.repeat(pa.scalar(snapshot_id, pa.int64()), data.num_rows))
            .append_column(time_field, pa.repeat(pa.scalar(millis, time_field.type), data.num_rows)))


def _at(offset: StreamOffset, snapshot_id: int, index: int = 0, *, full: bool = False) -> StreamOffset:
    """A position of the same table as ``offset`` (its table id, checked when it was made)."""
    return StreamOffset(snapshotId=snapshot_id, index=index, scanSnapshot=full, tableId=offset.table_id)
