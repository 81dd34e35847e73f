"""Fixed buckets (``bucket`` >= 1): a row's bucket is the hash of its bucket key modulo the
number of buckets (Paimon's ``FixedBucketRowKeyExtractor``); there is no index to keep."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from changelake.table.context import TableContext
from changelake.table.format import bucket
from changelake.table.write.assigners.base import Stateless


class FixedBuckets(Stateless):
    """The bucket of a row is ``abs(hash(bucket key) % bucket)``."""

    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        return self.route([data.column(k) for k in self.ctx.bucket_key])

    def route(self, key_columns: Sequence[pa.Array]) -> np.ndarray:
        """The bucket itself."""
        return bucket.buckets(key_columns, self.ctx.options.bucket).astype(np.int64)
