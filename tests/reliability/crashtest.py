"""Crash test (in the spirit of RocksDB's db_crashtest): a writer runs in a child process and is
killed with SIGKILL at named kill points (``changelake.table.io.killpoints``) and at random
moments; after every kill a fresh process checks the table and carries on from where the
killed one stopped.

The writer logs an intent before each commit and its result after it (JSON lines, fsynced). A
fresh child first verifies the table against that log (crashtest_verify.py lists the checks:
no commit lost or landed twice, every snapshot as the model of its commits, no referenced file
missing, consumers, changelogs, and pypaimon reading what the model says).

Then it re-runs the commit whose result was lost: the long-lived writer always re-runs it with
the same commit user and identifier, and it must land iff it had not landed; ``table.write()``
(no exactly-once identifier) re-runs it only when it did not land. Each episode is a fresh table
of a few commits with a few kills; a last child completes it and a last fresh process verifies.

The modes of operations.py run table operations (delete, update, overwrite, merge, drop,
expire, truncate) between their writes; a plan ``point@operation`` arms the point only while an
operation of that kind runs, so every operation is killed inside, and the check knows each
operation's effect on the model. The ``branches`` mode runs branch operations (branching.py).

Run as a script for the full figure: ``./dev crashtest --kills 200``.
"""

from __future__ import annotations

import argparse
import errno
import itertools
import logging
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

import branching
import operations
import workload
from crashtest_verify import WRITER_USER, Report, verify
from workload import Diff, Log, Mode

import changelake as cl
from changelake.table.io import killpoints
from changelake.table.io.killpoints import KillPoint
from changelake.table.read import live_files
from pypaimon_oracle import PypaimonWorker

MODES = workload.MODES | operations.MODES | {branching.MODE.name: branching.MODE}
RANDOM = "random"
# How many times each named point is typically reached in one child's run: kill at 1..N.
REACH = {
    KillPoint.DATA_FILE: 12,
    KillPoint.CHANGELOG_FILE: 12,
    KillPoint.SPILL_RUN: 12,
    KillPoint.MANIFEST: 6,
    KillPoint.MANIFEST_LIST: 8,
    KillPoint.SNAPSHOT_BEFORE_LATEST: 5,
    KillPoint.HINT_RETRY: 4,
    KillPoint.INDEX_FILE: 2,
    KillPoint.HASH_INDEX: 3,
    KillPoint.KEY_INDEX: 3,
    KillPoint.COMPACTION: 3,
    KillPoint.MANIFEST_COMPACTION: 2,
    KillPoint.BEFORE_COMPACT_SNAPSHOT: 3,
    KillPoint.ORPHAN_FILE: 2,
    KillPoint.ROLLBACK: 3,
    KillPoint.ROLLBACK_CONSUMER: 2,
    KillPoint.EXPIRE_RECORDED: 4,
    KillPoint.EXPIRE_SNAPSHOTS: 4,
    KillPoint.EXPIRE_FILES: 8,
    KillPoint.RESCALE: 4,
    KillPoint.OVERWRITE: 2,
    KillPoint.OVERWRITE_WRITTEN: 1,
    KillPoint.ROW_LEVEL_REWRITTEN: 1,
    KillPoint.BRANCH_CREATED: 2, KillPoint.BRANCH_DELETE: 3, KillPoint.FAST_FORWARD: 2,
}
# The mode whose children maintain the table before writing: remove orphans (two strays made
# for the purpose, and whatever a kill left), roll back a full compaction made for the
# purpose (which changes no row, so the model holds), which moves back two consumers that had
# read it; after writing, they rescale the table twice (no row changes either).
MAINTAINED = "compaction"
ROLLBACK_TARGET = "before-maintenance"  # the tag of the snapshot the maintenance rolls back to
READERS = ("reader-1", "reader-2")  # consumers that read the compaction the maintenance rolls back
# Reached only by Spark drivers (the sink's, and compaction's and rescale's on Spark): spark_crashtest.py kills there.
SPARK_ONLY = frozenset({KillPoint.SINK_WRITTEN, KillPoint.SINK_COMMITTED, KillPoint.SPARK_COMPACTED,
                        KillPoint.SPARK_RESCALED})


