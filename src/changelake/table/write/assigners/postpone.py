"""Postpone buckets (``bucket = -2``): every row waits in its partition's ``bucket-postpone/``
until a compaction gives it a real bucket (Paimon's ``PostponeBucketFileStoreWrite``); there is
no index to keep, and a distributed write needs no routing (each task writes its own rows)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from changelake.option_values import POSTPONE_BUCKET
from changelake.table.write.assigners.base import Stateless


class PostponeBuckets(Stateless):
    """Every row's bucket is -2."""

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        return np.full(data.num_rows, POSTPONE_BUCKET, dtype=np.int64)

    def route(self, key_columns: Sequence[pa.Array]) -> np.ndarray:
        """One group: any task may write any row."""
        return np.zeros(len(key_columns[0]) if key_columns else 0, dtype=np.int64)
