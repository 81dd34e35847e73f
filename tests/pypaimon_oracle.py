"""pypaimon 2.1, the interop oracle, in a process of its own.

pypaimon pins ``pyarrow<20``, ``fsspec<2026``, ``pandas<3`` and ``polars<2``, so it lives in a
virtualenv of its own, ``.venv-oracle`` (``./dev test`` creates it from
tests/oracle-requirements.txt), and the tests run on the versions users get. A worker process
(pypaimon_worker.py) run by that virtualenv's python serves the functions of pypaimon_side.py;
``Pypaimon`` is a connection to it.

In a test, take the session fixture ``pypaimon`` (tests/conftest.py; it skips, saying why, when
pypaimon's virtualenv is missing) and call side functions by name::

    def test_x(tmp_path, pypaimon):
        theirs = pypaimon.read(str(tmp_path), "db.t", {"scan.snapshot-id": "3"})  # a pyarrow Table

To add a side function, write it in pypaimon_side.py as a module-level function that takes and
returns plain Python values (builtins, datetime, Decimal, and lists, tuples and dicts of them)
or pyarrow Tables, RecordBatches and Schemas; then call ``pypaimon.<its name>(...)``. Nothing is
registered anywhere. An exception it raises comes back as ``PypaimonError`` carrying pypaimon's
message and traceback.

Other processes (the crash test's and the soak's children) connect to the same worker with
``Pypaimon(pypaimon.address)``; ``PypaimonWorker.start()`` runs a worker outside pytest.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from multiprocessing.connection import Client
from pathlib import Path
from types import TracebackType
from typing import Any

import pypaimon_worker
from pypaimon_worker import dumps, loads

PYTHON_VARIABLE = "CHANGELAKE_PYPAIMON_PYTHON"  # another python with pypaimon 2.1, instead of .venv-oracle's
VENV_PYTHON = Path(__file__).resolve().parents[1] / ".venv-oracle" / "bin" / "python"
STARTUP_SECONDS = 120.0


class PypaimonError(RuntimeError):
    """An exception raised in the pypaimon process: its type and message, then its traceback."""


def python() -> Path:
    """The python that runs the worker."""
    return Path(os.environ.get(PYTHON_VARIABLE) or VENV_PYTHON)


def missing_reason() -> str | None:
    """Why the pypaimon process cannot start, or None."""
    if not python().is_file():
        return (f"pypaimon's virtualenv is missing ({python()}): ./dev test creates it from "
                f"tests/oracle-requirements.txt (or set {PYTHON_VARIABLE} to a python with pypaimon 2.1)")
    return None


class Pypaimon:
    """A connection to the pypaimon worker at ``address``: ``pypaimon.f(*args, **kwargs)`` runs
    ``pypaimon_side.f(*args, **kwargs)`` there and returns its value. Safe across threads; a
    child process opens a connection of its own."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._connection = Client(address, family="AF_UNIX")
        self._lock = threading.Lock()

    def call(self, function: str, /, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._connection.send_bytes(dumps((function, args, kwargs)))
            reply = loads(self._connection.recv_bytes())
        if reply[0] == "error":
            _, message, trace = reply
            raise PypaimonError(f"{function}: {message}\n\npypaimon's traceback:\n{trace}")
        return reply[1]

    def __getattr__(self, function: str) -> Callable[..., Any]:
        if function.startswith("_"):  # copy, pickle and friends probe for dunders
            raise AttributeError(function)
        return functools.partial(self.call, function)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Pypaimon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PypaimonWorker:
    """A running pypaimon worker process; it ends when ``close()`` closes its standard input
    (or when this process dies)."""

    def __init__(self, process: subprocess.Popen[str], directory: str) -> None:
        self.process = process
        self.directory = directory
        self.address = os.path.join(directory, "socket")

    @classmethod
    def start(cls) -> PypaimonWorker:
        reason = missing_reason()
        if reason is not None:
            raise RuntimeError(reason)
        directory = tempfile.mkdtemp(prefix="pypaimon-")  # mode 0700: only this user reaches the socket
        with open(os.path.join(directory, "stderr"), "w") as log:
            process = subprocess.Popen(
                [str(python()), "-u", pypaimon_worker.__file__, os.path.join(directory, "socket")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                # PYTHONPATH points this python at changelake's sources, not pypaimon's python
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        worker = cls(process, directory)
        worker._wait_until_ready()
        return worker

    def _wait_until_ready(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(STARTUP_SECONDS)
        if lines != [pypaimon_worker.READY + "\n"]:
            stderr = Path(self.directory, "stderr").read_text()
            self.close()
            raise RuntimeError(f"the pypaimon worker ({python()}) did not start: {stderr or lines}")

    def connect(self) -> Pypaimon:
        return Pypaimon(self.address)

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PypaimonWorker:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
