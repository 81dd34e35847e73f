"""The crash test's check of a table against the writer's commit log (see crashtest.py): what
a fresh process verifies after every kill, before it carries on.

* the table opens, snapshot ids run 1..n without a gap and LATEST leads to the newest;
* each APPEND snapshot is matched to one logged commit: by (commit user, identifier) for the
  long-lived writer, by the commit user the log recorded for ``table.write()`` (a snapshot of an
  unknown user is the one commit whose result was never logged); no commit lands twice, none is
  missing before the newest landed one, and no logged result disagrees with the table;
* with table operations (operations.py) their snapshots, APPEND or OVERWRITE, are matched as
  ``table.write()``'s, and each applies its effect to the model (one that landed nothing too);
  a writer's own partition expiry (an OVERWRITE of an unknown user) drops the expired partition;
* every snapshot reads as the model of exactly the commits that landed up to it, with no
  primary key on two rows (cross-partition: a key moved out of a partition is gone from it);
* no file referenced by any snapshot is missing (files nobody references are counted: orphans);
  with expiry (mode ``expire``) the snapshots left run without a gap up to the newest, the
  commits before the oldest one matched count as landed, and the long-lived writer's last
  commit in the expired snapshots is recorded (so a replay of it never lands again);
* no consumer points past the snapshot after the latest (a rollback moves them back);
* with ``changelog-producer=input``: each APPEND snapshot's changelog is exactly the rows of its
  commit (row kinds included), other snapshots carry none, and the changelog folded from the
  first snapshot equals the table at every snapshot (nothing emitted twice, nothing lost);
* pypaimon reads the latest snapshot as the model says (asked of one pypaimon worker process,
  pypaimon_oracle.py, that every child connects to).

The report also says where the writer carries on: the first commit whose result was not
logged, and whether that commit had landed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import operations
import pyarrow as pa
import workload
from workload import Diff, Mode

import changelake as cl
from changelake.table.commit import last_commits
from changelake.table.format import binary_row, bucket, hash_index
from changelake.table.read import deletion_vectors as read_index
from changelake.table.read.live_files import live_entries
from changelake.table.write.assigners.dynamic import hash_entries

WRITER_USER = "crash-writer"  # the long-lived writer's commit user


@dataclass
class Report:
    """What a fresh process found in the table."""

    errors: list[str] = field(default_factory=list)
    snapshots: int = 0
    landed: list[int] = field(default_factory=list)  # commit indexes that landed
    pending: int | None = None  # the commit whose result was not logged
    pending_landed: bool = False
    start: int = 1  # the commit to run next
    diff: dict[str, int] = field(default_factory=dict)
    changelog_diff: dict[str, int] = field(default_factory=dict)  # the folded changelog against the table
    changelog_rows: int = 0
    paimon_diff: dict[str, int] = field(default_factory=dict)
    missing_files: list[str] = field(default_factory=list)
    orphans: int = 0
    # first-row: the latest snapshot holds level-0 files (a kill fell between a commit's APPEND
    # and COMPACT snapshots), which Paimon's readers skip, so pypaimon read an older snapshot
    level0_window: bool = False
    key_moves: int = 0  # cross-partition: rows of the landed commits that moved a key
    writer_expiries: int = 0  # partition drops by the writer's own partition expiry
    idle_operations: int = 0  # operations that had nothing to do (no snapshot)


def verify(table: cl.Table, warehouse: str, mode: Mode, seed: int, records: Sequence[dict[str, Any]], *,
           pypaimon_address: str) -> Report:
    report = Report()
    errors = report.errors
    snapshots = table.snapshots()
    report.snapshots = len(snapshots)
    ids = [s.id for s in snapshots]
    first = ids[0] if ids and mode.expires else 1
    if ids != list(range(first, first + len(ids))):
        errors.append(f"snapshot ids are not {first}..{first + len(ids) - 1}: {ids}")
    latest = table.latest_snapshot()
    if (latest.id if latest else None) != (ids[-1] if ids else None):
        errors.append(f"latest snapshot is {latest.id if latest else None}, the newest file {ids[-1:]}")

    intents = sorted({r["commit"] for r in records if r["event"] == "intent"})
    results = [r for r in records if r["event"] == "result"]
    resolved = {r["commit"] for r in results}
    users = {r["user"]: r["commit"] for r in results}
    unresolved = [i for i in intents if i not in resolved]

    # Match APPEND snapshots to commits (and, with table operations, their OVERWRITE snapshots:
    # nothing else overwrites there).
    assigned: dict[int, int] = {}
    last = 0
    matched_kinds = {cl.CommitKind.APPEND, *([cl.CommitKind.OVERWRITE] if mode.operations else [])}
    for snap in snapshots:
        if snap.commit_kind not in matched_kinds:
            continue
        index: int | None
        if mode.one_shot:
            index = users.get(snap.commit_user)
            if index is None:
                index = next((i for i in unresolved if i > last and i not in assigned), None)
        else:
            index = snap.commit_identifier if snap.commit_user == WRITER_USER else None
        if index is None or index not in intents:
            errors.append(f"snapshot {snap.id} ({snap.commit_user}, {snap.commit_identifier}) matches no commit")
            continue
        if index in assigned:
            errors.append(f"commit {index} landed twice: snapshots {assigned[index]} and {snap.id}")
            continue
        if index < last:
            errors.append(f"commit {index} landed after commit {last} (snapshot {snap.id})")
        assigned[index] = snap.id
        last = max(last, index)
    # With expiry, the commits before the oldest one matched landed in expired snapshots.
    landed_before = 1
    if mode.expires and first > 1:
        landed_before = min(assigned) if assigned else max(
            (r["commit"] for r in results if r["snapshots"]), default=0) + 1
    report.landed = sorted({*assigned, *range(1, landed_before)})
    if mode.expires and not mode.one_shot and landed_before > 1:
        recorded = last_commits.read(table.context, WRITER_USER)
        if recorded is None or not landed_before - 1 <= recorded.commit_identifier <= max(report.landed):
            errors.append(f"commits up to {landed_before - 1} expired, but the writer's last commit recorded is "
                          f"{recorded and recorded.commit_identifier}")
    for consumer_id, next_snapshot in zip(*table.system("consumers").to_pydict().values(), strict=True):
        if next_snapshot > (latest.id if latest else 0) + 1:
            errors.append(f"consumer {consumer_id} reads snapshot {next_snapshot} next, past the latest {latest}")
    # Operations that had nothing to do land no snapshot: applied to the model before the next
    # snapshot that landed (they must change nothing, else the snapshots after them differ).
    idle = sorted((r["commit"], op) for r in results
                  if not r["snapshots"] and (op := operations.operation_of(mode, r["commit"])) is not None)
    report.idle_operations = len(idle)
    gaps = [i for i in range(landed_before, last + 1) if i not in assigned and i not in dict(idle)]
    if gaps:
        errors.append(f"commits {gaps} were lost (commit {last} landed)")
    for r in results:
        index = r["commit"]
        if r["snapshots"]:
            if r["snapshots"][0] < first:
                continue  # expired
            if assigned.get(index) != r["snapshots"][0]:
                errors.append(f"commit {index} logged snapshot {r['snapshots'][0]}, table has {assigned.get(index)}")
        elif index not in assigned and index >= landed_before and index not in dict(idle):
            errors.append(f"commit {index} was skipped as already committed but never landed")
        if r.get("expected") is not None and r["expected"] != bool(r["snapshots"]):
            errors.append(f"re-run of commit {index} {'landed' if r['snapshots'] else 'was skipped'}, "
                          f"expected {'landing' if r['expected'] else 'a skip'}")
    if unresolved:
        report.pending = unresolved[-1]
        report.pending_landed = report.pending in assigned
    waiting = [i for i in intents if i not in resolved and not (mode.one_shot and i in assigned)]
    report.start = min(waiting) if waiting else max(intents, default=0) + 1

    # pypaimon reads the latest snapshot; of a table whose readers skip level 0, the newest
    # without level-0 files.
    oracle = snapshots[-1] if snapshots else None
    if mode.skips_level0 or mode.postpones:
        oracle = next((s for s in reversed(snapshots) if not workload.hides_commits(mode, table, s)), None)
        report.level0_window = oracle is not (snapshots[-1] if snapshots else None)
    oracle_view: dict[workload.Key, workload.Row] = {}

    # Every snapshot against the model of the commits that landed up to it.
    by_snapshot = {snapshot_id: index for index, snapshot_id in assigned.items()}
    model = workload.Model(mode.engine, cross_partition=mode.cross_partition)
    # the changelog folded from the first snapshot
    folded = workload.Model(mode.engine, cross_partition=mode.cross_partition)
    for index in range(1, landed_before):
        model.apply([r for call in workload.commit_rows(mode, seed, 0, index) for r in call])
    diff = Diff()
    changelog_diff = Diff()
    for snap in snapshots:
        index = by_snapshot.get(snap.id)
        op = None if index is None else operations.operation_of(mode, index)
        committed = [] if index is None or op is not None else [
            r for call in workload.commit_rows(mode, seed, 0, index) for r in call]
        while index is not None and idle and idle[0][0] < index:
            operations.apply(model, mode, seed, *idle.pop(0))
        if index is not None and op is not None:
            operations.apply(model, mode, seed, index, op)
        elif snap.commit_kind is cl.CommitKind.OVERWRITE and operations.writer_expires(mode):
            operations.apply(model, mode, seed, 0, operations.Operation.EXPIRE)
            report.writer_expiries += 1
        model.apply(committed)
        try:
            read = workload.scan_rows(table, snap.id)
            changes = workload.changelog_rows(table, snap)
        except cl.errors.ChangelakeError as exc:
            errors.append(f"snapshot {snap.id} is unreadable: {exc}")
            continue
        got = workload.keyed(read)
        twice = workload.live_twice(read, mode.primary_keys) if not mode.append else []
        if twice:
            errors.append(f"snapshot {snap.id}: keys {twice[:3]} are on two rows each (in two partitions or "
                          "buckets)")
        if oracle is not None and snap.id == oracle.id:
            oracle_view = model.view()
        if workload.hides_commits(mode, table, snap):
            # Readers of first-row tables and of tables with deletion vectors skip level 0: such
            # a snapshot (its COMPACT was killed) shows its commit only once a later one
            # compacts it up; postpone-bucket rows show once a compaction moved them.
            continue
        one = Diff.of(model.view(), got)
        if one.total:
            errors.append(f"snapshot {snap.id} differs from the model: {one}")
        diff.add(one)
        if mode.input_changelog:
            report.changelog_rows += len(changes)
            if _counted(changes) != _counted(committed):
                errors.append(f"snapshot {snap.id} has {len(changes)} changelog rows, not the {len(committed)} "
                              "rows of its commit")
            folded.apply(changes)
            one = Diff.of(folded.view(), got)
            if one.total:
                errors.append(f"the changelog folded up to snapshot {snap.id} differs from the table: {one}")
            changelog_diff.add(one)
        elif mode.compaction_changelog and snap.changelog_manifest_list is not None:
            # A kill between a commit's APPEND and COMPACT leaves an APPEND whose changes come
            # with a later compaction: only snapshots with changelog must match the fold.
            report.changelog_rows += len(changes)
            folded.apply(changes)
            one = Diff.of(folded.view(), got)
            if one.total:
                errors.append(f"the changelog folded up to snapshot {snap.id} differs from the table: {one}")
            changelog_diff.add(one)
    report.diff = asdict(diff)
    report.key_moves = model.moves
    report.changelog_diff = asdict(changelog_diff)

    _check_kept_changelogs(table, mode, seed, errors)
    files = workload.check_files(table, snapshots)
    report.missing_files = files.missing
    report.orphans = len(files.orphans)
    if files.missing:
        errors.append(f"{len(files.missing)} referenced files are missing: {files.missing[:3]}")
    if table.context.options.bucket == -1 and not mode.cross_partition and latest is not None:
        errors += _keys_outside_their_bucket(table)  # cross-partition tables keep no HASH index

    if oracle is not None:
        theirs = Diff.of(oracle_view, workload.paimon_rows(pypaimon_address, warehouse, oracle.id))
        report.paimon_diff = asdict(theirs)
        if theirs.total:
            errors.append(f"pypaimon reads snapshot {oracle.id} differently from the model: {theirs}")
    return report


def _keys_outside_their_bucket(table: cl.Table) -> list[str]:
    """Dynamic buckets: keys of a partition found in two buckets, or missing from their
    bucket's HASH index file."""
    ctx = table.context
    latest = ctx.latest_snapshot()
    assert latest is not None
    found: dict[tuple[bytes, int], set[Any]] = {}
    for e in live_entries(ctx, latest):
        keys = ctx.read_file(ctx.bucket_dir(e.partition, e.bucket), e.file, ctx.key_columns)
        columns = [c.to_pylist() for c in keys.columns]
        found.setdefault((e.partition, e.bucket), set()).update(zip(*columns, strict=True))
    errors = []
    indexes = hash_entries(ctx)
    for (partition, b), keys in found.items():
        for (other_partition, other), other_keys in found.items():
            if other_partition == partition and b < other and keys & other_keys:
                errors.append(f"keys {sorted(keys & other_keys)[:3]} are in buckets {b} and {other}")
        entry = indexes.get(partition, {}).get(b)
        if entry is None:
            errors.append(f"bucket {b} has data files but no HASH index file")
            continue
        indexed = hash_index.read(ctx.file_io, read_index.index_path(ctx, entry.file), entry.file, table=ctx.name)
        encoded = binary_row.encode([pa.array([k[i] for k in keys], ctx.arrow_schema.field(name).type)
                                     for i, name in enumerate(ctx.key_names)])
        if not set(bucket.hash_rows(encoded).tolist()) <= set(indexed.tolist()):
            errors.append(f"bucket {b} holds keys its HASH index file {entry.file.file_name} lacks")
    return errors


def _check_kept_changelogs(table: cl.Table, mode: Mode, seed: int, errors: list[str]) -> None:
    """Without a producer, a kept changelog of an APPEND snapshot reads as the keys its commit
    wrote (its data files outlived the snapshot); streams read it like a snapshot's."""
    for kept in workload.kept_changelogs(table):
        if kept.commit_kind != cl.CommitKind.APPEND or kept.commit_user != WRITER_USER:
            continue
        try:
            got = table.changes(kept.id - 1, kept.id).to_arrow()
        except cl.errors.ChangelakeError as exc:
            errors.append(f"kept changelog {kept.id} is unreadable: {exc}")
            continue
        keys = set(zip(got.column("p").to_pylist(), got.column("k").to_pylist(), strict=True))
        wrote = {(r["p"], r["k"]) for call in workload.commit_rows(mode, seed, 0, kept.commit_identifier)
                 for r in call}
        if keys != wrote:
            errors.append(f"kept changelog {kept.id} has keys {len(keys)}, its commit wrote {len(wrote)}")


def _counted(rows: Sequence[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows)
