"""Spark crash test: a streaming query writing a change feed into a ``changelog-producer=lookup``
table is crashed for real, at kill points on its driver and in its executors' python workers,
and restarted from its checkpoint; after every run the table must show each micro-batch exactly
once.

The feed is a directory of JSON-lines files of change events (inserts of new keys, updates and
deletes of earlier ones; each key at most once a file, values unique to the file), each file
with a later modification time than the one before. The query (spark_pipeline.py, a child
process with its own local[2] Spark) reads one file per micro-batch, so batch i is file i, and
writes them through ``changelake.streaming.write_stream`` with an ``availableNow`` trigger. Each
run first adds new files, then starts the query with ``CHANGELAKE_KILL_POINT`` set: a point on
the driver SIGKILLs it (``sink-written``: the executors wrote the batch's files, nothing
committed; ``sink-committed``: the commit landed, Spark's commit log not yet written; points
inside the landing), a point in a python worker kills the worker, which fails the task, the job
and so the query. Whatever the child left running is then killed too. The next run carries the
next kill; a last run without one must complete.

After every run a fresh read of the table and the checkpoint must find:

* the table opens and reads;
* every APPEND snapshot is the query's (its id, from the checkpoint, is the commit user), with
  the batch ids as commit identifiers running 0, 1, 2, ...: no batch landed twice, none is lost
  before the newest landed one;
* every batch Spark's commit log marks done landed, and every batch read exactly its own file
  (the file source's log), so the landed batches are exactly files 0..k;
* the table is the fold of the events of files 0..k;
* the changelog from snapshot 0 (``table.changes(0, latest)``), folded strictly (no insert of a
  present key, no retraction of an absent one or of other values), equals the table as of the
  newest snapshot without level-0 files: nothing emitted twice, nothing lost. A lookup table's
  commit moves level 0 up with its changelog in a COMPACT snapshot, so only a kill between a
  batch's APPEND and COMPACT leaves the latest snapshot (an APPEND) with level 0; the replay of
  that batch moves it up.

After a run that completed, every file written so far has landed and level 0 is empty.

Run as a script for a longer random sequence: ``./dev crashtest --spark --kills 20``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

import changelake as cl
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import live_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: on the path under pytest, not as a script
from spark_support import child_env, end_session

PIPELINE = str(Path(__file__).with_name("spark_pipeline.py"))
EVENT_SCHEMA = "rowkind string, p string, k long, v long"
SCHEMA = pa.schema([
    pa.field("p", pa.string(), nullable=False),
    pa.field("k", pa.int64(), nullable=False),
    pa.field("v", pa.int64()),
])
OPTIONS = {"bucket": "2", "changelog-producer": "lookup"}
PARTITIONS = ("x", "y")
INSERTS, UPDATES, DELETES = 24, 8, 4  # events of each kind per file
MTIME = 1_700_000_000  # file i is modified at MTIME + i seconds

# The kill points a run reaches, and how many times each typically is with two new files a run
# (driver points once or more per batch; worker points counted in each python worker).
REACH = {
    KillPoint.SINK_WRITTEN: 2,
    KillPoint.SINK_COMMITTED: 2,
    KillPoint.BEFORE_COMPACT_SNAPSHOT: 2,
    KillPoint.SNAPSHOT_BEFORE_LATEST: 4,
    KillPoint.MANIFEST: 4,
    KillPoint.DATA_FILE: 3,
    KillPoint.COMPACTION: 2,
    KillPoint.CHANGELOG_FILE: 2,
    KillPoint.SPARK_COMPACTED: 1,
    KillPoint.SPARK_RESCALED: 1,
    KillPoint.RESCALE: 2,
    KillPoint.ORPHAN_FILE: 1,
}
# What Spark reports when a python worker died (here: killed at a point in a task).
WORKER_CRASH = "Python worker exited unexpectedly (crashed)"

Key = tuple[str, int]
Event = dict[str, Any]

# How a run ended.
KILLED = "killed"  # SIGKILL at the kill point on the driver
TASK_FAILED = "task failed"  # a python worker was killed at the kill point: the query failed
COMPLETED = "completed"  # no kill point set: every file was written
UNREACHED = "unreached"  # the kill point was not reached: every file was written


@dataclass(frozen=True)
class Layout:
    """Where one pipeline keeps its input, checkpoint, table and the children's logs."""

    root: Path

    @property
    def input(self) -> Path:
        return self.root / "input"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def table(self) -> str:
        return str(self.root / "warehouse" / "db.db" / "t")

    def create(self, options: Mapping[str, str]) -> None:
        self.input.mkdir(parents=True)
        self.logs.mkdir()
        cl.Catalog(str(self.root / "warehouse")).create_table(
            "db.t", schema=SCHEMA, primary_keys=["p", "k"], partition_keys=["p"], options=dict(options))