def points_of(mode: Mode) -> list[str]:
    """The kill points a mode reaches, the points inside each of its operations
    ("point@operation": armed only while one of that kind runs), and random kills."""
    reaches = {KillPoint.SPILL_RUN: "write-buffer-size" in mode.options, KillPoint.CHANGELOG_FILE: mode.input_changelog,
               KillPoint.ORPHAN_FILE: mode.name == MAINTAINED, KillPoint.ROLLBACK: mode.name == MAINTAINED,
               KillPoint.ROLLBACK_CONSUMER: mode.name == MAINTAINED,
               KillPoint.RESCALE: mode.name == MAINTAINED,
               KillPoint.OVERWRITE: mode.name == MAINTAINED or bool(mode.operations) or operations.writer_expires(mode),
               # reached by operations only: their plans arm them inside one
               KillPoint.OVERWRITE_WRITTEN: False, KillPoint.ROW_LEVEL_REWRITTEN: False,
               # only commits with an identifier are recorded: the long-lived writer's
               KillPoint.EXPIRE_RECORDED: mode.expires and not mode.one_shot,
               KillPoint.EXPIRE_SNAPSHOTS: mode.expires, KillPoint.EXPIRE_FILES: mode.expires,
               KillPoint.INDEX_FILE: "deletion-vectors.enabled" in mode.options,
               KillPoint.HASH_INDEX: mode.options.get("bucket") == "-1" and not mode.cross_partition,
               KillPoint.KEY_INDEX: mode.cross_partition,
               KillPoint.HINT_RETRY: mode.hint_faults,
               # a postpone writer's commit is an APPEND only, its compaction a COMPACT only; an
               # append writer's compaction lands as a commit of its own
               KillPoint.BEFORE_COMPACT_SNAPSHOT: not (mode.postpones or mode.append),
               **{p: mode.name == branching.MODE.name for p in branching.POINTS}}
    points = [p.value for p in KillPoint if p not in SPARK_ONLY and reaches.get(p, True)]
    return [*points, *operations.kill_points(mode), RANDOM, RANDOM]


# -- the child --------------------------------------------------------------------------------




def child(conn: Connection, spec: dict[str, Any]) -> None:
    """Verify the table against the log, report, then run commits start..end (until killed)."""
    # a point planned inside an operation is armed only while one of its kind runs
    os.environ[killpoints.ENVIRONMENT_VARIABLE] = "" if spec["kill_op"] else spec["kill_point"] or ""
    os.makedirs(spec["tmpdir"], exist_ok=True)
    tempfile.tempdir = spec["tmpdir"]  # spill runs go here, so the ones a kill leaves are counted
    mode = MODES[spec["mode"]]
    log = Log(spec["log"])
    if mode.hint_faults:
        fail_hint_writes()
    try:
        table = cl.open_table(workload.table_location(spec["warehouse"]))
        report = verify(table, spec["warehouse"], mode, spec["seed"], log.records(),
                        pypaimon_address=spec["pypaimon_address"])
    except Exception as exc:
        report = Report(errors=[f"verification failed: {exc!r}"])
    conn.send(asdict(report))
    conn.close()
    if report.errors:
        sys.exit(3)
    if spec["verify_only"]:
        return
    run = spec["run"]
    if mode.name == MAINTAINED:
        maintain(table)
    if mode.name == branching.MODE.name:
        branching.branch_round(table)
    writer = None if mode.one_shot else table.writer(commit_user=WRITER_USER)
    for index in range(report.start, spec["end"] + 1):
        expected = None
        if index == report.pending and not mode.one_shot:
            expected = not report.pending_landed  # the re-run lands iff the lost commit had not
        op = operations.operation_of(mode, index)
        log.append({"event": "intent", "commit": index, "run": run} | ({"op": op.value} if op else {}))
        calls = workload.commit_rows(mode, spec["seed"], 0, index)
        if op is not None:
            done = operations.run(table, mode, spec["seed"], index, op,
                                  kill_point=spec["kill_point"] if op == spec["kill_op"] else None)
            landed, user = ([done], done.commit_user) if done is not None else ([], None)
        elif writer is None:
            snap = table.write(workload.to_arrow([r for call in calls for r in call]))
            assert snap is not None
            landed, user = [snap], snap.commit_user
        else:
            for call in calls:
                writer.write(workload.to_arrow(call))
            landed, user = writer.commit(index), WRITER_USER
        log.append({"event": "result", "commit": index, "run": run, "user": user, "expected": expected,
                    "snapshots": [s.id for s in landed], "kinds": [s.commit_kind.value for s in landed]})
        if expected is not None and expected != bool(landed):
            sys.exit(4)
        if mode.postpones:
            table.compact()  # the rows waiting in bucket-postpone/ move into real buckets
    if writer is not None:
        writer.close()
    if mode.name == MAINTAINED:
        rescale(table)
    if mode.name == branching.MODE.name:
        branching.branch_round(table)


