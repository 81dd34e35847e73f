"""File access through fsspec, with an atomic create-if-absent for commits."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, BinaryIO

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs
from fsspec.config import apply_config
from fsspec.implementations.local import LocalFileSystem

from changelake.errors import (
    ChangelakeError,
    CommitOutcomeUnknownError,
    MissingExtraError,
    StorageConfigError,
    StorageError,
    UnsafeStorageError,
)
from changelake.table.io import killpoints
from changelake.table.io.atomic import MEMORY_LOCK, AtomicCreate, CommitLock, atomic_create_of, table_root_of
from changelake.table.io.killpoints import KillPoint

# Data files are written through a buffer of this size: Parquet writes a file in many small
# pieces (page headers, pages, the footer), each a system call unbuffered, and a level-0 flush
# writes a small file per bucket.
OUTPUT_BUFFER_BYTES = 1024 * 1024
# A create-if-absent whose put failed (after the client's own retries) may have landed anyway,
# its answer lost: it is tried again this many times in all, and an object found holding our
# bytes is ours. Waits between tries double from the first.
CREATE_ATTEMPTS = 5
CREATE_RETRY_WAIT_S = 0.1

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def reported(action: str, path: str) -> Iterator[None]:
    """Raise a failure of the store (botocore's, aiohttp's, an OSError) as StorageError naming
    ``path``. FileNotFoundError and FileExistsError pass unchanged: callers act on them."""
    try:
        yield
    except (FileNotFoundError, FileExistsError, ChangelakeError):
        raise
    except Exception as exc:
        raise StorageError(f"{action} failed: {type(exc).__name__}: {exc}", file=path) from exc


class _ReportedFile:
    """An fsspec file whose every call raises store failures as StorageError naming its path
    (pyarrow re-raises a Python file's exceptions as they are)."""

    def __init__(self, raw: Any, path: str, action: str) -> None:
        self._raw = raw
        self._path = path
        self._action = action

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._raw, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            with reported(self._action, self._path):
                return value(*args, **kwargs)
        return call


class _ReportingHandler(pafs.FSSpecHandler):  # type: ignore[misc]  # pyarrow ships no type hints
    """fsspec under pyarrow (data files), with store failures raised as StorageError naming
    the file. A file is opened for reading directly, not after ``isfile``: fsspec's ``isfile``
    answers False for any error, which would make a transient failure look like a missing file."""

    def open_input_file(self, path: str) -> pa.PythonFile:
        with reported("read", path):
            raw = self.fs.open(path, mode="rb")
        return pa.PythonFile(_ReportedFile(raw, path, "read"), mode="r")

    def open_output_stream(self, path: str, metadata: dict[str, str] | None) -> pa.PythonFile:
        with reported("write", path):
            raw = self.fs.open(path, mode="wb")
        return pa.PythonFile(_ReportedFile(raw, path, "write"), mode="w")


def _filesystem_of(url: str, storage_options: Mapping[str, Any] | None) -> tuple[fsspec.AbstractFileSystem, str]:
    """fsspec's filesystem of ``url`` and the path in it, its errors about the URL and the
    options raised as changelake's naming them (option names only: values may be secrets)."""
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise StorageConfigError(f"{url}: storage_options must be a dict of fsspec options, "
                                 f"got {type(storage_options).__name__}")
    given = f" (storage options {sorted(map(str, storage_options))})" if storage_options else ""
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as exc:
        extra = " (pip install 'changelake[s3]')" if fsspec.core.split_protocol(url)[0] in ("s3", "s3a") else ""
        raise MissingExtraError(f"{url}: {exc}{extra}") from exc
    except (ValueError, TypeError) as exc:
        raise StorageConfigError(f"{url}{given}: {exc}") from exc
    return fs, path


def _copy_prefix(source: tuple[str, int], out: BinaryIO) -> bool:
    """Copy the first ``n`` bytes of the local file ``source = (path, n)`` to the start of the
    empty file ``out``, in the kernel; False (``out`` left empty) when the platform, the
    filesystem or the source (gone, or shorter) does not allow it."""
    path, n = source
    if not hasattr(os, "copy_file_range"):
        return False
    try:
        with open(path, "rb") as src:
            done = 0
            while done < n:
                step = os.copy_file_range(src.fileno(), out.fileno(), n - done)
                if step == 0:
                    break
                done += step
    except OSError:
        done = -1
    if done == n:
        out.seek(n)
        return True
    out.seek(0)
    out.truncate()
    return False


@dataclass(frozen=True)
class FileIO:
    """A filesystem (any fsspec URL) plus the operations the table needs.

    Pickles as its URL protocol, storage options and commit lock, so Spark tasks get it by
    value (the storage options and the lock must pickle).
    """

    protocol: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    lock: CommitLock | None = None

    @staticmethod
    def for_url(url: str, storage_options: Mapping[str, Any] | None = None, *,
                lock: CommitLock | None = None) -> tuple[FileIO, str]:
        """The FileIO of a URL (or local path) and the path inside that filesystem.

        fsspec's own configuration for the protocol (``fsspec.config.conf``, filled from its
        config files and ``FSSPEC_*`` variables) joins the options, explicit ones winning: a
        process that unpickles the FileIO (a Spark executor) opens the same store.

        StorageConfigError for an unknown protocol or storage options the filesystem refuses,
        MissingExtraError when the filesystem's package is not installed, each naming the URL."""
        fs, path = _filesystem_of(url, storage_options)
        options: dict[str, Any] = apply_config(type(fs), dict(storage_options or {}))
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        if isinstance(fs, LocalFileSystem):
            path = os.path.abspath(path)
        return FileIO(protocol, options, lock), path.rstrip("/")

    @cached_property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self.protocol in LocalFileSystem.protocol:
            return fsspec.filesystem(self.protocol, **self.storage_options)
        # Another process's commit must show at once: a cached listing would hide a new
        # snapshot (s3fs answers exists() from its listing cache), so list afresh each time.
        defaults: dict[str, Any] = {"use_listings_cache": False}
        if self.protocol in ("s3", "s3a"):
            # s3fs 2026 reads a whole file (read_bytes: metadata, all small) with a HEAD for its
            # size first, to split big files across ranged GETs: one GET each instead halves
            # the requests that can fail. Data files are read through open(), which it leaves.
            defaults["max_concurrency"] = 1
        return fsspec.filesystem(self.protocol, **{**defaults, **self.storage_options})

    @cached_property
    def atomic_create(self) -> AtomicCreate:
        """How this filesystem creates a file only if it is absent."""
        return atomic_create_of(self.fs)

    @cached_property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    @cached_property
    def arrow_fs(self) -> pafs.FileSystem:
        """The same filesystem for pyarrow readers and writers (native when local)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(_ReportingHandler(self.fs))

    def __getstate__(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "storage_options": self.storage_options, "lock": self.lock}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "protocol", state["protocol"])
        object.__setattr__(self, "storage_options", state["storage_options"])
        object.__setattr__(self, "lock", state["lock"])

    def url(self, path: str) -> str:
        """``path`` as a URL naming its filesystem (local paths stay paths)."""
        return path if self.is_local else str(self.fs.unstrip_protocol(path))

    def read_bytes(self, path: str) -> bytes:
        with reported("read", path):
            if self.is_local:  # fsspec's path handling costs more than reading a small file
                with open(path, "rb") as source:
                    return source.read()
            data: bytes = self.fs.cat_file(path)
        return data

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_bytes(self, path: str, data: bytes | memoryview, *, kill_point: KillPoint | None = None,
                    copied_from: tuple[str, int] | None = None) -> None:
        """Write a file whose name is unique (data, manifest): overwrite semantics suffice.
        A crash test can kill the process at ``kill_point`` when half of the bytes are written.
        ``copied_from`` (a file and a length) says that the first bytes of ``data`` are those of
        that file: on a local filesystem the kernel copies them from it (cheaper than writing
        them from memory), falling back to writing them when it cannot."""
        if self.is_local:
            with reported("write", path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as out:
                    rest = memoryview(data)
                    if copied_from is not None and _copy_prefix(copied_from, out):
                        rest = rest[copied_from[1]:]
                    if kill_point is not None:
                        half = len(rest) // 2
                        out.write(rest[:half])
                        out.flush()
                        killpoints.reached(kill_point)
                        rest = rest[half:]
                    out.write(rest)
        else:
            if kill_point is not None:
                killpoints.reached(kill_point)
            self._put(path, bytes(data))

    def open_output(self, path: str) -> pa.NativeFile:
        """A stream that writes the file ``path`` (its directory made as needed), for files
        whose name is unique and that become visible only through a commit (data files): they
        are written in place, with no temporary name."""
        with reported("write", path):
            try:
                raw = self.arrow_fs.open_output_stream(path, compression=None, buffer_size=0)
            except FileNotFoundError:  # a filesystem with directories, and the parent is missing
                self.fs.makedirs(self.fs._parent(path), exist_ok=True)
                raw = self.arrow_fs.open_output_stream(path, compression=None, buffer_size=0)
        # The buffer from the system allocator, which keeps it for the next file: Arrow's default
        # pool (mimalloc) hands freed pages back to the kernel, which zeroes them again on reuse.
        return pa.BufferedOutputStream(raw, OUTPUT_BUFFER_BYTES, memory_pool=pa.system_memory_pool())

    def overwrite_hint(self, path: str, text: str) -> None:
        """Replace a small hint file (LATEST, EARLIEST) so readers never see it half-written."""
        if self.is_local:
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with reported("write", path):
                try:
                    with open(tmp, "w", encoding="utf-8") as out:
                        out.write(text)
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
        else:
            self._put(path, text.encode("utf-8"))

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically create ``path`` with ``data``; False if it already exists.

        Local: a temp file hard-linked to the final name (link fails if the name exists), so
        no reader sees a partial file. S3: one conditional put (``If-None-Match: *``). In
        memory: check and put under a process-wide mutex. With a commit lock configured, all
        of this runs while the table's lock is held, and a store with none of these checks
        and puts under the lock; without one, such a store refuses (UnsafeStorageError): it
        never overwrites silently.

        On a store, a put that fails may have landed with its answer lost: it is tried again
        (``CREATE_ATTEMPTS`` in all), and an object found holding exactly ``data`` is this
        put's own. When every try fails, CommitOutcomeUnknownError: whether the file was
        created is unknown.
        """
        if self.lock is not None:
            with self.lock(table_root_of(path)):
                return self._create_if_absent(path, data, locked=True)
        return self._create_if_absent(path, data, locked=False)

    def _create_if_absent(self, path: str, data: bytes, *, locked: bool) -> bool:
        match self.atomic_create:
            case AtomicCreate.LINK:
                with reported("create", path):
                    return self._link_new(path, data)
            case AtomicCreate.CONDITIONAL_PUT:
                return self._resolved(path, lambda retried: self._conditional_put(path, data))
            case AtomicCreate.PROCESS_LOCK:
                with MEMORY_LOCK:
                    return self._resolved(path, lambda retried: self._put_if_absent(path, data, retried=retried))
            case AtomicCreate.NONE:
                if not locked:
                    raise UnsafeStorageError(
                        f"{self.protocol}:// cannot create a file only if it is absent (no conditional "
                        "writes), so concurrent commits could overwrite each other: configure a commit "
                        "lock (Catalog(..., lock=...) or open_table(..., lock=...); see docs/storage.md)",
                        file=path)
                return self._resolved(path, lambda retried: self._put_if_absent(path, data, retried=retried))

    @staticmethod
    def _resolved(path: str, create: Callable[[bool], bool]) -> bool:
        """``create(retried)``, tried again while it fails (``retried``: an earlier try failed,
        and may have landed)."""
        for attempt in range(CREATE_ATTEMPTS):
            if attempt:
                time.sleep(CREATE_RETRY_WAIT_S * (1 << (attempt - 1)) * random.uniform(0.5, 1.0))
            try:
                return create(attempt > 0)
            except StorageError as exc:
                failure = exc
        raise CommitOutcomeUnknownError(
            f"creating the file failed {CREATE_ATTEMPTS} times ({failure.message}); whether it was created "
            "is unknown", file=path) from failure

    def _conditional_put(self, path: str, data: bytes) -> bool:
        try:
            with reported("create", path):
                self.fs.pipe_file(path, data, mode="create")
        except FileExistsError:  # s3fs's translation of 412 Precondition Failed
            # A put whose answer was lost and that was retried (by the client, unseen, or by
            # us) finds its own object: ours only if it holds our bytes.
            return self._holds(path, data)
        return True

    def _holds(self, path: str, data: bytes) -> bool:
        """Whether ``path`` holds exactly ``data`` (False when it is gone again)."""
        try:
            return self.read_bytes(path) == data
        except FileNotFoundError:
            return False

    def _link_new(self, path: str, data: bytes) -> bool:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{uuid.uuid4().hex}.tmp"
        # No fsync (Paimon's LocalFileIO has none either): a killed process loses nothing the
        # kernel has, and after a power loss a synced snapshot would not help, since the
        # manifests and data files it names are not synced.
        with open(tmp, "wb") as out:
            out.write(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def _put_if_absent(self, path: str, data: bytes, *, retried: bool) -> bool:
        """Check, then put: atomic only while the caller excludes every other creator. After a
        failed try, an object found holding exactly ``data`` is that try's."""
        if self.exists(path):
            return retried and self._holds(path, data)
        self._put(path, data)
        return True

    def _put(self, path: str, data: bytes) -> None:
        """One put of the whole file; object stores have no directories to make, so they are
        made only when a filesystem that has them says the parent is missing."""
        with reported("write", path):
            try:
                self.fs.pipe_file(path, data)
            except FileNotFoundError:
                self.fs.makedirs(self.fs._parent(path), exist_ok=True)
                self.fs.pipe_file(path, data)

    def exists(self, path: str) -> bool:
        if self.is_local:
            return os.path.exists(path)
        with reported("existence check", path):
            return bool(self.fs.exists(path))

    def list_names(self, directory: str) -> list[str]:
        """Base names of the entries of a directory ([] when it does not exist)."""
        if self.is_local:
            try:
                return os.listdir(directory)
            except FileNotFoundError:
                return []
        return [str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in self.list_entries(directory)]

    def list_entries(self, directory: str) -> list[dict[str, Any]]:
        """fsspec's details of the entries of a directory ([] when it does not exist)."""
        try:
            with reported("listing", directory):
                entries: list[dict[str, Any]] = self.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return []
        return entries

    def modified_ms(self, path: str) -> float:
        """When the file was last modified, in epoch milliseconds (FileNotFoundError if absent)."""
        if self.is_local:
            return os.stat(path).st_mtime * 1000
        with reported("stat", path):
            return float(self.fs.modified(path).timestamp() * 1000)

    def delete(self, path: str) -> None:
        """Remove a file if it exists."""
        with contextlib.suppress(FileNotFoundError), reported("delete", path):
            self.fs.rm_file(path)

    def discard(self, paths: Iterable[str]) -> None:
        """Delete files nothing needs (a void commit's, an abandoned write's). A delete that
        fails leaves an orphan for ``remove_orphan_files``: it is logged, not raised, so that
        it never hides what the caller reports (a commit that landed, or the first failure)."""
        for path in paths:
            try:
                self.delete(path)
            except StorageError as exc:
                _log.warning("left an orphan behind: %s", exc)

    def makedirs(self, path: str) -> None:
        with reported("mkdir", path):
            self.fs.makedirs(path, exist_ok=True)

    def create_directory(self, path: str) -> None:
        """A directory that exists while empty: on object stores, which have only keys, an
        empty ``path/`` object marks it (as Hadoop's S3A writes one for Paimon's catalog)."""
        if self.is_local:
            self.makedirs(path)
            return
        with reported("mkdir", path):
            self.fs.pipe_file(f"{path.rstrip('/')}/", b"")

    def delete_tree(self, path: str) -> None:
        """Remove a directory and everything below it, if it exists."""
        with contextlib.suppress(FileNotFoundError), reported("delete", path):
            self.fs.rm(path, recursive=True)

    def rename(self, source: str, target: str) -> None:
        """Move a file or a directory (an atomic rename on a local filesystem; a copy then a
        delete on object stores)."""
        with reported("rename", source):
            if self.is_local:
                os.rename(source, target)
                return
            # Key by key: fsspec's recursive mv trips over the prefixes it takes for directories.
            files = [str(f) for f in self.fs.find(source)]
            root = self.fs._strip_protocol(source).rstrip("/")
            self.fs.copy(files, [f"{target.rstrip('/')}{f[len(root):]}" for f in files])
            self.fs.rm(source, recursive=True)
