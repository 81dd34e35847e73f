"""The thread pools the engine runs parallel work on: one for split reads, level-0 flushes and
table compaction, and one thread for writers' background compactions.

Arrow and Parquet release the GIL, so threads overlap decoding, encoding and I/O. The pool is
sized from the core count (at least 4, since part of the work waits on storage) and made anew
in a forked child, which inherits the parent's pool object but none of its threads.

Background compactions get their own thread, as each Paimon writer has its compaction executor:
on the shared pool they would queue ahead of the next commit's level-0 flushes and make every
commit wait for the previous commit's compactions. Compacting on one thread also bounds the CPU
compaction takes from ingest; when it falls behind, the sorted runs grow until
``num-sorted-run.stop-trigger`` makes a commit wait (Paimon's back-pressure).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")

WORKERS = max(4, os.cpu_count() or 1)

_lock = threading.Lock()
# name -> (pool, the process that made it)
_pools: dict[str, tuple[ThreadPoolExecutor, int]] = {}


def _named(name: str, workers: int) -> ThreadPoolExecutor:
    with _lock:
        made = _pools.get(name)
        if made is None or made[1] != os.getpid():
            made = (ThreadPoolExecutor(workers, thread_name_prefix=name), os.getpid())
            _pools[name] = made
        return made[0]


def executor() -> ThreadPoolExecutor:
    """The shared pool (created on first use, and again after a fork)."""
    return _named("changelake", WORKERS)


def compaction_executor() -> ThreadPoolExecutor:
    """The thread writers' background compactions run on (created on first use, and again
    after a fork)."""
    return _named("changelake-compaction", 1)


def map_all(fn: Callable[[_T], _R], items: Iterable[_T], *,
            progress: Callable[[int, int], None] | None = None) -> list[_R]:
    """``fn`` over ``items`` on the pool, results in order; one item runs on the caller's thread.
    ``progress`` is called on the caller's thread with (done, total) as results come in. When
    one call raises, the calls not started are cancelled and those running are waited for before
    the error is raised, so that a caller cleaning up after a failure sees everything written."""
    work = list(items)
    futures: list[Future[_R]] = []
    results: Iterator[_R]
    if len(work) <= 1:
        results = map(fn, work)
    else:
        futures = [executor().submit(fn, item) for item in work]
        results = (f.result() for f in futures)
    done: list[_R] = []
    if progress is not None:
        progress(0, len(work))
    try:
        for result in results:
            done.append(result)
            if progress is not None:
                progress(len(done), len(work))
    except BaseException:
        for f in futures:
            f.cancel()
        wait(futures)
        raise
    return done