# Which tries of the hint writes fail, in turn: one write fails once, the next on every try
# (the hint stays behind), the next does not fail, and so on.
HINT_FAULTS = (True, False, True, True, True, False)


def fail_hint_writes() -> None:
    """Make this process's snapshot hint writes (a temp file renamed over LATEST or EARLIEST)
    fail as a flaky store's do, in the pattern of ``HINT_FAULTS``."""
    logging.getLogger("changelake").setLevel(logging.ERROR)  # the warnings of the hints left behind
    real = os.replace
    pattern = itertools.cycle(HINT_FAULTS)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if str(dst).endswith(("/snapshot/LATEST", "/snapshot/EARLIEST")) and next(pattern):
            raise OSError(errno.EIO, "injected hint write failure", str(dst))
        real(src, dst, *args, **kwargs)

    os.replace = replace


def maintain(table: cl.Table) -> None:
    """A rollback a kill interrupted is run again, which completes it; then orphan cleanup (with
    two stray files, as a crashed writer leaves), then a full compaction that two consumers
    read, rolled back; no writer runs meanwhile, so no threshold is needed."""
    latest = table.latest_snapshot()
    if latest is not None and any(e.total_buckets != table.context.options.bucket
                                  for e in live_files.live_entries(table.context, latest)):
        table.rescale()  # a kill fell between a rescale's new schema and its overwrite
    if ROLLBACK_TARGET in table.tags():
        table.rollback_to(tag=ROLLBACK_TARGET)
        table.delete_tag(ROLLBACK_TARGET)
    os.makedirs(os.path.join(table.location, "manifest"), exist_ok=True)
    for name in ("manifest-stray-1", "manifest-stray-2"):
        with open(os.path.join(table.location, "manifest", name), "wb"):
            pass
    table.remove_orphan_files(older_than=timedelta(0))
    before = table.latest_snapshot()
    if before is None:
        return
    table.create_tag(ROLLBACK_TARGET, before.id)
    if table.compact(full=True) is not None:
        for consumer_id in READERS:  # both read the compaction
            read_all = table.stream(mode="latest", consumer_id=consumer_id,
                                    options={"consumer.ignore-progress": "true"})
            read_all.commit()
        table.rollback_to(tag=ROLLBACK_TARGET)
        if {table.stream(consumer_id=c).offset.snapshot_id for c in READERS} != {before.id + 1}:
            sys.exit(5)  # a consumer resumed after the rollback would skip the next commits
    table.delete_tag(ROLLBACK_TARGET)


def rescale(table: cl.Table) -> None:
    """Every partition to the other number of buckets (2 <-> 3: a new schema, then the overwrite;
    a kill between them leaves the partitions at the old number, which the next run's writer
    would refuse to write: its maintenance rescales them first), then again at that number."""
    table.rescale(bucket=5 - int(table.options["bucket"]))
    table.rescale()


# -- the driver -------------------------------------------------------------------------------


@dataclass
class Outcome:
    report: dict[str, Any] | None
    exitcode: int | None
    killed: bool  # by SIGKILL (a kill point or the driver)
    seconds: float = 0.0  # from the report to the exit


def run_child(spec: dict[str, Any], *, delay: float | None, timeout: float) -> Outcome:
    """Start a child; with ``delay``, SIGKILL it that long after it verified the table."""
    context = workload.process_context()
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=child, args=(send, spec), daemon=True)
    process.start()
    send.close()
    report = None
    try:
        if receive.poll(timeout):
            report = receive.recv()
    except EOFError:
        pass
    finally:
        receive.close()
    reported = time.monotonic()
    if delay is not None and report is not None:
        process.join(delay)
        if process.is_alive():
            process.kill()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join(timeout)
        return Outcome(report, None, killed=False)
    return Outcome(report, process.exitcode, killed=process.exitcode == -9, seconds=time.monotonic() - reported)


