"""A writer's state of one (partition, bucket): its levels, sequence numbers and work not yet
committed."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from changelake.table.format.index_manifest import IndexFileMeta
from changelake.table.format.manifest import DataFileMeta
from changelake.table.lsm import compactor as compaction
from changelake.table.lsm import deletion_vectors
from changelake.table.lsm.levels import Levels
from changelake.table.write import spill


@dataclass
class BucketState:
    """A writer's view of one (partition, bucket): its LSM levels (committed files plus this
    writer's uncommitted ones), the next sequence number, and work not yet committed."""

    partition: bytes
    bucket: int
    levels: Levels
    next_sequence: int
    spilled: list[spill.SpilledRun] = field(default_factory=list)
    new_files: list[DataFileMeta] = field(default_factory=list)
    changelog: list[DataFileMeta] = field(default_factory=list)
    compacted: compaction.CompactResult = field(default_factory=compaction.CompactResult)
    running: Future[compaction.CompactResult] | None = None
    # deletion vectors: the bucket's index files a commit's compaction replaced, and what they held
    index_added: tuple[IndexFileMeta, ...] = ()
    index_deleted: tuple[IndexFileMeta, ...] = ()
    # lookup-compact gentle: this writer's commits in a row in which universal compaction picked
    # nothing (Paimon's lookup compaction trigger count)
    idle_commits: int = 0
    # deletion vectors: the committed index files (and their vectors) that the compactions in
    # ``compacted`` started from, and those the running background compaction started from
    compacted_base: deletion_vectors.IndexBase | None = None
    running_base: deletion_vectors.IndexBase | None = None
