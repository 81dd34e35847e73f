"""``inspect``: the LSM tree of a table's buckets as text, and one bucket's as a picture."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer

from changelake import Table
from changelake.cli.common import StorageOpt, TableArg, UsageError, WarehouseOpt, key_values, load_table
from changelake.errors import ScanError
from changelake.table.lsm.inspection import TableInspection


def _partition(table: Table, found: TableInspection, pairs: list[str] | None) -> dict[str, Any] | None:
    """``--partition k=v`` pairs as values of the partition keys' types: the text is cast as
    ``--where`` casts its literals (``2024-01-02`` for a DATE, ``2024-01-02 03:04:05.123456789``
    for a TIMESTAMP(9)), and a bucket of the partition must exist."""
    if not pairs:
        return None
    wanted = key_values(pairs, "--partition", "COLUMN=VALUE")
    typed: dict[str, Any] = {}
    for key, text in wanted.items():
        if key not in table.partition_keys:
            raise UsageError(f"--partition: {key!r} is not a partition key of {table.name} "
                             f"(partitioned by {', '.join(table.partition_keys) or 'nothing'})")
        column_type = table.schema.field(key).type
        try:
            typed[key] = pa.scalar(text).cast(column_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise UsageError(f"--partition: {text!r} is not a value of column {key!r} ({column_type}): "
                             f"{str(error).splitlines()[0]}") from None
    try:
        found.bucket(partition=typed)
    except ScanError:
        raise UsageError(f"--partition: no bucket in partition {wanted} (snapshot {found.snapshot_id})") from None
    return typed


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
    opened = load_table(table, warehouse, storage)
    found = opened.inspect(snapshot_id=snapshot)
    typer.echo(found.summary())
    if png is not None:
        chosen = found.bucket(bucket, partition=_partition(opened, found, partition))
        found.to_png(str(png), partition=dict(chosen.partition) or None, bucket=chosen.bucket)
        typer.echo(f"wrote {png}: bucket {chosen.bucket} of partition {chosen.partition_text or '(none)'}")
