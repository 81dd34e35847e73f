"""Rows grouped by partition: each row's partition as a serialized BinaryRow."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from changelake.table.context import TableContext
from changelake.table.format import binary_row


@dataclass(frozen=True)
class PartitionGroups:
    """Rows tagged with their partition, in input order."""

    codes: np.ndarray
    partitions: list[bytes]


def partition_groups(ctx: TableContext, data: pa.Table) -> PartitionGroups:
    """The partition (serialized BinaryRow) of every row."""
    columns = [data.column(k) for k in ctx.partition_keys]
    if not columns:
        empty = binary_row.serialize(binary_row.to_bytes([], []), 0)
        return PartitionGroups(np.zeros(data.num_rows, dtype=np.int64), [empty] if data.num_rows else [])
    codes = np.zeros(data.num_rows, dtype=np.int64)
    radix = 1
    for column in columns:
        encoded = pc.dictionary_encode(column, null_encoding="encode").combine_chunks()
        codes = codes + np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64) * radix
        radix *= max(1, len(encoded.dictionary))
    unique, first_rows, inverse = np.unique(codes, return_index=True, return_inverse=True)
    encoded_rows = binary_row.encode([c.take(pa.array(first_rows)) for c in columns])
    partitions = [binary_row.serialize(encoded_rows.row(g), len(columns)) for g in range(len(unique))]
    return PartitionGroups(inverse.astype(np.int64).reshape(-1), partitions)
