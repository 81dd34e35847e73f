"""File access through fsspec, with an atomic create-if-absent for commits."""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import fsspec
import pyarrow.fs as pafs
from fsspec.implementations.local import LocalFileSystem

from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint


@dataclass(frozen=True)
class FileIO:
    """A filesystem (any fsspec URL) plus the operations the table needs.

    Pickles as its URL protocol and storage options, so Spark tasks get it by value.
    """

    protocol: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def for_url(url: str, storage_options: dict[str, Any] | None = None) -> tuple[FileIO, str]:
        """The FileIO of a URL (or local path) and the path inside that filesystem."""
        options = dict(storage_options or {})
        fs, path = fsspec.core.url_to_fs(url, **options)
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        if isinstance(fs, LocalFileSystem):
            path = os.path.abspath(path)
        return FileIO(protocol, options), path.rstrip("/")

    @cached_property
    def fs(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem(self.protocol, **self.storage_options)

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
        return {"protocol": self.protocol, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "protocol", state["protocol"])
        object.__setattr__(self, "storage_options", state["storage_options"])

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
            self.fs.pipe_file(path, data)

    def overwrite_hint(self, path: str, text: str) -> None:
        """Replace a small hint file (LATEST, EARLIEST) so readers never see it half-written."""
        if self.is_local:
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, path)
        else:
            self.fs.pipe_file(path, text.encode("utf-8"))

    def create_if_absent(self, path: str, data: bytes) -> bool:
        """Atomically create ``path`` with ``data``; False if it already exists.

        Local: write a temp file, then hard-link it to the final name (link fails if the name
        exists), so no reader ever sees a partial file. Elsewhere: exclusive-create (``xb``),
        which object stores implement as a conditional put.
        """
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        try:
            with self.fs.open(path, "xb") as out:
                out.write(data)
            return True
        except FileExistsError:
            return False

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
