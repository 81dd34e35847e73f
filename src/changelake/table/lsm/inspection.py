"""A table's LSM trees as values: per bucket the levels, sorted runs and files with their key
ranges, what universal compaction would pick next (and why), and the snapshot's changelog files
(one bucket's values are in :mod:`.bucket_tree`).

Everything comes from manifests (file metadata), never from data files, so inspecting a large
table reads only its metadata. The text summary is here; the picture is drawn by
:mod:`.picture`, which loads matplotlib only when it draws.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from changelake.errors import ScanError
from changelake.option_values import POSTPONE_BUCKET
from changelake.table.append import compaction as append_compaction
from changelake.table.context import TableContext, partition_of
from changelake.table.format.manifest import DataFileMeta, FileSource
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import Snapshot
from changelake.table.io import paths
from changelake.table.lsm import picture
from changelake.table.lsm.bucket_tree import (
    BucketInspection,
    FileInspection,
    PendingCompaction,
    SortedRunInspection,
    human_size,
    key_text,
)
from changelake.table.lsm.levels import Levels, LevelSortedRun
from changelake.table.lsm.universal import PickRule, UniversalCompaction
from changelake.table.read import live_files


@dataclass(frozen=True)
class TableInspection:
    """Every bucket's LSM tree in one snapshot; ``str()`` is :meth:`summary`."""

    table: str
    snapshot_id: int | None
    key_names: tuple[str, ...]
    partition_keys: tuple[str, ...]
    partition_types: tuple[pa.DataType, ...]
    num_levels: int
    full_compaction_every: int | None  # a writer fully compacts every this many commits
    buckets: tuple[BucketInspection, ...]

    @property
    def files(self) -> int:
        return sum(len(b.files) for b in self.buckets)

    @property
    def size(self) -> int:
        return sum(b.size for b in self.buckets)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.buckets)

    @property
    def runs(self) -> int:
        return sum(len(b.runs) for b in self.buckets)

    def bucket(self, bucket: int | None = None, *, partition: dict[str, Any] | None = None) -> BucketInspection:
        """One bucket (by number and/or partition values); when either is left out, the
        largest bucket (in bytes) of those matching. The partition's values match as in
        ``Table.compact(partitions=...)``: a datetime or its nanoseconds for a TIMESTAMP(7..9).
        ScanError when none matches."""
        wanted = None
        if partition is not None:
            wanted = partition_of(self.table, self.partition_keys, self.partition_types, partition)
        matching = [b for b in self.buckets
                    if (bucket is None or b.bucket == bucket)
                    and (wanted is None or tuple(v for _, v in b.partition) == wanted)]
        if not matching:
            raise ScanError(f"no bucket {bucket if bucket is not None else ''} in partition {partition or '(any)'} "
                            f"of snapshot {self.snapshot_id}", table=self.table)
        return max(matching, key=lambda b: (b.size, -b.bucket))

    def summary(self) -> str:
        """A compact text summary: a header with totals, then one block per bucket."""
        return summary_text(self)

    def __str__(self) -> str:
        return self.summary()

    def to_png(self, path: str, *, partition: dict[str, Any] | None = None, bucket: int | None = None,
               width: float = 12.0, height: float = 8.0, dpi: int = 100) -> None:
        """Draw one bucket's tree (default: the largest) as a PNG at ``path`` (a local path):
        one band per level, each file a box over its key range, sorted runs in colors, the
        pending compaction's files outlined and its reason as the caption, changelog files at
        the side. Needs matplotlib (``pip install 'changelake[plot]'``)."""
        picture.draw(self.bucket(bucket, partition=partition), path, table=self.table, snapshot_id=self.snapshot_id,
                     key_names=self.key_names, width=width, height=height, dpi=dpi)


def _file(ctx: TableContext, f: DataFileMeta) -> FileInspection:
    return FileInspection(f.file_name, f.level, f.row_count, f.file_size, ctx.key_of.values(f.min_key),
                          ctx.key_of.values(f.max_key),
                          f.min_sequence_number, f.max_sequence_number, f.delete_row_count,
                          f.file_source == FileSource.COMPACT)


