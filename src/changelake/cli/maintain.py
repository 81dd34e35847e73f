"""Maintenance: ``compact``, ``rescale``, ``expire``, ``remove-orphans``, ``rollback``; each prints what it did."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from changelake import Table
from changelake.cli.common import StorageOpt, TableArg, UsageError, WarehouseOpt, duration, load_table, typed_partition
from changelake.cli.progress import progress_bar
from changelake.table.snapshot_expiry import Retention


def compact(
    *,
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    full: Annotated[bool, typer.Option("--full", help="Merge every bucket into its top level.")] = False,
) -> None:
    """Compact the table's buckets now, as one COMPACT snapshot (universal compaction picks
    what to merge, as writers do; --full merges everything)."""
    opened = load_table(table, warehouse, storage)
    with progress_bar("compacting buckets") as progress:
        landed = opened.compact(full=full, progress=progress)
    if landed is None:
        typer.echo("nothing to compact")
    else:
        typer.echo(f"compacted: snapshot {landed.id} ({landed.total_record_count} records)")


def rescale(
    *,
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    bucket: Annotated[int | None, typer.Option(
        help="The new number of buckets (default: the table's 'bucket'); it becomes the table's 'bucket'.")] = None,
    partition: Annotated[list[str] | None, typer.Option(
        metavar="COLUMN=VALUE[,COLUMN=VALUE...]",
        help="A partition to rescale (repeatable; default: every partition).")] = None,
) -> None:
    """Rewrite partitions with a new number of buckets as one OVERWRITE snapshot (Paimon's
    rescale procedure); their rows stay as they are."""
    opened = load_table(table, warehouse, storage)
    partitions = None if not partition else [typed_partition(opened, spec) for spec in partition]
    with progress_bar("rescaling partitions") as progress:
        landed = opened.rescale(bucket=bucket, partitions=partitions, progress=progress)
    if landed is None:
        typer.echo("nothing to rescale")
    else:
        typer.echo(f"rescaled to {opened.options['bucket']} buckets: snapshot {landed.id} "
                   f"({landed.total_record_count} records)")


def expire(
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    retain_max: Annotated[int | None, typer.Option(
        min=1, help="Keep at most N snapshots (default: snapshot.num-retained.max).")] = None,
    retain_min: Annotated[int | None, typer.Option(
        min=1, help="Keep at least N snapshots (default: snapshot.num-retained.min).")] = None,
    older_than: Annotated[str | None, typer.Option(
        help="Expire snapshots older than this duration, e.g. '1 h', '30 min', '1 d' "
             "(default: snapshot.time-retained).")] = None,
) -> None:
    """Expire old snapshots and delete the files only they still named (consumers, tags and
    the retention options hold snapshots back, as after every commit)."""
    if retain_min is not None and retain_max is not None and retain_min > retain_max:
        raise UsageError(f"--retain-max {retain_max} is less than --retain-min {retain_min}")  # as Paimon refuses
    opened = load_table(table, warehouse, storage)
    threshold = None
    if older_than is not None:
        threshold = int(time.time() * 1000) - int(duration(older_than, "--older-than").total_seconds() * 1000)
    with progress_bar("deleting expired files") as progress:
        result = opened.expire_snapshots(older_than_ms=threshold, retain_min=retain_min, retain_max=retain_max,
                                         progress=progress)
    if result.snapshots:
        typer.echo(f"expired {len(result.snapshots)} snapshots ({result.snapshots[0]}..{result.snapshots[-1]})")
    else:
        typer.echo("expired 0 snapshots")
    typer.echo(f"deleted {result.data_files} data files, {result.changelog_files} changelog files, "
               f"{result.manifests} manifests")
    if result.changelogs:
        typer.echo(f"expired {len(result.changelogs)} long-lived changelogs")
    if result.consumers:
        typer.echo(f"dropped consumers: {', '.join(result.consumers)}")
    held = _held_back(opened, Retention.of(opened.context, retain_min=retain_min, retain_max=retain_max),
                      len(result.snapshots), min_given=retain_min is not None, max_given=retain_max is not None)
    if held is not None:
        typer.echo(held)


def _held_back(opened: Table, retention: Retention, expired: int, *, min_given: bool, max_given: bool) -> str | None:
    """Why more snapshots than the retained maximum are left after a run (the bounds of
    Paimon's ``ExpireSnapshotsImpl`` that stop it before the maximum), or None when they are not."""
    latest = opened.latest_snapshot()
    if latest is None or latest.id <= retention.retain_max:  # ids start at 1: no more than the maximum
        return None
    kept = len(opened.snapshots())
    if kept <= retention.retain_max:
        return None
    maximum = f"--retain-max {retention.retain_max}" if max_given else \
        f"snapshot.num-retained.max ({retention.retain_max})"
    reasons = []
    if retention.retain_min > retention.retain_max:
        reasons.append(f"--retain-min {retention.retain_min} keeps the newest {retention.retain_min}" if min_given
                       else f"snapshot.num-retained.min ({retention.retain_min}) keeps the newest "
                            f"{retention.retain_min}; lower it with --retain-min N")
    oldest_in_maximum = latest.id - retention.retain_max + 1
    consumers = opened.system("consumers").to_pylist()
    reasons += [f"consumer {c['consumer_id']!r} has yet to read snapshot {c['next_snapshot_id']}"
                for c in consumers if c["next_snapshot_id"] < oldest_in_maximum]
    if expired >= retention.max_deletes:
        reasons.append(f"snapshot.expire.limit ({retention.max_deletes}) ends a run after that many snapshots; "
                       "run expire again")
    if not reasons:
        return None
    return f"kept {kept} snapshots, more than {maximum}: {'; '.join(reasons)}"


def remove_orphans(
    *,
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    older_than: Annotated[str, typer.Option(
        help="Only files modified longer ago than this duration ('1 d', '6 h', ...). It must exceed "
             "the longest commit of any running writer.")] = "1 d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the orphan files, delete nothing.")] = False,
) -> None:
    """Delete the files no snapshot, tag, changelog or schema names (left by crashed writers)."""
    opened = load_table(table, warehouse, storage)
    with progress_bar("searching for orphan files") as progress:
        found = opened.remove_orphan_files(older_than=duration(older_than, "--older-than"), dry_run=dry_run,
                                           progress=progress)
    for path in found:
        typer.echo(path)
    typer.echo(f"{'would delete' if dry_run else 'deleted'} {len(found)} orphan files")


def rollback(
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    snapshot: Annotated[int | None, typer.Option(help="Roll back to this snapshot id.")] = None,
    tag: Annotated[str | None, typer.Option(help="Roll back to the snapshot of this tag.")] = None,
) -> None:
    """Make an earlier snapshot the latest again: later snapshots and tags are deleted, then
    the files only they named. Stop the table's writers first."""
    if (snapshot is None) == (tag is None):
        raise UsageError("give exactly one of --snapshot and --tag")
    opened = load_table(table, warehouse, storage)
    target = opened.rollback_to(snapshot_id=snapshot, tag=tag)
    typer.echo(f"rolled back to snapshot {target.id} ({target.total_record_count} records)")
