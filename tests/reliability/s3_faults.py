"""S3 fault harness: a table on moto's S3 server, reached through the fault proxy
(``s3_fault_proxy.py``: 503 SlowDown, 500 InternalError, reset connections, answers past the
client's timeout, lost answers of puts that landed), driven by one caller that does what a
careful job does: it retries what raised.

The operations, drawn at random (seeded): ``Table.write`` (one-shot commits), a long-lived
writer's ``write`` and ``commit(identifier)``, ``compact``, ``expire_snapshots``,
``remove_orphan_files``, ``rollback_to`` and a change stream (``Table.stream`` with a consumer)
that is read to its end after each operation. The table is an aggregation table (sums), so a
write applied twice shows. After every operation a reader that bypasses the proxy checks:

* nothing lost or duplicated: the table reads as the model of the writes reported landed;
* every landed commit reported as landed: an operation that raised left no new snapshot, and a
  writer's commit retried after an error is not found already committed;
* every failure surfaced is a changelake ``StorageError`` naming the file;
* the change stream, folded, reads as the table; no file a snapshot names is missing.

Run as a script for the figure at scale: ``./dev crashtest --s3-faults --operations 300``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # s3_support, when run as a script
from s3_fault_proxy import Counts, Fault, FaultProxy, Plan, RandomFaults

import changelake as cl
from changelake.errors import ChangelakeError, CommitOutcomeUnknownError, RolledBackOffsetError, StorageError
from changelake.table.read import live_files
from s3_support import REGION, S3Endpoint, moto_s3

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("n", pa.int64()), pa.field("v", pa.int64())])
OPTIONS = {
    "bucket": "2",
    "merge-engine": "aggregation",
    "fields.n.aggregate-function": "sum",
    "fields.v.aggregate-function": "sum",
    "changelog-producer": "input",
    "num-sorted-run.compaction-trigger": "3",
    "snapshot.num-retained.min": "4",
    "snapshot.num-retained.max": "8",
    "manifest.merge-min-count": "3",
}
KEYS = 200
# The client's read timeout (s3fs passes config_kwargs to botocore's Config), and how long a
# TIMEOUT fault holds a request: past it.
READ_TIMEOUT_S = 2.0
# The client's own retries, measured through the proxy with s3fs 2025.12: botocore retries
# ``max_attempts`` times (4 by default, with backoff of up to seconds, which would absorb nearly
# every fault); s3fs repeats a call that met SlowDown 5 times on top. With one botocore retry, a
# burst of 2 InternalErrors, 4 resets or lost answers, or 10 SlowDowns reaches changelake.
CLIENT_RETRIES = 1
# An operation that keeps failing is given up after this many tries, and the run stops there
# (a violation: faults come in bursts of at most a dozen requests, and every try uses some).
TRIES = 30
OPERATIONS = ("write", "commit", "commit", "compact", "expire", "orphans", "rollback")
# Only these delete files (and the end of a run): files named by a snapshot are checked after them.
DELETING = frozenset({"expire", "orphans", "rollback", "the last operation"})

Values = dict[int, tuple[int, int]]  # key -> (n, v)
Progress = Callable[[int, str, "Totals"], None]  # (operations done, the last one, totals so far)


@dataclass
class Totals:
    """What one run did and found."""

    operations: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    retries: int = 0  # requests repeating one that met a fault (by the client or by changelake)
    conditional_puts_lost: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # surfaced to the caller, by operation
    unknown_outcomes: int = 0
    caller_retries: int = 0  # operations the caller tried again after a failure
    stream_batches: int = 0
    rows_missing: int = 0
    rows_extra: int = 0
    rows_wrong: int = 0
    stream_differences: int = 0
    violations: list[str] = field(default_factory=list)

    def add(self, counts: Counts) -> None:
        self.requests += counts.requests
        self.faults.update({str(k): v for k, v in counts.faults.items()})
        self.retries += counts.retries
        self.conditional_puts_lost += counts.conditional_puts_lost

    @property
    def rows_lost_or_duplicated(self) -> int:
        return self.rows_missing + self.rows_extra + self.rows_wrong

    def summary(self, seconds: float) -> str:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        return "\n".join([
            f"operations: {sum(self.operations.values())} "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.operations.items()))}), "
            f"change stream batches read: {self.stream_batches}",
            f"S3 requests: {self.requests}; faults injected: {sum(self.faults.values())} ({faults})",
            f"retries (requests repeating a faulted one): {self.retries}; lost answers of conditional puts "
            f"that landed: {self.conditional_puts_lost}",
            f"failures surfaced to the caller: {sum(self.failures.values())} ({failures}), each a StorageError "
            f"naming its file; commit outcomes unknown: {self.unknown_outcomes}; operations retried by the "
            f"caller: {self.caller_retries}",
            f"rows lost or duplicated: {self.rows_lost_or_duplicated} (missing {self.rows_missing}, extra "
            f"{self.rows_extra}, wrong {self.rows_wrong}); change stream differences: {self.stream_differences}",
            f"violations: {len(self.violations)}",
            *(f"  {v}" for v in self.violations[:20]),
            f"wall time: {seconds:.1f} s",
        ])


def storage_options(endpoint_url: str, *, client_retries: int = CLIENT_RETRIES) -> dict[str, Any]:
    return {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint_url, "region_name": REGION},
            "config_kwargs": {"read_timeout": READ_TIMEOUT_S, "connect_timeout": READ_TIMEOUT_S,
                              "retries": {"max_attempts": client_retries, "mode": "legacy"}}}


def rows_of(rng: random.Random, value: int) -> tuple[pa.Table, Values]:
    """Rows adding 1 to ``n`` and ``value`` to ``v`` of some keys, and what they add."""
    keys = sorted(rng.sample(range(KEYS), rng.randint(1, 30)))
    data = pa.table({"k": pa.array(keys, pa.int64()), "n": pa.array([1] * len(keys), pa.int64()),
                     "v": pa.array([value] * len(keys), pa.int64())})
    return data, dict.fromkeys(keys, (1, value))


def folded(into: Values, rows: Values) -> Values:
    out = dict(into)
    for k, (n, v) in rows.items():
        old = out.get(k, (0, 0))
        out[k] = (old[0] + n, old[1] + v)
    return out


def read_values(table: cl.Table) -> Values:
    data = table.scan().to_arrow().to_pylist()
    return {r["k"]: (r["n"], r["v"]) for r in data}


class GaveUp(Exception):
    """An operation failed every time it was tried: the run stops."""


class Harness:
    """One table, the faulty and the direct way to it, the model and the stream."""

    def __init__(self, s3: S3Endpoint, proxy: FaultProxy, plan: Plan, seed: int, client_retries: int) -> None:
        self.proxy = proxy
        self.plan = plan
        self.rng = random.Random(seed)
        self.totals = Totals()
        self.direct_options = storage_options(s3.endpoint_url)
        catalog = cl.Catalog(s3.new_warehouse(),
                             storage_options=storage_options(proxy.endpoint_url, client_retries=client_retries))
        self.table = catalog.create_table("db.t", SCHEMA, ["k"], options=OPTIONS)
        self.direct = cl.open_table(self.table.location, self.direct_options)
        self.model: Values = {}
        self.at_snapshot: dict[int, Values] = {}  # the model at each snapshot the caller saw
        self.value = 0
        self.session = 0
        self.writer = self.table.writer(commit_user=f"job-{self.session}")
        self.identifier = 0
        self.stream_values: Values = {}
        self.stream = self._new_stream()

    # -- the caller ----------------------------------------------------------------------

    @contextmanager
    def faults(self) -> Iterator[None]:
        with self.proxy.faults(self.plan) as counts:
            try:
                yield
            finally:
                self.totals.add(counts)

    def attempt(self, name: str, operation: Callable[[], Any], *, creates_snapshots: bool,
                outcome_matters: bool = False) -> Any:
        """Run ``operation`` under faults, trying again after a failure (which must be a
        StorageError naming its file, and, for a commit, must have landed nothing). A commit
        outcome reported unknown is the caller's to settle when ``outcome_matters`` (a write);
        otherwise (a compaction, a rollback's record) the operation is simply run again."""
        for tries in range(TRIES):
            before = self._latest()
            try:
                with self.faults():
                    return operation()
            except ChangelakeError as exc:
                last = exc
                self.totals.failures[name] += 1
                self.totals.caller_retries += tries == 0
                if not isinstance(exc, StorageError) or not exc.file:
                    self.totals.violations.append(f"{name}: {type(exc).__name__} names no file: {exc}")
                if isinstance(exc, CommitOutcomeUnknownError):
                    self.totals.unknown_outcomes += 1
                    if outcome_matters:
                        raise
                elif creates_snapshots and self._latest() != before:
                    self.totals.violations.append(f"{name} raised, yet snapshot {self._latest()} landed: {exc}")
        raise GaveUp(f"{name} failed {TRIES} times, the last time with {last!r}") from last

    def _latest(self) -> int | None:
        latest = self.direct.latest_snapshot()
        return latest.id if latest is not None else None

    def _remember(self) -> None:
        latest = self._latest()
        if latest is not None:
            self.at_snapshot[latest] = dict(self.model)

    # -- operations -------------------------------------------------------------------------

    def write(self) -> None:
        self.value += 1
        data, added = rows_of(self.rng, self.value)
        for _ in range(TRIES):
            before = self._latest() or 0
            try:
                landed = self.attempt("write", lambda: self.table.write(data), creates_snapshots=True,
                                      outcome_matters=True)
                break
            except CommitOutcomeUnknownError:
                # As the docs tell a caller: look whether it landed before writing again (only
                # this caller writes, so an APPEND snapshot since is this write's).
                landed = next((s for s in self.direct.snapshots()
                               if s.id > before and s.commit_kind is cl.CommitKind.APPEND), None)
                if landed is not None:
                    break
        else:
            raise GaveUp(f"whether write {self.value} landed stayed unknown")
        if landed is None:
            self.totals.violations.append(f"write {self.value} returned no snapshot")
            return
        self.model = folded(self.model, added)
        self.at_snapshot[landed.id] = dict(self.model)
        self._remember()

    def commit(self) -> None:
        self.value += 1
        self.identifier += 1
        data, added = rows_of(self.rng, self.value)
        self.attempt("writer.write", lambda: self.writer.write(data), creates_snapshots=False)
        unknown = False
        for _ in range(TRIES):
            try:
                landed = self.attempt("writer.commit", lambda: self.writer.commit(self.identifier),
                                      creates_snapshots=True, outcome_matters=True)
                break
            except CommitOutcomeUnknownError:
                unknown = True  # a retry with the same identifier lands at most once
        else:
            raise GaveUp(f"whether commit {self.identifier} landed stayed unknown")
        if not landed and not unknown:
            # [] means the identifier had landed already: only after an outcome reported
            # unknown, never after a failure.
            self.totals.violations.append(f"commit {self.identifier} was found already committed")
        self.model = folded(self.model, added)
        self._remember()

    def compact(self) -> None:
        full = self.rng.random() < 0.5
        self.attempt("compact", lambda: self.table.compact(full=full), creates_snapshots=True)
        self._remember()

    def expire(self) -> None:
        keep = self.rng.randint(3, 5)
        self.attempt("expire", lambda: self.table.expire_snapshots(retain_min=keep, retain_max=keep),
                     creates_snapshots=False)

    def orphans(self) -> None:
        # No threshold is needed while no writer runs: the writer (whose background compaction
        # writes files any time) closes first, and its successor goes on with the identifiers.
        self.writer.close()
        self.attempt("orphans", lambda: self.table.remove_orphan_files(older_than=dt.timedelta(0)),
                     creates_snapshots=False)
        self.writer = self.table.writer(commit_user=f"job-{self.session}")

    def rollback(self) -> None:
        present = {s.id for s in self.direct.snapshots()}
        targets = sorted(i for i in self.at_snapshot if i in present and i != self._latest())
        if not targets:
            return
        target = self.rng.choice(targets)
        self.writer.close()  # writers stop while a table rolls back
        self.attempt("rollback", lambda: self.table.rollback_to(snapshot_id=target), creates_snapshots=False)
        self.model = dict(self.at_snapshot[target])
        self.at_snapshot = {i: v for i, v in self.at_snapshot.items() if i <= target}
        self.session += 1
        self.writer = self.table.writer(commit_user=f"job-{self.session}")
        self.identifier = 0
        self.stream = self._new_stream()

    def _new_stream(self) -> cl.ChangeStream:
        self.stream_values = {}
        stream: cl.ChangeStream = self.attempt(
            "stream", lambda: self.table.stream(mode="latest-full", consumer_id=f"follower-{self.session}"),
            creates_snapshots=False)
        return stream

    def read_stream(self) -> None:
        """Read the stream to its end (a failed read resumes where it stopped) and record the
        consumer's progress."""
        def read() -> None:
            for batch in self.stream:
                self.totals.stream_batches += 1
                rows = batch.data.to_pylist()
                self.stream_values = folded(self.stream_values, {r["k"]: (r["n"], r["v"]) for r in rows})
            self.stream.commit()

        try:
            self.attempt("stream", read, creates_snapshots=False)
        except RolledBackOffsetError as exc:
            self.totals.violations.append(f"the stream met a rollback it was not told of: {exc}")

    # -- checks -----------------------------------------------------------------------------

    def check(self, after: str) -> None:
        try:
            got = read_values(self.direct)
        except ChangelakeError as exc:
            raise GaveUp(f"after {after}: the table is unreadable: {exc}") from exc
        missing = [k for k in self.model if k not in got]
        extra = [k for k in got if k not in self.model]
        wrong = [k for k in self.model if k in got and got[k] != self.model[k]]
        self.totals.rows_missing += len(missing)
        self.totals.rows_extra += len(extra)
        self.totals.rows_wrong += len(wrong)
        if missing or extra or wrong:
            examples = [(k, got[k], self.model[k]) for k in wrong[:3]]
            self.totals.violations.append(f"after {after}: {len(missing)} keys missing, {len(extra)} extra, "
                                          f"{len(wrong)} wrong (key, read, model: {examples})")
            self.model = got  # report each difference once
        if self.stream_values != got:
            differing = {k for k in {*got, *self.stream_values} if got.get(k) != self.stream_values.get(k)}
            self.totals.stream_differences += len(differing)
            self.totals.violations.append(f"after {after}: the stream folds to {len(differing)} keys unlike the table")
            self.stream_values = got
        if after in DELETING:
            for path in missing_files(self.direct):
                self.totals.violations.append(f"after {after}: {path} is named by a snapshot but missing")

    def run(self, operations: int, *, progress: Progress | None = None) -> Totals:
        """``operations`` operations; stops at a table that does not read, an operation that
        never succeeds, or an error that escapes the caller's handling (each a violation)."""
        try:
            for done in range(1, operations + 1):
                name = self.rng.choice(OPERATIONS)
                self.totals.operations[name] += 1
                getattr(self, name)()
                self.read_stream()
                self.check(name)
                if progress is not None:
                    progress(done, name, self.totals)
            self.writer.close()
            self.check("the last operation")
        except ChangelakeError as exc:
            self.totals.violations.append(f"the run stopped: {exc!r}")
        except GaveUp as exc:
            self.totals.violations.append(str(exc))
        return self.totals


def missing_files(table: cl.Table) -> list[str]:
    """Manifest lists, manifests, data and changelog files a snapshot names that are gone."""
    ctx = table.context
    file_io = ctx.file_io
    gone = []
    for snap in table.snapshots():
        lists = [snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list]
        for name in filter(None, lists):
            if not file_io.exists(ctx.paths.manifest(name)):
                gone.append(ctx.paths.manifest(name))
                continue
            for meta in live_files.manifest_list(ctx, name):
                if not file_io.exists(ctx.paths.manifest(meta.file_name)):
                    gone.append(ctx.paths.manifest(meta.file_name))
        gone += [path for e in live_files.live_entries(ctx, snap)
                 if not file_io.exists(path := f"{ctx.bucket_dir(e.partition, e.bucket)}/{e.file.file_name}")]
    return gone


def run_on(s3: S3Endpoint, operations: int, *, seed: int, rate: float, timeouts: bool = True,
           client_retries: int = CLIENT_RETRIES, progress: Progress | None = None) -> Totals:
    """``operations`` operations on a fresh table on ``s3`` behind the fault proxy, a burst of
    faults starting at ``rate`` of the requests (without TIMEOUT faults, which cost seconds
    each, unless ``timeouts``), botocore retrying ``client_retries`` times; ``progress`` is told
    after each operation."""
    logging.getLogger("changelake").setLevel(logging.ERROR)  # the warnings of recovered failures
    proxy = FaultProxy(s3.endpoint_url, delay=READ_TIMEOUT_S + 0.5)
    proxy.start()
    plan = RandomFaults(seed, rate=rate)
    if not timeouts:
        plan.weights = {k: w for k, w in plan.weights.items() if k is not Fault.TIMEOUT}
    try:
        return Harness(s3, proxy, plan, seed, client_retries).run(operations, progress=progress)
    finally:
        proxy.stop()


def run(operations: int, *, seed: int, rate: float, progress: Progress | None = None) -> Totals:
    """:func:`run_on` a moto server of its own."""
    servers = moto_s3()
    try:
        return run_on(next(servers), operations, seed=seed, rate=rate, progress=progress)
    finally:
        servers.close()


def _progress(every: int) -> Progress:
    def report(done: int, name: str, totals: Totals) -> None:
        if done % every == 0:
            last = totals.violations[-1:] or ["none"]
            print(f"  {done} operations (the last: {name}): {totals.requests} requests, "
                  f"{sum(totals.faults.values())} faults, {sum(totals.failures.values())} failures surfaced, "
                  f"{len(totals.violations)} violations (last: {last[0]})", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--operations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--rate", type=float, default=0.02, help="chance that a request starts a burst of faults")
    parser.add_argument("--verbose", action="store_true", help="a line per operation")
    args = parser.parse_args(argv)
    print(f"S3 fault harness: {args.operations} operations, seed {args.seed}, fault rate {args.rate}", flush=True)
    started = time.monotonic()
    totals = run(args.operations, seed=args.seed, rate=args.rate, progress=_progress(1 if args.verbose else 25))
    print(totals.summary(time.monotonic() - started))
    return 0 if not totals.violations and totals.rows_lost_or_duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