def file_name(index: int) -> str:
    return f"events-{index:05d}.json"


class Feed:
    """The change events, file by file: a pure function of the seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.files: list[list[Event]] = []
        self.live: list[Key] = []
        self.next_key = 0

    def add(self, directory: Path) -> None:
        """Write the next file: inserts of new keys, updates and deletes of live ones."""
        index = len(self.files)
        rng = self.rng
        touched = rng.sample(self.live, min(len(self.live), UPDATES + DELETES))
        updates, deletes = touched[:UPDATES], touched[UPDATES:]
        events: list[Event] = []
        for p, k in updates:
            events.append({"rowkind": "+U", "p": p, "k": k, "v": index * 1000 + len(events)})
        for p, k in deletes:
            events.append({"rowkind": "-D", "p": p, "k": k, "v": None})
            self.live.remove((p, k))
        for _ in range(INSERTS):
            key = (rng.choice(PARTITIONS), self.next_key)
            self.next_key += 1
            events.append({"rowkind": "+I", "p": key[0], "k": key[1], "v": index * 1000 + len(events)})
            self.live.append(key)
        self.files.append(events)
        path = directory / file_name(index)
        path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
        os.utime(path, (MTIME + index, MTIME + index))  # the file source reads in modification order


def fold(events: Iterable[Event]) -> dict[Key, int]:
    """The table the events make."""
    rows: dict[Key, int] = {}
    for e in events:
        key = (e["p"], e["k"])
        if e["rowkind"] == "-D":
            rows.pop(key, None)
        else:
            rows[key] = e["v"]
    return rows


def fold_changelog(changes: pa.Table, errors: list[str]) -> dict[Key, int]:
    """The table a changelog makes, folded strictly: an insert of a present key, or a retraction
    of an absent key or of other values than the table had, is an error (a change emitted twice,
    or one lost before it)."""
    rows: dict[Key, int] = {}
    wrong: list[str] = []
    for change in changes.to_pylist():
        key, kind, value = (change["p"], change["k"]), change["rowkind"], change["v"]
        if kind in ("+I", "+U"):
            if key in rows:
                wrong.append(f"{kind} {key} while present")
            rows[key] = value
        elif key not in rows or rows.pop(key) != value:
            wrong.append(f"{kind} {key}={value} of another value or an absent key")
    if wrong:
        errors.append(f"the changelog has {len(wrong)} changes that do not follow: {wrong[:3]}")
    return rows


def describe(want: dict[Key, int], got: dict[Key, int]) -> str:
    missing, extra = want.keys() - got.keys(), got.keys() - want.keys()
    wrong = [k for k in want.keys() & got.keys() if want[k] != got[k]]
    return f"{len(missing)} keys missing, {len(extra)} extra, {len(wrong)} with other values"


# -- the checks -------------------------------------------------------------------------------


@dataclass
class Check:
    """What a fresh read of the table and the checkpoint found."""

    errors: list[str] = field(default_factory=list)
    landed: list[int] = field(default_factory=list)  # the batch ids that landed
    settled: bool = True  # no level-0 files in the latest snapshot: every landed change was emitted
    changelog_rows: int = 0


def query_id(checkpoint: Path) -> str | None:
    """The streaming query's id (the commit user), once the query has started."""
    try:
        return str(json.loads((checkpoint / "metadata").read_text())["id"])
    except FileNotFoundError:
        return None


def spark_batches(log: Path) -> list[int]:
    """The batch ids of one of Spark's checkpoint logs (``offsets``, ``commits``)."""
    return sorted(int(p.name) for p in log.glob("*") if p.name.isdigit()) if log.is_dir() else []


def batch_files(checkpoint: Path) -> dict[int, list[str]]:
    """The files each batch read, from the file source's log (``N``, or ``N.compact`` holding
    every batch up to N)."""
    read: dict[int, set[str]] = {}
    directory = checkpoint / "sources" / "0"
    for path in directory.glob("*") if directory.is_dir() else []:
        if not path.name.split(".")[0].isdigit():
            continue
        version, *entries = path.read_text().splitlines()
        assert version == "v1", f"{path}: unknown file source log version {version}"
        for entry in map(json.loads, entries):
            read.setdefault(entry["batchId"], set()).add(os.path.basename(entry["path"]))
    return {batch: sorted(names) for batch, names in read.items()}


