"""The bucket assigner interface a writer calls, whatever the table's bucket mode."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from changelake.table.commit.message import CommitMessage
from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.snapshot import Snapshot


@dataclass(frozen=True)
class IndexUpdate:
    """A bucket's new HASH index file and the names of the HASH index files its partition had
    when the assignment started (a commit whose partition's index changed since is void)."""

    file: IndexFileMeta
    base: tuple[str, ...]


class BucketAssigner(Protocol):
    """Assigns rows to buckets and keeps whatever index the assignment needs."""

    def relocate(self, data: pa.Table, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """The rows (and their kinds) to write for a flush's rows, in order: the same rows,
        except where a cross-partition upsert moves, keeps or drops a key of another partition."""
        ...

    def assign(self, data: pa.Table, partition_of_row: np.ndarray, partitions: Sequence[bytes]) -> np.ndarray:
        """The bucket of every row (int64); ``partition_of_row`` indexes ``partitions`` (serialized)."""
        ...

    def route(self, key_columns: Sequence[pa.Array]) -> np.ndarray:
        """For a distributed write, the group of every row (of one partition) that one task
        must write with all other rows of its group: rows of different groups never share a
        bucket nor a key, and each group's new keys go to buckets no other group opens."""
        ...

    def prepare(self, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        """The messages of the rows assigned since the last prepare, with what their commit
        needs of the assignment (index files to land, the snapshot the keys were placed at)."""
        ...

    def landed(self, snapshot: Snapshot) -> None:
        """The prepared messages landed, the first of their snapshots being ``snapshot``: the
        APPEND with their rows (the COMPACT after it may follow other writers' commits), or a
        COMPACT when they held compactions alone."""
        ...

    def forget(self) -> None:
        """Drop what is not committed; the next assignment starts from the table as it is then."""
        ...

    def checkpoint(self) -> object:
        """The assignment's state, for :meth:`restore` after a write call that failed."""
        ...

    def restore(self, checkpoint: object) -> None:
        """Return to a :meth:`checkpoint`: rows placed since are placed again when written again."""
        ...


class Stateless:
    """What an assigner without an index does: rows stay as given, messages as prepared."""

    def relocate(self, data: pa.Table, kinds: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        return data, kinds

    def prepare(self, messages: Sequence[CommitMessage]) -> list[CommitMessage]:
        return list(messages)

    def landed(self, snapshot: Snapshot) -> None:
        pass  # nothing kept

    def forget(self) -> None:
        pass  # nothing kept

    def checkpoint(self) -> object:
        # A placed key stays placed: rows written again go where the first attempt put them.
        return None

    def restore(self, checkpoint: object) -> None:
        pass


def with_index(messages: Sequence[CommitMessage], updates: Mapping[tuple[bytes, int], IndexUpdate],
               total_buckets: int) -> list[CommitMessage]:
    """The messages with their bucket's index update, and a message for each updated bucket
    that has none (its rows all went in an earlier, failed commit's messages)."""
    out = [m if (u := updates.get((m.partition, m.bucket))) is None else
           dataclasses.replace(m, hash_index=u.file, hash_base=u.base) for m in messages]
    have = {(m.partition, m.bucket) for m in messages}
    out += [CommitMessage(p, b, total_buckets, hash_index=u.file, hash_base=u.base)
            for (p, b), u in updates.items() if (p, b) not in have]
    return out
