"""Multi-writer soak: four writer processes (two long-lived ``table.writer(commit_user=...)``,
two one-shot ``table.write()``) commit N times each on overlapping keys while another process
calls ``table.compact()`` in a loop (a CommitConflictError there, when a writer's compaction
removed its inputs first, is expected and counted).

The table is one of ``MODES``: fixed buckets; dynamic buckets (``bucket = -1``), where writers
placing new keys in one partition race for its HASH index; or cross-partition upsert (the key
without the partition, keys moving between partitions), where any other writer's commit since a
writer placed its keys voids its commit. A writer whose commit is void (CommitConflictError)
writes its rows again and commits again; the voids are counted.

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
from changelake.table.io import killpoints
from pypaimon_oracle import PypaimonWorker

OPTIONS = {
    "num-sorted-run.compaction-trigger": "3",
    "target-file-size": "16 kb",
    # Five committers race for every snapshot id: retry (with backoff) as long as it takes.
    "commit.max-retries": "1000",
    "commit.max-retry-wait": "200 ms",
}
DYNAMIC = {"bucket": "-1", "dynamic-bucket.target-row-num": "40"}
MODES = {m.name: m for m in (
    Mode("fixed", one_shot=False, engine="deduplicate", options=OPTIONS, calls=1, rows=30, keys=150),
    Mode("dynamic-bucket", one_shot=False, engine="deduplicate", options=OPTIONS | DYNAMIC, calls=1, rows=30,
         keys=150),
    Mode("cross-partition", one_shot=False, engine="deduplicate", options=OPTIONS | DYNAMIC, calls=1, rows=30,
         keys=150, cross_partition=True),
)}
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


def _pause_before_compact_snapshots(seconds: float) -> None:
    """Widen the window between a commit's APPEND snapshot and its COMPACT one, where other
    writers' commits land: the races there showed only under load before."""
    reached = killpoints.reached

    def paused(point: killpoints.KillPoint, **kwargs: Any) -> None:
        if point is killpoints.KillPoint.BEFORE_COMPACT_SNAPSHOT:
            time.sleep(seconds)
        reached(point, **kwargs)

    killpoints.reached = paused


def writer_main(spec: dict[str, Any]) -> None:
    races = _RaceCounter()
    if spec["compact_pause"]:
        _pause_before_compact_snapshots(spec["compact_pause"])
    table = cl.open_table(workload.table_location(spec["warehouse"]))
    mode = MODES[spec["mode"]]
    writer_id = spec["writer"]
    log = Log(spec["log"])
    long_lived = table.writer(commit_user=_user(writer_id)) if writer_id in LONG_LIVED else None
    voids = 0
    for index in range(1, spec["commits"] + 1):
        log.append({"event": "intent", "commit": index})
        [rows] = workload.commit_rows(mode, spec["seed"], writer_id, index)
        while True:
            try:
                if long_lived is None:
                    snap = table.write(workload.to_arrow(rows))
                    landed, user = ([snap] if snap else []), (snap.commit_user if snap else None)
                else:
                    long_lived.write(workload.to_arrow(rows))
                    landed, user = long_lived.commit(index), _user(writer_id)
                break
            except CommitConflictError:
                voids += 1  # another writer's keys landed since this one placed its own: again
        log.append({"event": "result", "commit": index, "user": user, "snapshots": [s.id for s in landed]})
    if long_lived is not None:
        long_lived.close()
    log.append({"event": "done", "lost_races": races.lost, "voids": voids})


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
    voids: int = 0  # writers' commits void by a conflict, written again
    key_moves: int = 0  # cross-partition: rows of the landed commits that moved a key
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
        report.voids += sum(r["voids"] for r in done)
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

    mode = MODES[spec["mode"]]
    model = workload.Model(mode.engine, cross_partition=mode.cross_partition)
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
            [rows] = workload.commit_rows(mode, spec["seed"], *commit)
            model.apply(rows)
        else:
            report.compacts += 1
        if spec["every_snapshot"] or snap.id == ids[-1]:
            try:
                read = workload.scan_rows(table, snap.id)
            except cl.errors.ChangelakeError as exc:
                errors.append(f"snapshot {snap.id} is unreadable: {exc}")
                continue
            twice = workload.live_twice(read, mode.primary_keys)
            if twice:
                errors.append(f"snapshot {snap.id}: keys {twice[:3]} are on two rows each (in two partitions or "
                              "buckets)")
            one = Diff.of(model.view(), workload.keyed(read))
            if one.total:
                errors.append(f"snapshot {snap.id} differs from the model: {one}")
            diff.add(one)
    report.commits_landed = len(seen)
    report.key_moves = model.moves
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


def soak(warehouse: str, commits: int, *, pypaimon_address: str, mode: str = "fixed", seed: int = 0,
         timeout: float = 600.0, every_snapshot: bool = True, compact_pause: float = 0.0) -> SoakReport:
    """Run the soak on a table of ``mode`` (one of ``MODES``) in ``warehouse`` and check it from a
    fresh process (pypaimon is the worker at ``pypaimon_address``); ``compact_pause`` seconds
    before each writer's COMPACT snapshot let other writers' commits land in between."""
    workload.create_table(warehouse, MODES[mode].table_options, MODES[mode].primary_keys)
    context = workload.process_context()
    spec = {"warehouse": warehouse, "commits": commits, "seed": seed, "every_snapshot": every_snapshot,
            "pypaimon_address": pypaimon_address, "mode": mode, "compact_pause": compact_pause}
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


def summary(report: SoakReport, commits: int, seconds: float, mode: str = "fixed") -> str:
    compactor = report.compactor
    return "\n".join([
        f"table: {mode}; writers: 2 long-lived + 2 table.write(), {commits} commits each, plus a table.compact() loop",
        f"commits landed: {report.commits_landed} of {4 * commits}, lost: {report.commits_lost}; "
        f"void by a conflict and written again: {report.voids}",
        f"snapshots: {report.snapshots} ({report.appends} APPEND, {report.compacts} COMPACT), no gaps: "
        f"{not any('gaps' in e for e in report.errors)}",
        f"commit retries (lost snapshot races): {report.lost_races}",
        f"table.compact(): {compactor.get('calls', 0)} calls, {compactor.get('compactions', 0)} landed, "
        f"{compactor.get('conflicts', 0)} void (CommitConflictError)",
        f"rows differing from the model: {Diff(**report.diff).total}; pypaimon: {Diff(**report.paimon_diff).total}"
        + (f"; keys moved to another partition: {report.key_moves}" if MODES[mode].cross_partition else ""),
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
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--root", default=None, help="where the tables go (default: a temp directory, removed)")
    parser.add_argument("--compact-pause", type=float, default=0.0,
                        help="seconds each writer waits before its COMPACT snapshot (widens races after its APPEND)")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="changelake-soak-") as scratch, PypaimonWorker.start() as worker:
        for mode in args.modes.split(","):
            started = time.monotonic()
            root = os.path.join(args.root or scratch, mode)
            print(f"soak: {mode} table, {args.commits} commits per writer, seed {args.seed}, table in {root}",
                  flush=True)
            report = soak(root, args.commits, pypaimon_address=worker.address, mode=mode, seed=args.seed,
                          timeout=args.timeout, compact_pause=args.compact_pause)
            print(summary(report, args.commits, time.monotonic() - started, mode), flush=True)
            failed |= bool(report.errors)
    return 1 if failed else 0


if __name__ == "__main__":
    import soak as _module  # the children must pickle as soak.*, not __main__.*

    sys.exit(_module.main())
