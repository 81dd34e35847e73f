"""Following a change stream while writer threads run, as the load tests do."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import changelake as cl


def fold_until_done(stream: cl.ChangeStream, writers: Sequence[threading.Thread]) -> dict[Any, Any]:
    """Read ``stream`` (a table of key ``k`` and value ``v``), acknowledging each pass as its
    consumer, until the writers are done and the stream has caught up; the key -> value state
    its changes fold into."""
    folded: dict[Any, Any] = {}
    while True:
        done = not any(t.is_alive() for t in writers)
        for batch in stream:
            for row in batch.data.to_pylist():
                if row["rowkind"] in ("+I", "+U"):
                    folded[row["k"]] = row["v"]
                else:
                    folded.pop(row["k"], None)
        stream.commit()
        if done:
            return folded
