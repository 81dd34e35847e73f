"""``branch create|delete|list|fast-forward``: the table's branches (Paimon's)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from changelake.cli.common import StorageOpt, TableArg, UsageError, WarehouseOpt, load_table
from changelake.cli.output import console

app = typer.Typer(help="Create, delete, list and fast-forward to a table's branches.", no_args_is_help=True)
NameArg = Annotated[str, typer.Argument(help="The branch's name.", show_default=False)]


@app.command()
def create(
    table: TableArg,
    name: NameArg,
    tag: Annotated[str | None, typer.Option(help="Start the branch at this tag's snapshot.")] = None,
    snapshot: Annotated[int | None, typer.Option(help="Start the branch at this snapshot.")] = None,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
) -> None:
    """Create a branch: empty (the table's latest schema, no snapshot), or from a tag or a snapshot.
    Read and write it as ``database.table$branch_NAME`` (with --warehouse)."""
    if tag is not None and snapshot is not None:
        raise UsageError("give at most one of --tag and --snapshot")
    made = load_table(table, warehouse, storage).create_branch(name, from_tag=tag, from_snapshot=snapshot)
    latest = made.latest_snapshot()
    typer.echo(f"created branch {name}" + ("" if latest is None else f" at snapshot {latest.id}"))


@app.command()
def delete(table: TableArg, name: NameArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """Delete a branch (the table's files only it named go with the next remove-orphans)."""
    load_table(table, warehouse, storage).delete_branch(name)
    typer.echo(f"deleted branch {name}")


@app.command("list")
def list_branches(table: TableArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """List the branches with their latest snapshots and tags."""
    opened = load_table(table, warehouse, storage)
    grid = RichTable(title="branches", title_justify="left")
    for column in ("branch", "latest snapshot", "records", "tags"):
        grid.add_column(column)
    for name in opened.list_branches():
        branch = opened.branch(name)
        latest = branch.latest_snapshot()
        grid.add_row(Text(name), "" if latest is None else str(latest.id),
                     "" if latest is None else str(latest.total_record_count), Text(", ".join(branch.tags())))
    console().print(grid)


@app.command("fast-forward")
def fast_forward(table: TableArg, name: NameArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """Make the table what the branch is: its snapshots, schemas and tags from the branch's
    earliest snapshot on are replaced by the branch's. Stop the table's writers first."""
    opened = load_table(table, warehouse, storage)
    opened.fast_forward(name)
    latest = opened.latest_snapshot()
    at = "" if latest is None else f" (snapshot {latest.id})"
    typer.echo(f"fast-forwarded {opened.name} to branch {name}{at}")
