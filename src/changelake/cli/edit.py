"""Table operations: ``delete``, ``truncate``, ``drop-partition``, ``expire-partitions``; each
prints what it did."""

from __future__ import annotations

from typing import Annotated

import typer

from changelake.cli.common import StorageOpt, TableArg, UsageError, WarehouseOpt, load_table, typed_partition
from changelake.errors import FilterError
from changelake.table.format.snapshot import Snapshot


def _report(landed: Snapshot | None, done: str, nothing: str) -> None:
    typer.echo(nothing if landed is None else f"{done}: snapshot {landed.id} ({landed.total_record_count} records)")


def delete(
    *,
    table: TableArg,
    where: Annotated[str, typer.Option(help="The rows to delete, as scan --where filters them.")],
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
) -> None:
    """Delete the rows a filter matches as one commit of -D rows (Paimon's DELETE FROM, on a
    primary-key table)."""
    opened = load_table(table, warehouse, storage)
    try:
        landed = opened.delete(where)
    except FilterError as error:
        raise UsageError(f"--where: {error.message}") from None
    _report(landed, "deleted", "nothing matches")


def truncate(*, table: TableArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """Delete every row as one OVERWRITE snapshot (Paimon's TRUNCATE TABLE)."""
    _report(load_table(table, warehouse, storage).truncate(), "truncated", "nothing to truncate")


def drop_partition(
    *,
    table: TableArg,
    partition: Annotated[list[str], typer.Option(
        metavar="COLUMN=VALUE[,COLUMN=VALUE...]", help="A partition to drop (repeatable).")],
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
) -> None:
    """Delete the rows of partitions as one OVERWRITE snapshot (Paimon's ALTER TABLE ... DROP
    PARTITION)."""
    opened = load_table(table, warehouse, storage)
    landed = opened.drop_partitions([typed_partition(opened, spec) for spec in partition])
    _report(landed, "dropped", "nothing to drop")


def expire_partitions(*, table: TableArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """Drop the partitions older than the table's partition.expiration-time now, as writers do
    after their commits."""
    gone = load_table(table, warehouse, storage).expire_partitions()
    if not gone:
        typer.echo("no partition expired")
    for values in gone:
        typer.echo("expired: " + ", ".join(f"{k}={v}" for k, v in values.items()))
