"""Rescaling a fixed-bucket append table's partition: its rows, old bucket after old bucket and
each in write order, hashed by ``bucket-key`` into the new number of buckets (Paimon's
``rescale`` procedure overwrites the partition with its own rows, read bucket by bucket), so a
new bucket keeps the order its rows had within each old bucket. Rows are held up to
``write-buffer-size``; past it, the new bucket holding most is written out as a file and its
later rows continue in the next file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from changelake.errors import OptionError
from changelake.table.commit.message import CommitMessage
from changelake.table.context import TableContext
from changelake.table.format import bucket as bucket_hash
from changelake.table.format import data_file
from changelake.table.format.manifest import DataFileMeta, FileSource
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint

_BATCH_ROWS = 65536


def check(ctx: TableContext) -> None:
    """OptionError for an append table changelake does not rescale: one with deletion vectors
    (the rewrite would have to drop the rows they mark)."""
    if ctx.options.deletion_vectors_enabled:
        raise OptionError("changelake does not rescale append tables with deletion vectors", table=ctx.name,
                          option="deletion-vectors.enabled")


@dataclass
class _NewBuckets:
    """Rows waiting for their new bucket's next file, and each new bucket's files so far."""

    ctx: TableContext
    partition: bytes
    target: int
    on_write: Callable[[list[str]], None]
    pending: dict[int, list[pa.Table]] = field(default_factory=dict)
    pending_bytes: dict[int, int] = field(default_factory=dict)
    files: dict[int, list[DataFileMeta]] = field(default_factory=dict)
    next_sequence: dict[int, int] = field(default_factory=dict)

    def add(self, rows: pa.Table) -> None:
        ids = bucket_hash.buckets([rows.column(k).combine_chunks() for k in self.ctx.bucket_key], self.target)
        order = np.argsort(ids, kind="stable")
        bounds = np.searchsorted(ids[order], np.arange(self.target + 1))
        for new_bucket in np.unique(ids).tolist():
            part = rows.take(order[bounds[new_bucket]:bounds[new_bucket + 1]])
            self.pending.setdefault(new_bucket, []).append(part)
            self.pending_bytes[new_bucket] = self.pending_bytes.get(new_bucket, 0) + part.nbytes
        while self.pending_bytes and sum(self.pending_bytes.values()) > self.ctx.options.write_buffer_size:
            self.flush(max(self.pending_bytes, key=lambda b: self.pending_bytes[b]))

    def flush(self, new_bucket: int) -> None:
        parts = self.pending.pop(new_bucket)
        self.pending_bytes.pop(new_bucket)
        first = self.next_sequence.get(new_bucket, 0)
        bucket_dir = self.ctx.bucket_dir(self.partition, new_bucket)
        written = data_file.write(self.ctx.file_io, bucket_dir, parts, self.ctx.file_settings, level=0,
                                  file_source=FileSource.COMPACT, first_sequence=first)
        self.on_write(self.ctx.file_paths(bucket_dir, written))
        self.files.setdefault(new_bucket, []).extend(written)
        self.next_sequence[new_bucket] = first + sum(p.num_rows for p in parts)


def rewrite_partition(ctx: TableContext, partition: bytes, buckets: Sequence[tuple[int, list[DataFileMeta]]],
                      target: int, on_write: Callable[[list[str]], None]) -> list[CommitMessage]:
    """The partition's rows in ``target`` new buckets, one message each (``on_write`` gets the
    paths of the files as they are written, for cleanup on failure)."""
    new = _NewBuckets(ctx, partition, target, on_write)
    columns = list(ctx.arrow_schema.names)
    for old_bucket, files in sorted(buckets):
        bucket_dir = ctx.bucket_dir(partition, old_bucket)
        for f in sorted(files, key=lambda f: f.min_sequence_number):
            for batch in ctx.read_file_batches(bucket_dir, f, columns, _BATCH_ROWS):
                new.add(batch)
    for new_bucket in sorted(new.pending):
        new.flush(new_bucket)
    killpoints.reached(KillPoint.RESCALE)
    return [CommitMessage(partition, b, target, new_files=tuple(files)) for b, files in sorted(new.files.items())]