@dataclass
class Totals:
    kills: int = 0
    kills_by_point: Counter[str] = field(default_factory=Counter)
    unreached: Counter[str] = field(default_factory=Counter)
    children: int = 0
    episodes: int = 0
    commits_landed: int = 0
    lost_commits_landed: int = 0  # commits whose result a kill lost, found landed
    lost_commits_not_landed: int = 0
    level0_windows: int = 0  # first-row checks that found the latest snapshot holding level 0
    key_moves: int = 0  # cross-partition: rows that moved a key to another partition, checked
    operations_landed: Counter[str] = field(default_factory=Counter)  # table operations that landed, checked
    rows: Diff = field(default_factory=Diff)
    paimon_rows: Diff = field(default_factory=Diff)
    changelog: Diff = field(default_factory=Diff)
    changelog_rows: int = 0
    orphans: int = 0
    spill_leftovers: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self, seconds: float) -> str:
        points = ", ".join(f"{p} {n}" for p, n in sorted(self.kills_by_point.items()))
        return "\n".join([
            f"kills survived: {self.kills} ({points})",
            f"episodes: {self.episodes}, writer processes: {self.children}",
            f"commits landed: {self.commits_landed} (of the commits whose result a kill lost: "
            f"{self.lost_commits_landed} had landed, {self.lost_commits_not_landed} had not)",
            f"rows lost or duplicated: {self.rows.total} (missing {self.rows.missing}, extra {self.rows.extra}, "
            f"wrong {self.rows.wrong}); pypaimon differences: {self.paimon_rows.total}",
            f"input changelog: {self.changelog_rows} rows checked; the folded changelog differs from the table "
            f"by {self.changelog.total} rows",
            f"files left over after crashes: {self.orphans} in tables (orphans), "
            f"{self.spill_leftovers} spill files in temp directories",
            f"first-row checks whose latest snapshot held level-0 files (pypaimon read the newest "
            f"without): {self.level0_windows}",
            f"cross-partition: {self.key_moves} key moves landed and checked (a key on two rows fails)",
            "table operations landed and checked: "
            + (", ".join(f"{op} {n}" for op, n in sorted(self.operations_landed.items()) if n) or "none"),
            f"failures: {len(self.failures)}",
            *(f"  {f}" for f in self.failures),
            f"wall time: {seconds:.1f} s",
        ])


def _kill_plans(mode: Mode, rng: random.Random, plans: Sequence[str] | None) -> Iterator[str]:
    if plans is not None:
        yield from itertools.cycle(plans)
    while True:
        points = points_of(mode)
        rng.shuffle(points)
        yield from points


def run_mode(
    mode: Mode,
    root: str,
    kills: int,
    totals: Totals,
    *,
    pypaimon_address: str,
    seed: int = 0,
    commits: int = 8,
    kills_per_episode: int = 4,
    plans: Sequence[str] | None = None,
    timeout: float = 120.0,
    verbose: bool = False,
) -> None:
    """Episodes of ``commits`` commits on fresh tables until ``kills`` kills were survived."""
    rng = random.Random(f"{seed}/{mode.name}")
    typical = 0.5  # seconds a child that is not killed writes for: random kills fall within
    upcoming = _kill_plans(mode, rng, plans)
    plan = next(upcoming)
    misses = 0
    done = 0
    episode = 0
    while done < kills:
        warehouse = os.path.join(root, mode.name, f"episode-{episode}")
        workload.create_table(warehouse, mode.table_options, mode.primary_keys)
        base = {"mode": mode.name, "warehouse": warehouse, "log": os.path.join(warehouse, "commits.jsonl"),
                "tmpdir": os.path.join(warehouse, "tmp"), "seed": seed, "end": max(commits, operations.cycle(mode)),
                "pypaimon_address": pypaimon_address}
        kills_here = 0
        after_kill = False
        for run in itertools.count():
            kill = plan if kills_here < kills_per_episode and done < kills else None
            point = None
            name, _, op = (kill or "").partition("@")
            if kill is not None and kill != RANDOM:
                # inside an operation: its first reach (an operation reaches most points once)
                point = f"{name}:{1 if op else rng.randint(1, 2 if plans is not None else REACH[KillPoint(name)])}"
            delay = rng.uniform(0.0, typical) if kill == RANDOM else None
            spec = base | {"kill_point": point, "kill_op": op or None, "run": run, "verify_only": False}
            outcome = run_child(spec, delay=delay, timeout=timeout)
            if verbose:
                print(f"{mode.name} episode {episode} run {run}: kill {point or kill}, exit code {outcome.exitcode}, "
                      f"{outcome.seconds:.2f} s after the check", flush=True)
            totals.children += 1
            where = f"{mode.name} episode {episode} run {run} (kill {point or kill})"
            if not _check(outcome, totals, where, final=False):
                return
            if after_kill and outcome.report is not None:
                _count_lost(totals, outcome.report)
            after_kill = outcome.killed
            if outcome.killed:
                done += 1
                kills_here += 1
                totals.kills += 1
                totals.kills_by_point[kill or "?"] += 1
                plan, misses = next(upcoming), 0
                continue
            if outcome.exitcode != 0:
                totals.failures.append(f"{where}: exit code {outcome.exitcode}")
                return
            if kill is None or kill == RANDOM:
                typical = max(0.05, outcome.seconds)
            if kill is not None:  # the point was not reached in this run
                totals.unreached[kill] += 1
                misses += 1
                if misses >= 2:
                    plan, misses = next(upcoming), 0
            break
        final = run_child(base | {"kill_point": None, "kill_op": None, "run": -1, "verify_only": True}, delay=None,
                          timeout=timeout)
        if not _check(final, totals, f"{mode.name} episode {episode} final check", final=True):
            return
        assert final.report is not None
        totals.operations_landed.update(op.value for index in final.report["landed"]
                                        if (op := operations.operation_of(mode, index)) is not None)
        totals.operations_landed["writer expiry"] += final.report["writer_expiries"]
        totals.operations_landed["nothing to do"] += final.report["idle_operations"]
        totals.episodes += 1
        tmp = base["tmpdir"]
        totals.spill_leftovers += sum(len(names) for _, _, names in os.walk(tmp))
        episode += 1


