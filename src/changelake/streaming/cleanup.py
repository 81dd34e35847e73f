"""Paimon's ``remove_orphan_files`` and ``expire_snapshots`` procedures on Spark: what decides
stays on the driver, the listing and deleting of many files goes to the executors.

Orphan cleanup: the driver reads which files the snapshots, tags, changelogs and branches name
and searches the few metadata directories itself; the data directories (manifests, index
files, every bucket, and every bucket under the external paths) are listed and cleaned by the
tasks, each told the names in use in its directories. Expiry: the driver expires the snapshots
exactly as :meth:`Table.expire_snapshots` does (the commit users' last commits recorded, the
snapshot files and ``EARLIEST`` first); only
the deletion of the files the expired snapshots alone named is spread over the tasks. Either
way a crash leaves files nothing names, never a snapshot naming a deleted one (tasks are killed
at ``orphan-file`` and ``expire-files`` in the crash test).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import defaultdict
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession

from changelake.api.table import Table
from changelake.streaming.maintenance import max_tasks, on_executors
from changelake.streaming.sink import as_table
from changelake.table import snapshot_expiry
from changelake.table.context import TableContext
from changelake.table.maintenance import orphans, references
from changelake.table.snapshot_expiry import ExpireResult, Retention

_PATH = "path"


def remove_orphan_files(spark: SparkSession, table: Table | str, *,
                        older_than: dt.datetime | dt.timedelta | None = None, dry_run: bool = False) -> list[str]:
    """Delete the files nothing of ``table`` names (no snapshot, tag, changelog or schema of it
    or its branches) modified before ``older_than`` (a time, or an age; default one day), as
    :meth:`Table.remove_orphan_files` does, with the data directories listed and cleaned on
    Spark's executors; with ``dry_run`` only list them. Returns their paths, sorted. The
    threshold must exceed the longest commit of any concurrent writer. Works over Spark Connect
    too."""
    ctx = as_table(table).context
    cutoff = orphans.threshold_ms(older_than)
    used = references.files_in_use(ctx)
    in_metadata = [path for directory, is_kept in orphans.metadata_directories(ctx).items()
                   for path in orphans.orphans_in(ctx, directory, is_kept, cutoff)]
    in_use: dict[str, list[str]] = defaultdict(list)
    for path in used:
        directory, _, name = path.rpartition("/")
        in_use[directory].append(name)
    own, external = orphans.data_directories(ctx), orphans.external_directories(ctx)
    directories = [*own, *external]
    rows = pa.table({"directory": directories, "used": [in_use.get(d, []) for d in directories],
                     "external": [False] * len(own) + [True] * len(external)})
    run = functools.partial(orphans_task, ctx, cutoff, dry_run=dry_run)
    in_data = on_executors(spark, rows, max_tasks(spark), run, f"{_PATH} string").column(_PATH).to_pylist()
    if not dry_run:
        orphans.delete(ctx, in_metadata)
    return sorted([*in_metadata, *in_data])


def orphans_task(ctx: TableContext, cutoff_ms: int, batches: Iterator[pa.RecordBatch], *,
                 dry_run: bool) -> Iterator[pa.RecordBatch]:
    """A task's search of the data directories it got (rows ``directory, used, external``:
    the names in use there, and whether it is under an external path): the orphans it found
    (and, unless ``dry_run``, deleted), one row each."""
    for batch in batches:
        for directory, used, external in zip(batch.column("directory").to_pylist(), batch.column("used").to_pylist(),
                                             batch.column("external").to_pylist(), strict=True):
            in_use = {f"{directory}/{name}" for name in used}
            kept = orphans.kept_externally(ctx, in_use) if external else in_use.__contains__
            found = orphans.orphans_in(ctx, directory, kept, cutoff_ms)
            if not dry_run:
                orphans.delete(ctx, found)
            if found:
                yield pa.RecordBatch.from_pydict({_PATH: found})


def expire_snapshots(spark: SparkSession, table: Table | str, *, older_than_ms: int | None = None,
                     retain_min: int | None = None, retain_max: int | None = None,
                     max_deletes: int | None = None) -> ExpireResult:
    """Expire ``table``'s snapshots as :meth:`Table.expire_snapshots` does (the same arguments,
    over the table's ``snapshot.*`` options), with the files the expired snapshots alone named
    deleted on Spark's executors. Returns what was removed. Works over Spark Connect too."""
    ctx = as_table(table).context
    retention = Retention.of(ctx, older_than_ms=older_than_ms, retain_min=retain_min, retain_max=retain_max,
                             max_deletes=max_deletes)
    delete = functools.partial(_delete_on_executors, spark, ctx)
    return snapshot_expiry.expire_alongside_others(ctx, retention, delete=delete)


def _delete_on_executors(spark: SparkSession, ctx: TableContext, paths: Sequence[str]) -> None:
    on_executors(spark, pa.table({_PATH: list(paths)}), max_tasks(spark), functools.partial(delete_task, ctx),
                 f"{_PATH} string")


def delete_task(ctx: TableContext, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's deletion of the files it got (rows ``path``); it returns no rows."""
    for batch in batches:
        snapshot_expiry.delete_files(ctx, batch.column(_PATH).to_pylist())
    yield from ()
