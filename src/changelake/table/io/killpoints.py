"""Named points where a crash test kills the process (``tests/reliability``).

``CHANGELAKE_KILL_POINT=name`` kills the process with SIGKILL the first time the code reaches
point ``name``; ``name:N`` the N-th time. The variable is read once, on the first point reached,
so in production a point costs a cached lookup and a comparison.
"""

from __future__ import annotations

import enum
import functools
import os
import signal
import threading
from collections.abc import Callable

ENVIRONMENT_VARIABLE = "CHANGELAKE_KILL_POINT"


class KillPoint(enum.StrEnum):
    """Where the process can be killed."""

    DATA_FILE = "data-file"  # a data file's row groups are on disk, its footer not yet
    CHANGELOG_FILE = "changelog-file"  # a changelog file's row groups are on disk, its footer not yet
    SPILL_RUN = "spill-run"  # a spilled run has some of its batches on local disk
    MANIFEST = "manifest"  # half of a manifest's bytes are on disk
    MANIFEST_LIST = "manifest-list"  # half of a manifest list's bytes are on disk
    SNAPSHOT_BEFORE_LATEST = "snapshot-before-latest"  # the snapshot file exists, LATEST not yet updated
    HINT_RETRY = "hint-retry"  # a LATEST or EARLIEST hint write failed, and is about to be tried again
    INDEX_FILE = "index-file"  # half of a deletion-vector index file's bytes are on disk
    FILE_INDEX = "file-index"  # half of a data file's index file (<data file>.index) is on disk
    HASH_INDEX = "hash-index"  # half of a dynamic bucket's HASH index file's bytes are on disk
    KEY_INDEX = "key-index"  # a cross-partition key index run is on local disk, its files not yet unlinked
    COMPACTION = "compaction"  # a compaction wrote some of its output files
    BEFORE_COMPACT_SNAPSHOT = "before-compact-snapshot"  # a commit's APPEND landed, its COMPACT not yet
    RESCALE = "rescale"  # a rescale wrote some of its partitions' new files, nothing committed
    OVERWRITE = "overwrite"  # an overwrite's files and delta manifest are written, its snapshot not yet
    OVERWRITE_WRITTEN = "overwrite-written"  # an INSERT OVERWRITE wrote its new files, nothing committed
    ROW_LEVEL_REWRITTEN = "row-level-rewritten"  # an append table's delete/update rewrote its files, nothing committed
    MANIFEST_COMPACTION = "manifest-compaction"  # manifest compaction wrote some of its manifests
    ORPHAN_FILE = "orphan-file"  # orphan cleanup is about to delete its next orphan
    ROLLBACK = "rollback"  # a rollback is about to delete its next tag, snapshot, commit user record or file
    ROLLBACK_CONSUMER = "rollback-consumer"  # a rollback is about to move its next consumer back to the target
    EXPIRE_RECORDED = "expire-recorded"  # expiry recorded its commit users' last commits, no snapshot deleted yet
    EXPIRE_SNAPSHOTS = "expire-snapshots"  # expiry deleted some expired snapshot files, EARLIEST not updated
    EXPIRE_FILES = "expire-files"  # expiry deleted some files only expired snapshots referenced
    BRANCH_CREATED = "branch-created"  # a new branch's files are staged, not yet moved into place
    BRANCH_DELETE = "branch-delete"  # a branch deletion is about to delete its next snapshot or tag
    FAST_FORWARD = "fast-forward"  # a fast-forward is about to delete or copy its next metadata file
    # The Spark sink's driver (changelake.streaming.sink.commit_batch):
    SINK_WRITTEN = "sink-written"  # the executors wrote the batch's files, nothing committed
    SINK_COMMITTED = "sink-committed"  # our commit landed, Spark's commit log not yet written
    # Compaction on Spark (changelake.streaming.compact), in its driver:
    SPARK_COMPACTED = "spark-compacted"  # the executors compacted every bucket, nothing committed
    # Rescale on Spark (changelake.streaming.rescale), in its driver:
    SPARK_RESCALED = "spark-rescaled"  # the executors rewrote every partition, nothing committed


@functools.cache
def _target() -> tuple[str, int] | None:
    text = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not text:
        return None
    name, _, nth = text.partition(":")
    return name, int(nth) if nth else 1


_lock = threading.Lock()
_reached = 0


def arm(target: str | None) -> None:
    """Kill at ``target`` (``name`` or ``name:N``, as ``CHANGELAKE_KILL_POINT`` takes it) from now
    on, counting reaches anew; None disarms. The crash test arms a point for one operation."""
    global _reached
    if target:
        os.environ[ENVIRONMENT_VARIABLE] = target
    else:
        os.environ.pop(ENVIRONMENT_VARIABLE, None)
    _target.cache_clear()
    with _lock:
        _reached = 0


def reached(point: KillPoint, *, before_kill: Callable[[], object] | None = None) -> None:
    """Kill this process if ``CHANGELAKE_KILL_POINT`` names ``point`` (and this is the N-th time);
    ``before_kill`` runs first, to put on disk what the point promises is there (a buffer)."""
    target = _target()
    if target is None or target[0] != point.value:
        return
    global _reached
    with _lock:
        _reached += 1
        hit = _reached == target[1]
    if hit:
        if before_kill is not None:
            before_kill()
        os.kill(os.getpid(), signal.SIGKILL)
