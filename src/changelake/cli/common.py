"""What every command shares: the table argument and how it opens, storage options, durations,
and the usage error the app prints as one line."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import pyarrow as pa
import typer

from changelake import Catalog, Table, open_table
from changelake.errors import StorageConfigError
from changelake.option_values import parse_duration_ms


class UsageError(Exception):
    """Input the command cannot use (printed as one ``error:`` line, exit code 2)."""


class CommandError(Exception):
    """A command that cannot do its work for a reason the library does not raise (printed as
    one ``error:`` line, exit code 1)."""


TableArg = Annotated[str, typer.Argument(
    help="The table: its directory (a path or fsspec URL such as s3://bucket/wh/db.db/t), or "
         "'database.table' together with --warehouse.", metavar="TABLE", show_default=False)]
WarehouseOpt = Annotated[str | None, typer.Option(
    "--warehouse", "-w", metavar="WAREHOUSE", help="Warehouse to find TABLE in; TABLE is then 'database.table'.")]
StorageOpt = Annotated[list[str] | None, typer.Option(
    "--storage-option", "-o", metavar="KEY=VALUE",
    help="fsspec storage option for the URL (repeatable), e.g. -o endpoint_url=http://localhost:9000.")]


def key_values(pairs: list[str], flag: str, what: str = "KEY=VALUE") -> dict[str, str]:
    """``KEY=VALUE`` pairs as a dict; UsageError naming ``flag`` for a pair without ``=``."""
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes {what}, got {pair!r}")
        found[key] = value
    return found


def storage_options(pairs: list[str] | None) -> dict[str, str] | None:
    """``--storage-option`` pairs as a dict (None when none were given)."""
    return key_values(pairs, "--storage-option") if pairs else None


def load_catalog(warehouse: str, storage: list[str] | None) -> Catalog:
    """The catalog of ``warehouse``."""
    try:
        return Catalog(warehouse, storage_options(storage))
    except StorageConfigError as error:  # an unknown protocol or unusable --storage-option
        raise UsageError(str(error)) from None


def load_table(table: str, warehouse: str | None, storage: list[str] | None) -> Table:
    """Open TABLE: a directory, or ``database.table`` in ``warehouse``."""
    if warehouse is not None:
        return load_catalog(warehouse, storage).get_table(table)
    try:
        return open_table(table, storage_options(storage))
    except StorageConfigError as error:
        raise UsageError(str(error)) from None


def duration(text: str, flag: str) -> dt.timedelta:
    """A Paimon duration (``1 h``, ``30 min``, ``1 d``; a bare number is milliseconds)."""
    try:
        return dt.timedelta(milliseconds=parse_duration_ms(text))
    except ValueError as error:
        raise UsageError(f"{flag}: {error}") from None
    except OverflowError:
        raise UsageError(f"{flag}: {text!r} is longer than {dt.timedelta.max.days} days") from None


def typed_partition(table: Table, spec: str) -> dict[str, Any]:
    """``dt=2024-01-01,hh=0`` as values of the partition keys' types (cast as ``--where``
    casts its literals)."""
    typed: dict[str, Any] = {}
    for key, text in key_values(spec.split(","), "--partition", "COLUMN=VALUE[,COLUMN=VALUE...]").items():
        if key not in table.partition_keys:
            raise UsageError(f"--partition: {key!r} is not a partition key of {table.name} "
                             f"(partitioned by {', '.join(table.partition_keys) or 'nothing'})")
        column_type = table.schema.field(key).type
        try:
            typed[key] = pa.scalar(text).cast(column_type).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise UsageError(f"--partition: {text!r} is not a value of column {key!r} ({column_type}): "
                             f"{str(error).splitlines()[0]}") from None
    return typed