def _partition_text(ctx: TableContext, values: Sequence[Any]) -> str:
    """``key=value,...``, a TIMESTAMP(7..9) value (its nanoseconds) as the timestamp, which
    ``--partition`` on the command line takes back (with its zone, UTC, if it has one)."""
    def text(value: Any, data_type: pa.DataType) -> str:
        if isinstance(value, int) and pa.types.is_timestamp(data_type):
            return paths.timestamp_text(value, 9) + ("+00:00" if data_type.tz is not None else "")
        return str(value)
    return ",".join(f"{k}={text(v, t)}" for k, v, t in zip(ctx.partition_keys, values, ctx.partition_types,
                                                             strict=True))


def inspect(ctx: TableContext, snapshot: Snapshot | None, *, force_level0_up: bool,
            full_compaction_every: int | None) -> TableInspection:
    """The LSM trees of ``snapshot`` (None: an empty table). ``force_level0_up``: the table's
    compactions pick level 0 up when nothing else is (lookup producer, first-row), as
    :func:`~changelake.table.lsm.compactor.forces_level0_up` tells."""
    options = ctx.options
    files: dict[tuple[bytes, int], list[DataFileMeta]] = defaultdict(list)
    changelog: dict[tuple[bytes, int], list[DataFileMeta]] = defaultdict(list)
    if snapshot is not None:
        files.update(live_files.files_by_bucket(live_files.live_entries(ctx, snapshot)))
        if snapshot.changelog_manifest_list is not None:
            for meta in live_files.manifest_list(ctx, snapshot.changelog_manifest_list):
                for entry in live_files.manifest_entries(ctx, meta.file_name):
                    changelog[(entry.partition, entry.bucket)].append(entry.file)
    choose = UniversalCompaction(max_size_amplification_percent=options.max_size_amplification_percent,
                                 size_ratio=options.size_ratio, compaction_trigger=options.compaction_trigger)
    buckets = []
    for key in sorted(set(files) | set(changelog), key=lambda k: (ctx.partition_values(k[0]), k[1])):
        partition, bucket = key
        levels = Levels(tuple(files.get(key, ())), options.num_levels)
        if ctx.kind is TableKind.APPEND:
            ordered = sorted(files.get(key, ()), key=lambda f: f.min_sequence_number)
            runs = tuple(SortedRunInspection(f.level, (_file(ctx, f),)) for f in ordered)
            pending = _append_pending(ctx, ordered)
        else:
            sorted_runs = levels.sorted_runs(ctx.key_of)
            runs = tuple(SortedRunInspection(r.level, tuple(_file(ctx, f) for f in r.run.files)) for r in sorted_runs)
            pending = _pending(ctx, choose, levels, sorted_runs, bucket, force_level0_up=force_level0_up)
        values = ctx.partition_values(partition)
        buckets.append(BucketInspection(
            partition=tuple(zip(ctx.partition_keys, values, strict=True)),
            partition_text=_partition_text(ctx, values),
            bucket=bucket,
            num_levels=levels.num_levels,
            runs=runs,
            pending=pending,
            changelog=tuple(_file(ctx, f) for f in sorted(changelog.get(key, ()), key=lambda f: f.file_name)),
        ))
    return TableInspection(ctx.name, None if snapshot is None else snapshot.id, ctx.key_names, ctx.partition_keys,
                           tuple(ctx.partition_types), options.num_levels,
                           full_compaction_every, tuple(buckets))


def _pending(ctx: TableContext, choose: UniversalCompaction, levels: Levels, runs: Sequence[LevelSortedRun],
             bucket: int, *, force_level0_up: bool) -> PendingCompaction:
    """What universal compaction would pick next in a primary-key table's bucket."""
    if bucket == POSTPONE_BUCKET:
        return PendingCompaction(PickRule.NONE, "the table's compaction moves these rows into real buckets "
                                 "(readers skip bucket-postpone/ until then)")
    explain = choose.explain_level0 if force_level0_up else choose.explain
    pick = explain(levels.num_levels, runs)
    if pick.unit is None:
        return PendingCompaction(pick.rule, pick.reason)
    return PendingCompaction(pick.rule, pick.reason, tuple(f.file_name for f in pick.unit.files),
                             pick.unit.output_level)


