"""Multi-writer soak: four writer processes (two long-lived ``table.writer(commit_user=...)``,
two one-shot ``table.write()``) commit N times each on overlapping keys while another process
calls ``table.compact()`` in a loop (a CommitConflictError there, when a writer's compaction
removed its inputs first, is expected and counted).

Then a fresh process checks: every commit landed exactly once (each APPEND snapshot matched
to one logged commit by (commit user, identifier), or by the commit user ``table.write()``
returned), snapshot ids have no gap, every snapshot reads as the model of the commits before
it under "the commit that lands later wins" (each commit's values are unique to it), no
referenced file is missing, and pypaimon (its worker process, pypaimon_oracle.py) reads the
latest snapshot as changelake does.

Run as a script for the full figure: ``./dev soak`` (250 commits per writer).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

import workload
from workload import Diff, Log, Mode

import changelake as cl
from changelake.errors import CommitConflictError
from changelake.table.format import snapshot as snapshot_format
from pypaimon_oracle import PypaimonWorker

MODE = Mode("soak", one_shot=False, engine="deduplicate", calls=1, rows=30, keys=150)
OPTIONS = {
    **workload.BASE_OPTIONS,
    "num-sorted-run.compaction-trigger": "3",
    "target-file-size": "16 kb",
    # Five committers race for every snapshot id: retry (with backoff) as long as it takes.
    "commit.max-retries": "1000",
    "commit.max-retry-wait": "200 ms",
}
LONG_LIVED = (0, 1)
ONE_SHOT = (2, 3)


def _user(writer: int) -> str:
    return f"soak-writer-{writer}"


class _RaceCounter:
    """Counts lost commit races (a snapshot id another committer took first) in this process."""

    def __init__(self) -> None:
        self.lost = 0
        self._try_commit = snapshot_format.try_commit
        snapshot_format.try_commit = self

    def __call__(self, *args: Any) -> bool:
        landed = self._try_commit(*args)
        self.lost += not landed
        return landed


def writer_main(spec: dict[str, Any]) -> None:
    races = _RaceCounter()
    table = cl.open_table(workload.table_location(spec["warehouse"]))
    writer_id = spec["writer"]
    log = Log(spec["log"])
    long_lived = table.writer(commit_user=_user(writer_id)) if writer_id in LONG_LIVED else None
    for index in range(1, spec["commits"] + 1):
        log.append({"event": "intent", "commit": index})
        [rows] = workload.commit_rows(MODE, spec["seed"], writer_id, index)
        if long_lived is None:
            snap = table.write(workload.to_arrow(rows))
            landed, user = ([snap] if snap else []), (snap.commit_user if snap else None)
        else:
            long_lived.write(workload.to_arrow(rows))
            landed, user = long_lived.commit(index), _user(writer_id)
        log.append({"event": "result", "commit": index, "user": user, "snapshots": [s.id for s in landed]})
    if long_lived is not None:
        long_lived.close()
    log.append({"event": "done", "lost_races": races.lost})


def compactor_main(spec: dict[str, Any], stop: Event) -> None:
    races = _RaceCounter()
    table = cl.open_table(workload.table_location(spec["warehouse"]))
    counts: Counter[str] = Counter()
    while not stop.is_set():
        try:
            landed = table.compact(full=counts["calls"] % 5 == 4)
        except CommitConflictError:
            counts["conflicts"] += 1
            landed = None
        counts["calls"] += 1
        counts["compactions"] += landed is not None
        if landed is None:
            stop.wait(0.05)  # nothing to do yet: do not spin
    Log(spec["log"]).append({"event": "done", "lost_races": races.lost, **counts})


@dataclass
class SoakReport:
    errors: list[str] = field(default_factory=list)
    snapshots: int = 0
    appends: int = 0
    compacts: int = 0
    commits_landed: int = 0
    commits_lost: int = 0
    lost_races: int = 0
    compactor: dict[str, int] = field(default_factory=dict)
    diff: dict[str, int] = field(default_factory=dict)
    paimon_diff: dict[str, int] = field(default_factory=dict)
    orphans: int = 0


def verify(spec: dict[str, Any]) -> SoakReport:
    report = SoakReport()
    errors = report.errors
    table = cl.open_table(workload.table_location(spec["warehouse"]))
    snapshots = table.snapshots()
    report.snapshots = len(snapshots)
    ids = [s.id for s in snapshots]
    if ids != list(range(1, len(ids) + 1)):
        errors.append(f"snapshot ids have gaps: {ids[:20]}...")

    # Which (writer, commit) each APPEND snapshot is.
    expected: dict[tuple[str, int], tuple[int, int]] = {}  # (user, identifier) -> (writer, commit)
    logged: dict[tuple[int, int], int] = {}  # (writer, commit) -> logged APPEND snapshot id
    for writer_id in (*LONG_LIVED, *ONE_SHOT):
        records = Log(os.path.join(spec["warehouse"], f"writer-{writer_id}.jsonl")).records()
        results = {r["commit"]: r for r in records if r["event"] == "result"}
        done = [r for r in records if r["event"] == "done"]
        report.lost_races += sum(r["lost_races"] for r in done)
        if not done:
            errors.append(f"writer {writer_id} did not finish")
        for index in range(1, spec["commits"] + 1):
            result = results.get(index)
            if result is None or not result["snapshots"]:
                report.commits_lost += 1
                errors.append(f"writer {writer_id} commit {index}: no landed result logged")
                continue
            identifier = index if writer_id in LONG_LIVED else snapshot_format.BATCH_COMMIT_IDENTIFIER
            expected[(result["user"], identifier)] = (writer_id, index)
            logged[(writer_id, index)] = result["snapshots"][0]
    compactor = [r for r in Log(os.path.join(spec["warehouse"], "compactor.jsonl")).records() if r["event"] == "done"]
    if compactor:
        report.compactor = {k: v for k, v in compactor[0].items() if k != "event"}
        report.lost_races += report.compactor.get("lost_races", 0)

    model = workload.Model(MODE.engine)
    seen: dict[tuple[int, int], int] = {}
    last_of_writer: dict[int, int] = {}
    diff = Diff()
    for snap in snapshots:
        if snap.commit_kind == cl.CommitKind.APPEND:
            report.appends += 1
            commit = expected.get((snap.commit_user, snap.commit_identifier))
            if commit is None:
                errors.append(f"snapshot {snap.id} ({snap.commit_user}, {snap.commit_identifier}) matches no commit")
                continue
            if commit in seen:
                errors.append(f"commit {commit} landed twice: snapshots {seen[commit]} and {snap.id}")
                continue
            if logged[commit] != snap.id:
                errors.append(f"commit {commit} logged snapshot {logged[commit]}, landed as {snap.id}")
            if commit[1] <= last_of_writer.get(commit[0], 0):
                errors.append(f"writer {commit[0]} commit {commit[1]} landed after its commit "
                              f"{last_of_writer[commit[0]]}")
            seen[commit] = snap.id
            last_of_writer[commit[0]] = commit[1]
            [rows] = workload.commit_rows(MODE, spec["seed"], *commit)
            model.apply(rows)
        else:
            report.compacts += 1
        if spec["every_snapshot"] or snap.id == ids[-1]:
            try:
                one = Diff.of(model.view(), workload.read_rows(table, snap.id))
            except cl.errors.ChangelakeError as exc:
                errors.append(f"snapshot {snap.id} is unreadable: {exc}")
                continue
            if one.total:
                errors.append(f"snapshot {snap.id} differs from the model: {one}")
            diff.add(one)
    report.commits_landed = len(seen)
    missing = sorted(set(logged) - set(seen))
    if missing:
        errors.append(f"{len(missing)} logged commits are in no snapshot: {missing[:5]}")
    report.diff = asdict(diff)
    files = workload.check_files(table, snapshots)
    report.orphans = len(files.orphans)
    if files.missing:
        errors.append(f"{len(files.missing)} referenced files are missing: {files.missing[:3]}")
    theirs = Diff.of(model.view(), workload.paimon_rows(spec["pypaimon_address"], spec["warehouse"]))
    report.paimon_diff = asdict(theirs)
    if theirs.total:
        errors.append(f"pypaimon reads the latest snapshot differently from the model: {theirs}")
    return report


def _verify_child(conn: Connection, spec: dict[str, Any]) -> None:
    try:
        report = verify(spec)
    except Exception as exc:
        report = SoakReport(errors=[f"verification failed: {exc!r}"])
    conn.send(asdict(report))
    conn.close()


def soak(warehouse: str, commits: int, *, pypaimon_address: str, seed: int = 0, timeout: float = 600.0,
         every_snapshot: bool = True) -> SoakReport:
    """Run the soak in ``warehouse`` and check it from a fresh process (pypaimon is the worker at
    ``pypaimon_address``)."""
    workload.create_table(warehouse, OPTIONS)
    context = workload.process_context()
    spec = {"warehouse": warehouse, "commits": commits, "seed": seed, "every_snapshot": every_snapshot,
            "pypaimon_address": pypaimon_address}
    stop = context.Event()
    writers = [
        context.Process(target=writer_main, daemon=True,
                        args=(spec | {"writer": w, "log": os.path.join(warehouse, f"writer-{w}.jsonl")},))
        for w in (*LONG_LIVED, *ONE_SHOT)
    ]
    compactor = context.Process(target=compactor_main, daemon=True,
                                args=(spec | {"log": os.path.join(warehouse, "compactor.jsonl")}, stop))
    for process in (*writers, compactor):
        process.start()
    deadline = time.monotonic() + timeout
    failures = []
    for number, process in enumerate(writers):
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            failures.append(f"writer {number} timed out")
        elif process.exitcode != 0:
            failures.append(f"writer {number} exited with {process.exitcode}")
    stop.set()
    compactor.join(max(1.0, deadline - time.monotonic()))
    if compactor.is_alive():
        compactor.kill()
        failures.append("the compactor did not stop")
    elif compactor.exitcode != 0:
        failures.append(f"the compactor exited with {compactor.exitcode}")
    receive, send = context.Pipe(duplex=False)
    checker = context.Process(target=_verify_child, args=(send, spec), daemon=True)
    checker.start()
    send.close()
    report = SoakReport(errors=["the check sent no report"])
    if receive.poll(timeout):
        with contextlib.suppress(EOFError):
            report = SoakReport(**receive.recv())
    checker.join(timeout)
    if checker.is_alive():
        checker.kill()
    report.errors[:0] = failures
    return report


def summary(report: SoakReport, commits: int, seconds: float) -> str:
    compactor = report.compactor
    return "\n".join([
        f"writers: 2 long-lived + 2 table.write(), {commits} commits each, plus a table.compact() loop",
        f"commits landed: {report.commits_landed} of {4 * commits}, lost: {report.commits_lost}",
        f"snapshots: {report.snapshots} ({report.appends} APPEND, {report.compacts} COMPACT), no gaps: "
        f"{not any('gaps' in e for e in report.errors)}",
        f"commit retries (lost snapshot races): {report.lost_races}",
        f"table.compact(): {compactor.get('calls', 0)} calls, {compactor.get('compactions', 0)} landed, "
        f"{compactor.get('conflicts', 0)} void (CommitConflictError)",
        f"rows differing from the model: {Diff(**report.diff).total}; pypaimon: {Diff(**report.paimon_diff).total}",
        f"orphan files: {report.orphans}",
        f"errors: {len(report.errors)}",
        *(f"  {e}" for e in report.errors[:20]),
        f"wall time: {seconds:.1f} s",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--commits", type=int, default=250, help="commits per writer")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--root", default=None, help="where the table goes (default: a temp directory, removed)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="changelake-soak-") as scratch, PypaimonWorker.start() as worker:
        root = args.root or scratch
        print(f"soak: {args.commits} commits per writer, seed {args.seed}, table in {root}", flush=True)
        report = soak(root, args.commits, pypaimon_address=worker.address, seed=args.seed, timeout=args.timeout)
        print(summary(report, args.commits, time.monotonic() - started))
    return 0 if not report.errors else 1


if __name__ == "__main__":
    import soak as _module  # the children must pickle as soak.*, not __main__.*

    sys.exit(_module.main())
