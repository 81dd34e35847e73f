"""Change streams (iterate, follow, resume, record progress) and batch change reads, both
built on :class:`ChangeSource`."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from changelake import handoff
from changelake.changelog.offsets import ChangeKind, ReadLimit, StreamOffset
from changelake.changelog.source import DEFAULT_MAX_ROWS, ChangeSource, ChangeSplit
from changelake.errors import ScanError, SnapshotNotFoundError
from changelake.table.executor import WORKERS, executor
from changelake.table.format import snapshot as snapshots

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl

# Files planned per round of a stream: enough to keep the readers busy, few enough that new
# snapshots are noticed between rounds.
_FILES_PER_ROUND = 64


@dataclass(frozen=True)
class ChangeBatch:
    """Changes of one snapshot: ``data`` has ``rowkind`` (+I, -U, +U, -D) then the stream's
    columns; ``offset`` is the position after this batch (resume there to read what follows)."""

    snapshot_id: int
    kind: ChangeKind
    data: pa.Table
    offset: StreamOffset

    def to_pandas(self) -> pd.DataFrame:
        """The batch's rows (``rowkind`` first) as a pandas DataFrame (extra ``changelake[pandas]``)."""
        return handoff.to_pandas(self.data)

    def to_polars(self) -> pl.DataFrame:
        """The batch's rows (``rowkind`` first) as a polars DataFrame over the same Arrow
        buffers (extra ``changelake[polars]``)."""
        return handoff.to_polars(self.data)


def _read_ahead(source: ChangeSource, splits: tuple[ChangeSplit, ...]) -> Iterator[tuple[ChangeSplit, pa.Table]]:
    """Each split with its rows, loaded in parallel a few splits ahead (bounded memory)."""
    pool = executor()
    pending: deque[tuple[ChangeSplit, Future[pa.Table]]] = deque()
    upcoming = iter(splits)
    for split in upcoming:
        pending.append((split, pool.submit(source.load, split)))
        if len(pending) >= 2 * WORKERS:
            break
    while pending:
        split, future = pending.popleft()
        rows = future.result()
        nxt = next(upcoming, None)
        if nxt is not None:
            pending.append((nxt, pool.submit(source.load, nxt)))
        yield split, rows


class ChangeStream:
    """A table's changes from a starting offset on.

    Iterating yields :class:`ChangeBatch` items until the stream has caught up with the latest
    snapshot, then stops; iterating again continues where it stopped. :meth:`follow` keeps
    polling for new snapshots. Batches hold at most ``max_rows`` rows, and only a few files'
    rows are in memory at a time.
    """

    def __init__(self, source: ChangeSource, offset: StreamOffset | None = None, *,
                 max_rows: int = DEFAULT_MAX_ROWS) -> None:
        if max_rows <= 0:
            raise ScanError(f"max_rows must be positive, got {max_rows}", table=source.context.name)
        self.source = source
        self.max_rows = max_rows
        self._offset = source.initial_offset() if offset is None else source.check(offset)

    def __repr__(self) -> str:
        return f"ChangeStream({self.source.context.name!r}, offset={self._offset.to_json()})"

    @property
    def offset(self) -> StreamOffset:
        """The position after everything read so far (where a resumed stream starts)."""
        return self._offset

    @property
    def schema(self) -> pa.Schema:
        """Schema of each batch's data: ``rowkind`` then the selected columns."""
        return self.source.schema

    def __iter__(self) -> Iterator[ChangeBatch]:
        while True:
            plan = self.source.plan(self._offset, ReadLimit(max_files=_FILES_PER_ROUND))
            for split, rows in _read_ahead(self.source, plan.splits):
                for chunk in self.source.chunks(split, rows, self.max_rows):
                    self._offset = chunk.offset
                    yield ChangeBatch(split.snapshot_id, split.kind, chunk.data, chunk.offset)
                self._offset = split.end
            self._offset = plan.end
            if not plan.splits:
                return

    def follow(self, poll_interval: float = 1.0,
               stop: threading.Event | Callable[[], bool] | None = None) -> Iterator[ChangeBatch]:
        """Batches as snapshots are committed, polling every ``poll_interval`` seconds once
        caught up, until ``stop`` (an event that is set, or a callable that returns True)."""
        def stopped() -> bool:
            if stop is None:
                return False
            return stop.is_set() if isinstance(stop, threading.Event) else bool(stop())

        while not stopped():
            for batch in self:
                yield batch
                if stopped():
                    return
            if isinstance(stop, threading.Event):
                stop.wait(poll_interval)
            elif not stopped():
                time.sleep(poll_interval)

    def commit(self, offset: StreamOffset | None = None) -> None:
        """Record ``offset`` (default: :attr:`offset`) as this stream's consumer progress, so a
        new stream with the same ``consumer_id`` resumes there (at the start of its snapshot)."""
        self.source.commit(self._offset if offset is None else offset)


@dataclass(frozen=True)
class Changes(handoff.ArrowExports):
    """The changes of the snapshots after ``start_snapshot`` up to ``end_snapshot`` (Paimon's
    ``incremental-between``): delta files with producer ``none``, else changelog files."""

    source: ChangeSource
    start_snapshot: int
    end_snapshot: int
    max_rows: int = DEFAULT_MAX_ROWS

    @staticmethod
    def of(source: ChangeSource, start_snapshot: int, end_snapshot: int) -> Changes:
        """Checked: ``start_snapshot <= end_snapshot``, the end committed, the range not expired."""
        ctx = source.context
        if start_snapshot < 0 or start_snapshot > end_snapshot:
            raise ScanError(f"snapshot range ({start_snapshot}, {end_snapshot}] is empty or reversed; give "
                            "0 <= start_snapshot <= end_snapshot", table=ctx.name)
        latest = snapshots.latest_id(ctx.file_io, ctx.paths) or 0
        if end_snapshot > latest:
            raise SnapshotNotFoundError(f"snapshot {end_snapshot} does not exist (the latest is {latest})",
                                        table=ctx.name)
        if start_snapshot < end_snapshot:
            source.check(source.offset(start_snapshot + 1))  # an expired start raises now
        return Changes(source, start_snapshot, end_snapshot)

    @property
    def schema(self) -> pa.Schema:
        """``rowkind`` then the selected columns."""
        return self.source.schema

    def plan(self) -> list[ChangeSplit]:
        """The splits to read (metadata only)."""
        if self.start_snapshot == self.end_snapshot:
            return []
        start = self.source.offset(self.start_snapshot + 1)
        return list(self.source.plan(start, end_snapshot=self.end_snapshot).splits)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The changes as record batches of at most ``max_rows`` rows, in snapshot order."""
        for split, rows in _read_ahead(self.source, tuple(self.plan())):
            for chunk in self.source.chunks(split, rows, self.max_rows):
                yield from chunk.data.to_batches()

    def to_arrow_batch_reader(self) -> pa.RecordBatchReader:
        """The changes as a ``pyarrow.RecordBatchReader``."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        """All the changes as one Arrow table."""
        return pa.Table.from_batches(self.to_batches(), schema=self.schema)