def _append_pending(ctx: TableContext, ordered: Sequence[DataFileMeta]) -> PendingCompaction:
    """What an append table's small-file compaction would join next in a bucket (files in write
    order, each its own run: an append table's rows have no key to sort by)."""
    options = ctx.options
    target = ctx.target_file_size
    settings = (f"target-file-size {human_size(target)}, compaction.min.file-num {options.compaction_min_file_num}"
                + (f", compaction.max.file-num {options.compaction_max_file_num}"
                   if options.compaction_max_file_num else ""))
    groups = append_compaction.pick(ctx, options.bucket, ordered, full=False)
    if not groups:
        return PendingCompaction(PickRule.NONE, f"nothing: no small files reach a compaction ({settings})")
    picked = [f for group in groups for f in group]
    return PendingCompaction(PickRule.SMALL_FILES, f"{len(picked)} small files joined in write order into "
                             f"{len(groups)} new {'file' if len(groups) == 1 else 'files'} ({settings})",
                             tuple(f.file_name for f in picked), 0)


# -- text ------------------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _table(rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]


def _bucket_block(b: BucketInspection) -> list[str]:
    where = f"partition {b.partition_text} " if b.partition else ""
    name = "postpone" if b.bucket == POSTPONE_BUCKET else b.bucket
    lines = [f"{where}bucket {name}: {_count(len(b.files), 'file')}, {human_size(b.size)}, "
             f"{_count(b.rows, 'row')}, {_count(len(b.runs), 'sorted run')}"]
    picked = set(b.pending.files)
    rows: list[list[str]] = [["", "level", "run", "file", "rows", "size", "min key", "max key", "seq", "deleted"]]
    for index, run in enumerate(b.runs):
        for f in run.files:
            rows.append(["*" if f.name in picked else "", str(f.level), str(index), f.name, str(f.rows),
                         human_size(f.size), key_text(f.min_key), key_text(f.max_key),
                         f"{f.min_sequence}-{f.max_sequence}", "" if f.deleted_rows is None else str(f.deleted_rows)])
    if len(rows) > 1:
        lines += ["  " + line for line in _table(rows, {1, 2, 4, 5, 9})]
    empty = [str(level) for level in range(b.num_levels) if not b.level(level)]
    if empty:
        lines.append(f"  empty levels: {', '.join(empty)}")
    marker = " (files marked *)" if picked else ""
    lines.append(f"  pending compaction{marker}: {b.pending.reason}")
    if b.changelog:
        lines.append(f"  changelog files of this snapshot: {len(b.changelog)}, "
                     f"{sum(f.rows for f in b.changelog)} rows, {human_size(sum(f.size for f in b.changelog))}")
        lines += ["    " + line for line in _table([[f.name, f"{f.rows} rows", human_size(f.size)]
                                                     for f in b.changelog], {1, 2})]
    return lines


def summary_text(inspection: TableInspection) -> str:
    """The text :meth:`TableInspection.summary` returns."""
    if inspection.snapshot_id is None:
        return f"table {inspection.table}: no snapshot yet"
    keys = ", ".join(inspection.key_names) or "(none)"
    lines = [f"table {inspection.table} at snapshot {inspection.snapshot_id}: "
             f"{_count(len(inspection.buckets), 'bucket')}, {_count(inspection.files, 'file')}, "
             f"{human_size(inspection.size)}, {_count(inspection.rows, 'row')}, "
             f"{_count(inspection.runs, 'sorted run')}; key ({keys}), {inspection.num_levels} levels"]
    if inspection.full_compaction_every is not None:
        lines.append(f"writers fully compact every {inspection.full_compaction_every} commits "
                     "(full-compaction.delta-commits)")
    for b in inspection.buckets:
        lines += ["", *_bucket_block(b)]
    return "\n".join(lines)
