"""Splits of an append table's bucket: its files in the order they were written, read as they
are (an append table has nothing to merge), packed up to ``source.split.target-size``.

As Paimon's ``AppendOnlySplitGenerator``: files are ordered by their first sequence number, a
stable sort that keeps commit order among files of equal numbers (pypaimon 2.1 numbers every
file of an unaware bucket from 0), so rows come back per bucket in the order they were
appended."""

from __future__ import annotations

from collections.abc import Sequence

from changelake.table.context import TableContext
from changelake.table.format.manifest import DataFileMeta


def split_bucket(ctx: TableContext, files: Sequence[DataFileMeta]) -> list[tuple[list[DataFileMeta], bool]]:
    """The bucket's files as split groups in write order, each read raw."""
    options = ctx.options
    ordered = sorted(files, key=lambda f: f.min_sequence_number)
    groups: list[tuple[list[DataFileMeta], bool]] = []
    current: list[DataFileMeta] = []
    weight = 0
    for f in ordered:
        size = max(f.file_size, options.split_open_file_cost)
        if current and weight + size > options.split_target_size:
            groups.append((current, True))
            current, weight = [], 0
        current.append(f)
        weight += size
    if current:
        groups.append((current, True))
    return groups