def has_level0(table: cl.Table, snapshot: cl.Snapshot) -> bool:
    return any(e.file.level == 0 for e in live_files.live_entries(table.context, snapshot))


def read_rows(table: cl.Table, snapshot_id: int) -> dict[Key, int]:
    return {(r["p"], r["k"]): r["v"] for r in table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist()}


def verify(layout: Layout, files: Sequence[Sequence[Event]]) -> Check:
    """Check the table and the checkpoint against the events of ``files`` (see the module)."""
    check = Check()
    errors = check.errors
    try:
        table = cl.open_table(layout.table)
        snapshots = table.snapshots()
    except cl.errors.ChangelakeError as exc:
        errors.append(f"the table does not open: {exc!r}")
        return check

    user = query_id(layout.checkpoint)
    appends = [s for s in snapshots if s.commit_kind is cl.CommitKind.APPEND]
    strangers = sorted({s.commit_user for s in appends} - {user})
    if strangers:
        errors.append(f"APPEND snapshots of users other than the query {user}: {strangers}")
    ids = [s.commit_identifier for s in appends]
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    if twice:
        errors.append(f"batches {twice} landed twice")
    elif ids != list(range(len(ids))):
        errors.append(f"the batches landed are not 0, 1, 2, ...: {ids}")
    check.landed = sorted(set(ids))
    unlanded = sorted(set(spark_batches(layout.checkpoint / "commits")) - set(ids))
    if unlanded:
        errors.append(f"Spark's commit log marks batches {unlanded} done, which never landed")
    read = batch_files(layout.checkpoint)
    for batch in sorted(set(read) | set(ids)):
        if read.get(batch) != [file_name(batch)]:
            errors.append(f"batch {batch} read {read.get(batch)}, not [{file_name(batch)!r}]")
    if errors:
        return check

    latest = snapshots[-1] if snapshots else None
    if latest is None:
        return check
    try:
        got = read_rows(table, latest.id)
        want = fold(e for events in files[: len(ids)] for e in events)
        if got != want:
            errors.append(f"the table differs from the events of files 0..{len(ids) - 1}: {describe(want, got)}")
        settled = next((s for s in reversed(snapshots) if not has_level0(table, s)), None)
        check.settled = settled is latest
        # Without lookup-wait, a batch's level 0 goes up (with its changelog) in a later batch's
        # commit: level 0 is left in most snapshots, and the changelog lags the table.
        waits = table.context.options.lookup_wait
        if waits and not check.settled and latest.commit_kind is not cl.CommitKind.APPEND:
            errors.append(f"snapshot {latest.id}, a {latest.commit_kind.value}, left level-0 files")
        changes = table.changes(0, latest.id).to_arrow()
        check.changelog_rows = changes.num_rows
        folded = fold_changelog(changes, errors)
        emitted = read_rows(table, settled.id) if settled is not None else {}
        if (waits or check.settled) and folded != emitted:
            errors.append(f"the changelog folded differs from snapshot {settled.id if settled else None}: "
                          f"{describe(emitted, folded)}")
    except cl.errors.ChangelakeError as exc:
        errors.append(f"the table does not read: {exc!r}")
    return check


# -- the runs ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One start of the pipeline."""

    kill: str | None
    outcome: str
    returncode: int | None
    seconds: float
    landed: int = 0  # batches landed after it
    settled: bool = True


