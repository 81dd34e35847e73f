"""The pypaimon process: run by the python of pypaimon's own virtualenv (``.venv-oracle``, see
pypaimon_oracle.py) as ``python pypaimon_worker.py SOCKET``, it serves calls of the functions of
pypaimon_side.py on a Unix socket, each connection in a thread of its own, until its standard
input closes (its parent is gone). It prints ``ready`` once it listens.

The wire, which pypaimon_oracle.py shares: a request is ``(function name, args, kwargs)``, a
reply ``("ok", value)`` or ``("error", "<type>: <message>", traceback text)``, each one pickle
(both sides run the same Python, so builtins, datetime and Decimal values cross as they are).
pyarrow Tables, RecordBatches and Schemas inside them cross as Arrow IPC bytes, rebuilt by the
receiver's own pyarrow: the two sides run different pyarrow versions, whose pickles of pyarrow
objects are no contract. The socket sits in a directory only its user can enter.
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from types import ModuleType
from typing import Any

import pyarrow as pa

# Imported by name in main(), so that the client can import this module (for the wire) without pypaimon.
SIDE_MODULE = "pypaimon_side"
READY = "ready"


def table_from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


def batch_from_ipc(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(data).read_next_batch()


def schema_from_ipc(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def _ipc(schema: pa.Schema, batches: list[pa.RecordBatch]) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as stream:
        for batch in batches:
            stream.write_batch(batch)
    return sink.getvalue().to_pybytes()


class _Pickler(pickle.Pickler):
    """A pickler that writes pyarrow Tables, RecordBatches and Schemas as Arrow IPC bytes."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, pa.Table):
            return table_from_ipc, (_ipc(obj.schema, obj.to_batches()),)
        if isinstance(obj, pa.RecordBatch):
            return batch_from_ipc, (_ipc(obj.schema, [obj]),)
        if isinstance(obj, pa.Schema):
            return schema_from_ipc, (obj.serialize().to_pybytes(),)
        return NotImplemented


def dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer).dump(value)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    return pickle.loads(data)


def _call(side: ModuleType, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    function: Callable[..., Any] | None = getattr(side, name, None)
    if name.startswith("_") or not callable(function):
        raise AttributeError(f"{SIDE_MODULE} has no function {name!r}: add it there")
    return function(*args, **kwargs)


def serve(connection: Connection, side: ModuleType) -> None:
    """Answer the calls of one connection until it closes."""
    with connection:
        while True:
            try:
                name, args, kwargs = loads(connection.recv_bytes())
            except EOFError:
                return
            try:
                # pickled here, so that a value that cannot cross is reported as this call's error
                reply = dumps(("ok", _call(side, name, args, kwargs)))
            except Exception as exc:
                reply = dumps(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            connection.send_bytes(reply)


def _exit_with_parent() -> None:
    sys.stdin.read()  # the parent holds the other end of this pipe: EOF when it closes it or dies
    os._exit(0)


def main(argv: list[str]) -> int:
    side = importlib.import_module(SIDE_MODULE)
    listener = Listener(argv[1], family="AF_UNIX")
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    print(READY, flush=True)
    while True:
        connection = listener.accept()
        threading.Thread(target=serve, args=(connection, side), daemon=True).start()


if __name__ == "__main__":
    import pypaimon_worker as _module  # table_from_ipc & co. must pickle as pypaimon_worker.*, not __main__.*

    sys.exit(_module.main(sys.argv))