def _check(outcome: Outcome, totals: Totals, where: str, *, final: bool) -> bool:
    report = outcome.report
    if report is None:
        totals.failures.append(f"{where}: no report (exit code {outcome.exitcode})")
        return False
    if report["errors"]:
        totals.failures.append(f"{where}: " + "; ".join(report["errors"][:5]))
        return False
    totals.level0_windows += report["level0_window"]
    if final:
        totals.commits_landed += len(report["landed"])
        totals.rows.add(Diff(**report["diff"]))
        totals.paimon_rows.add(Diff(**report["paimon_diff"]))
        totals.changelog.add(Diff(**report["changelog_diff"]))
        totals.changelog_rows += report["changelog_rows"]
        totals.orphans += report["orphans"]
        totals.key_moves += report["key_moves"]
    return True


def crashtest(
    root: str,
    kills: int,
    *,
    pypaimon_address: str,
    modes: Sequence[str] | None = None,
    seed: int = 0,
    commits: int = 8,
    plans: dict[str, Sequence[str]] | None = None,
    timeout: float = 120.0,
    verbose: bool = False,
) -> Totals:
    """``kills`` kills spread over the modes; a mode with a plan gets one kill per point of its
    plan instead (so every planned point is reached). pypaimon is the worker at
    ``pypaimon_address``."""
    totals = Totals()
    names = list(modes or MODES)
    for position, name in enumerate(names):
        share = kills // len(names) + (1 if position < kills % len(names) else 0)
        if plans is not None and name in plans:
            share = len(plans[name])
        if share:
            run_mode(MODES[name], root, share, totals, pypaimon_address=pypaimon_address, seed=seed, commits=commits,
                     plans=(plans or {}).get(name), timeout=timeout, verbose=verbose)
    return totals


def _count_lost(totals: Totals, report: dict[str, Any]) -> None:
    if report["pending"] is None:
        return
    if report["pending_landed"]:
        totals.lost_commits_landed += 1
    else:
        totals.lost_commits_not_landed += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--commits", type=int, default=10, help="commits per episode (a fresh table)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--root", default=None, help="where the tables go (default: a temp directory, removed)")
    parser.add_argument("--verbose", action="store_true", help="a line per writer process")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="changelake-crashtest-") as scratch, PypaimonWorker.start() as worker:
        root = args.root or scratch
        print(f"crashtest: {args.kills} kills, seed {args.seed}, modes {args.modes}, tables in {root}", flush=True)
        totals = crashtest(root, args.kills, pypaimon_address=worker.address, modes=args.modes.split(","),
                           seed=args.seed, commits=args.commits, verbose=args.verbose)
        print(totals.summary(time.monotonic() - started))
    ok = not totals.failures and totals.rows.total + totals.paimon_rows.total + totals.changelog.total == 0
    return 0 if ok else 1


if __name__ == "__main__":
    import crashtest as _module  # the child function must pickle as crashtest.child, not __main__.child

    sys.exit(_module.main())
