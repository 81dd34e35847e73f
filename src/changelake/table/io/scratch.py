"""Local scratch directories: a writer's spilled runs and a table's spilled lookup files.

They live under the system temp directory and are removed when the writer closes or the
process exits. A process that is killed leaves its directory behind, so each directory is
named by the host and process that made it, and making a new one first removes those of this
host whose process is gone: a crashed job's spills do not pile up on local disk.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

_PREFIX = "changelake-"


def make(kind: str) -> str:
    """A new scratch directory for ``kind`` (e.g. ``spill``, ``lookup``) of this process,
    after removing the ``kind`` directories left by dead processes of this host."""
    _sweep(kind)
    return tempfile.mkdtemp(prefix=f"{_PREFIX}{kind}-{os.getpid()}@{socket.gethostname()}-")


def _sweep(kind: str) -> None:
    root = tempfile.gettempdir()
    prefix = f"{_PREFIX}{kind}-"
    host = socket.gethostname()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        # <pid>@<host>-<random>: mkdtemp's random part has no "-", a host name may have some
        owner = name[len(prefix):].rsplit("-", 1)[0]
        pid, _, made_on = owner.partition("@")
        if made_on == host and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
