"""The one thread pool the engine runs parallel work on (split reads, level-0 flushes,
compactions, table compaction).

Arrow and Parquet release the GIL, so threads overlap decoding, encoding and I/O. The pool is
sized from the core count (at least 4, since part of the work waits on storage) and made anew
in a forked child, which inherits the parent's pool object but none of its threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

WORKERS = max(4, os.cpu_count() or 1)

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pid = 0


def executor() -> ThreadPoolExecutor:
    """The shared pool (created on first use, and again after a fork)."""
    global _pool, _pid
    with _lock:
        if _pool is None or _pid != os.getpid():
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="changelake")
            _pid = os.getpid()
        return _pool


def map_all(fn: Callable[[_T], _R], items: Iterable[_T], *,
            progress: Callable[[int, int], None] | None = None) -> list[_R]:
    """``fn`` over ``items`` on the pool, results in order; one item runs on the caller's thread.
    ``progress`` is called on the caller's thread with (done, total) as results come in."""
    work = list(items)
    results = map(fn, work) if len(work) <= 1 else executor().map(fn, work)
    if progress is None:
        return list(results)
    done: list[_R] = []
    progress(0, len(work))
    for result in results:
        done.append(result)
        progress(len(done), len(work))
    return done
