"""How a filesystem creates a file only if it is absent, and the lock for stores that cannot.

A commit is the creation of ``snapshot/snapshot-N``; it is safe against concurrent writers only
if that creation fails when the file exists. Local disks do it with a hard link, S3 (s3fs 2024.12
and later) with a conditional put (``If-None-Match: *``), the in-memory filesystem under a
process-wide lock. Other stores (gcsfs and adlfs are not verified here) need a :class:`CommitLock`:
Paimon's catalog lock (``lock.enabled`` with a ``lock.type`` factory) as a Python callable.
"""

from __future__ import annotations

import enum
import inspect
import posixpath
import threading
from contextlib import AbstractContextManager
from typing import Protocol

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem


class CommitLock(Protocol):
    """A lock factory: called with a table's directory, it returns a context manager held
    while a commit checks that its file is absent and writes it. Every writer of the table
    (in every process) must use a lock that excludes the others, e.g. one backed by DynamoDB,
    ZooKeeper or a database row. Spark executors get it by pickling, so it must pickle."""

    def __call__(self, table_root: str) -> AbstractContextManager[object]: ...


class AtomicCreate(enum.Enum):
    """How a filesystem creates a file only if it is absent."""

    LINK = "link"  # local: write a temp file, hard-link it to the name (fails if taken)
    CONDITIONAL_PUT = "conditional-put"  # object store: a put that fails when the key exists
    PROCESS_LOCK = "process-lock"  # in-memory: only this process sees it, so a mutex suffices
    NONE = "none"  # nothing atomic: a commit needs a CommitLock


# The in-memory filesystem is one dict per process: one mutex makes its check-then-put atomic.
MEMORY_LOCK = threading.Lock()


def _s3fs_conditional(fs: fsspec.AbstractFileSystem) -> bool:
    """s3fs 2024.12+ takes ``pipe_file(..., mode="create")`` (a put with If-None-Match: *)."""
    if "s3" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        return False
    if not type(fs).__module__.startswith("s3fs"):
        return False
    return "mode" in inspect.signature(fs._pipe_file).parameters


def atomic_create_of(fs: fsspec.AbstractFileSystem) -> AtomicCreate:
    """What ``fs`` offers; unknown filesystems offer nothing (never assume atomicity)."""
    if isinstance(fs, LocalFileSystem):
        return AtomicCreate.LINK
    if type(fs) is MemoryFileSystem:
        return AtomicCreate.PROCESS_LOCK
    if _s3fs_conditional(fs):
        return AtomicCreate.CONDITIONAL_PUT
    return AtomicCreate.NONE


def table_root_of(path: str) -> str:
    """The table directory of a file created only if absent: every such file is
    ``<table>/<kind>/<name>`` (snapshot, schema, tag, changelog, rollback)."""
    return posixpath.dirname(posixpath.dirname(path))
