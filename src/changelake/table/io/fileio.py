"""File access through fsspec, with an atomic create-if-absent for commits."""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs
from fsspec.config import apply_config
from fsspec.implementations.local import LocalFileSystem

from changelake.errors import UnsafeStorageError
from changelake.table.io import killpoints
from changelake.table.io.atomic import MEMORY_LOCK, AtomicCreate, CommitLock, atomic_create_of, table_root_of
from changelake.table.io.killpoints import KillPoint

# Data files are written through a buffer of this size: Parquet writes a file in many small
# pieces (page headers, pages, the footer), each a system call unbuffered, and a level-0 flush
# writes a small file per bucket.
OUTPUT_BUFFER_BYTES = 1024 * 1024


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
    def for_url(url: str, storage_options: dict[str, Any] | None = None, *,
                lock: CommitLock | None = None) -> tuple[FileIO, str]:
        """The FileIO of a URL (or local path) and the path inside that filesystem.

        fsspec's own configuration for the protocol (``fsspec.config.conf``, filled from its
        config files and ``FSSPEC_*`` variables) joins the options, explicit ones winning: a
        process that unpickles the FileIO (a Spark executor) opens the same store."""
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
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
        return fsspec.filesystem(self.protocol, **{"use_listings_cache": False, **self.storage_options})

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
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

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
        data: bytes = self.fs.cat_file(path)
        return data

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_bytes(self, path: str, data: bytes, *, kill_point: KillPoint | None = None) -> None:
        """Write a file whose name is unique (data, manifest): overwrite semantics suffice.
        A crash test can kill the process at ``kill_point`` when half of the bytes are written."""
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                rest = memoryview(data)
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
            self._put(path, data)

    def open_output(self, path: str) -> pa.NativeFile:
        """A stream that writes the file ``path`` (its directory made as needed), for files
        whose name is unique and that become visible only through a commit (data files): they
        are written in place, with no temporary name."""
        try:
            return self.arrow_fs.open_output_stream(path, compression=None, buffer_size=OUTPUT_BUFFER_BYTES)
        except FileNotFoundError:  # a filesystem with directories, and the parent is missing
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)
            return self.arrow_fs.open_output_stream(path, compression=None, buffer_size=OUTPUT_BUFFER_BYTES)

    def overwrite_hint(self, path: str, text: str) -> None:
        """Replace a small hint file (LATEST, EARLIEST) so readers never see it half-written."""
        if self.is_local:
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, path)
        else:
            self._put(path, text.encode("utf-8"))

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically create ``path`` with ``data``; False if it already exists.

        Local: a temp file hard-linked to the final name (link fails if the name exists), so
        no reader sees a partial file. S3: one conditional put (``If-None-Match: *``; an
        object found holding exactly ``data`` is this put's own, retried by the client). In
        memory: check and put under a process-wide mutex. With a commit lock configured, all
        of this runs while the table's lock is held, and a store with none of these checks
        and puts under the lock; without one, such a store refuses (UnsafeStorageError): it
        never overwrites silently.
        """
        if self.lock is not None:
            with self.lock(table_root_of(path)):
                return self._create_if_absent(path, data, locked=True)
        return self._create_if_absent(path, data, locked=False)

    def _create_if_absent(self, path: str, data: bytes, *, locked: bool) -> bool:
        match self.atomic_create:
            case AtomicCreate.LINK:
                return self._link_new(path, data)
            case AtomicCreate.CONDITIONAL_PUT:
                try:
                    self.fs.pipe_file(path, data, mode="create")
                except FileExistsError:  # s3fs's translation of 412 Precondition Failed
                    # A put whose response was lost is retried by the client and then finds
                    # its own object: ours only if it holds our bytes.
                    return bool(self.fs.cat_file(path) == data)
                return True
            case AtomicCreate.PROCESS_LOCK:
                with MEMORY_LOCK:
                    return self._put_if_absent(path, data)
            case AtomicCreate.NONE:
                if not locked:
                    raise UnsafeStorageError(
                        f"{self.protocol}:// cannot create a file only if it is absent (no conditional "
                        "writes), so concurrent commits could overwrite each other: configure a commit "
                        "lock (Catalog(..., lock=...) or open_table(..., lock=...); see docs/storage.md)",
                        file=path)
                return self._put_if_absent(path, data)

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

    def _put_if_absent(self, path: str, data: bytes) -> bool:
        """Check, then put: atomic only while the caller excludes every other creator."""
        if self.fs.exists(path):
            return False
        self._put(path, data)
        return True

    def _put(self, path: str, data: bytes) -> None:
        """One put of the whole file; object stores have no directories to make, so they are
        made only when a filesystem that has them says the parent is missing."""
        try:
            self.fs.pipe_file(path, data)
        except FileNotFoundError:
            self.fs.makedirs(self.fs._parent(path), exist_ok=True)
            self.fs.pipe_file(path, data)

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def list_names(self, directory: str) -> list[str]:
        """Base names of the entries of a directory ([] when it does not exist)."""
        if self.is_local:
            try:
                return os.listdir(directory)
            except FileNotFoundError:
                return []
        try:
            entries = self.fs.ls(directory, detail=False)
        except FileNotFoundError:
            return []
        return [str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries]

    def modified_ms(self, path: str) -> float:
        """When the file was last modified, in epoch milliseconds (FileNotFoundError if absent)."""
        if self.is_local:
            return os.stat(path).st_mtime * 1000
        return float(self.fs.modified(path).timestamp() * 1000)

    def delete(self, path: str) -> None:
        """Remove a file if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)

    def makedirs(self, path: str) -> None:
        self.fs.makedirs(path, exist_ok=True)