def run_pipeline(layout: Layout, kill: str | None, number: int, timeout: float) -> tuple[Run, str]:
    """Start the pipeline with ``kill`` as its kill point and wait for it to end: the run, and
    what went wrong ("" when it ended as it may)."""
    log = layout.logs / f"run-{number}.log"
    command = [sys.executable, PIPELINE, "--input", str(layout.input), "--checkpoint", str(layout.checkpoint),
               "--table", layout.table, "--schema", EVENT_SCHEMA]
    env = child_env(SPARK_LOCAL_IP="127.0.0.1", **{killpoints.ENVIRONMENT_VARIABLE: kill or ""})
    started = time.monotonic()
    with log.open("wb") as output:
        child = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | None = child.wait(timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            end_session(child.pid)
            child.wait()
    seconds = time.monotonic() - started
    text = log.read_text(errors="replace")
    if returncode == 0:
        outcome = COMPLETED if kill is None else UNREACHED
    elif returncode == -signal.SIGKILL and kill is not None:
        outcome = KILLED
    elif returncode is not None and kill is not None and WORKER_CRASH in text:
        outcome = TASK_FAILED
    else:
        tail = "\n".join(text.splitlines()[-15:])
        return Run(kill, "failed", returncode, seconds), f"exit code {returncode} (log {log}):\n{tail}"
    return Run(kill, outcome, returncode, seconds), ""


@dataclass
class Result:
    runs: list[Run] = field(default_factory=list)
    files: list[list[Event]] = field(default_factory=list)  # the events of each file written
    changelog_rows: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def landed(self) -> int:
        return self.runs[-1].landed if self.runs else 0

    def summary(self, seconds: float) -> str:
        outcomes = Counter(r.outcome for r in self.runs)
        points = Counter((r.kill or "").split(":")[0] for r in self.runs if r.outcome in (KILLED, TASK_FAILED))
        return "\n".join([
            f"runs: {len(self.runs)} ({', '.join(f'{o} {n}' for o, n in sorted(outcomes.items()))})",
            f"crashes survived by point: {', '.join(f'{p} {n}' for p, n in sorted(points.items())) or 'none'}",
            f"batches landed: {self.landed} of {len(self.files)} files; changelog rows checked: {self.changelog_rows}",
            f"failures: {len(self.failures)}",
            *(f"  {f}" for f in self.failures),
            f"wall time: {seconds:.1f} s",
        ])


def crashtest(root: Path, kills: Sequence[str], *, seed: int = 0, files_per_run: int = 2, timeout: float = 300.0,
              verbose: bool = False, options: Mapping[str, str] = OPTIONS) -> Result:
    """Run the pipeline once per kill in ``kills`` (``point`` or ``point:N``), then once
    without, into a table with ``options``; each run first adds ``files_per_run`` files. Stops
    at the first failure. (Without ``lookup-wait`` a completed run may leave level 0.)"""
    layout = Layout(root)
    layout.create(options)
    waits = options.get("lookup-wait", "true") == "true"
    feed = Feed(seed)
    result = Result(files=feed.files)
    for number, kill in enumerate([*kills, None]):
        for _ in range(files_per_run):
            feed.add(layout.input)
        run, problem = run_pipeline(layout, kill, number, timeout)
        result.runs.append(run)
        where = f"run {number} (kill {kill})"
        if problem:
            result.failures.append(f"{where}: {problem}")
            return result
        check = verify(layout, feed.files)
        run.landed, run.settled = len(check.landed), check.settled
        result.changelog_rows = check.changelog_rows
        if verbose:
            print(f"{where}: {run.outcome} after {run.seconds:.1f} s, {run.landed} of {len(feed.files)} batches landed"
                  f"{'' if run.settled else ', level 0 left'}", flush=True)
        if check.errors:
            result.failures.append(f"{where}, {run.outcome}: " + "; ".join(check.errors[:5]))
            return result
        if run.outcome in (COMPLETED, UNREACHED) and (run.landed != len(feed.files) or (waits and not run.settled)):
            result.failures.append(f"{where} completed with {run.landed} of {len(feed.files)} batches landed"
                                   f"{'' if run.settled else ' and level 0 left'}")
            return result
    return result


def random_kills(rng: random.Random, count: int) -> list[str]:
    """``count`` kills at points drawn from REACH, each the 1st..N-th time it is reached."""
    points = list(REACH)
    return [f"{point}:{rng.randint(1, REACH[point])}" for point in (rng.choice(points) for _ in range(count))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--files-per-run", type=int, default=2, help="event files added before each run")
    parser.add_argument("--root", default=None, help="a new directory for it all (default: temporary)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a table option on top of the default ones (repeatable), e.g. lookup-wait=false")
    args = parser.parse_args(argv)
    options = OPTIONS | dict(o.split("=", 1) for o in args.option)
    kills = random_kills(random.Random(args.seed), args.kills)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="changelake-spark-crashtest-") as scratch:
        root = Path(args.root or scratch)
        print(f"spark crashtest: {args.kills} kills, seed {args.seed}, in {root}", flush=True)
        result = crashtest(root, kills, seed=args.seed, files_per_run=args.files_per_run, verbose=True,
                           options=options)
        print(result.summary(time.monotonic() - started))
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
