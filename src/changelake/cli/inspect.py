"""``inspect``: the LSM tree of a table's buckets as text, and one bucket's as a picture."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from changelake.cli.common import StorageOpt, TableArg, UsageError, WarehouseOpt, key_values, load_table
from changelake.table.lsm.inspection import TableInspection


def _partition(found: TableInspection, pairs: list[str] | None) -> dict[str, Any] | None:
    """``--partition k=v`` pairs as the typed partition values of a bucket that has them (the
    command line gives text; the table's partition values may be dates or numbers)."""
    if not pairs:
        return None
    wanted = key_values(pairs, "--partition", "COLUMN=VALUE")
    for b in found.buckets:
        values = dict(b.partition)
        if set(values) == set(wanted) and all(str(values[k]) == v for k, v in wanted.items()):
            return values
    raise UsageError(f"--partition: no bucket in partition {wanted} (snapshot {found.snapshot_id})")


def inspect(
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    snapshot: Annotated[int | None, typer.Option(help="Inspect this snapshot (default: the latest).")] = None,
    png: Annotated[Path | None, typer.Option(
        help="Also draw one bucket's tree into this PNG file (needs changelake[plot]).")] = None,
    partition: Annotated[list[str] | None, typer.Option(
        metavar="COLUMN=VALUE", help="The picture's partition (repeatable; default: the largest bucket's).")] = None,
    bucket: Annotated[int | None, typer.Option(help="The picture's bucket (default: the largest).")] = None,
) -> None:
    """Show every bucket's LSM tree: levels, sorted runs, files with sizes and key ranges, what
    universal compaction would pick next and why, and the snapshot's changelog files."""
    found = load_table(table, warehouse, storage).inspect(snapshot_id=snapshot)
    typer.echo(found.summary())
    if png is not None:
        chosen = found.bucket(bucket, partition=_partition(found, partition))
        found.to_png(str(png), partition=dict(chosen.partition) or None, bucket=chosen.bucket)
        typer.echo(f"wrote {png}: bucket {chosen.bucket} of partition {dict(chosen.partition) or '(none)'}")
