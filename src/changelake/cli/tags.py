"""``tag create|delete|list``: named snapshots that expiry keeps."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from changelake.cli.common import StorageOpt, TableArg, WarehouseOpt, load_table
from changelake.cli.output import console

app = typer.Typer(help="Create, delete and list a table's tags (named snapshots).", no_args_is_help=True)
NameArg = Annotated[str, typer.Argument(help="The tag's name.", show_default=False)]


@app.command()
def create(
    table: TableArg,
    name: NameArg,
    snapshot: Annotated[int | None, typer.Option(help="Tag this snapshot (default: the latest).")] = None,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
) -> None:
    """Tag a snapshot so it can be read (scan --tag) and rolled back to by name."""
    tagged = load_table(table, warehouse, storage).create_tag(name, snapshot)
    typer.echo(f"created tag {name} on snapshot {tagged.id}")


@app.command()
def delete(table: TableArg, name: NameArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """Delete a tag (its snapshot stays unless it has expired; then the files only the tag kept go)."""
    load_table(table, warehouse, storage).delete_tag(name)
    typer.echo(f"deleted tag {name}")


@app.command("list")
def list_tags(table: TableArg, warehouse: WarehouseOpt = None, storage: StorageOpt = None) -> None:
    """List the tags and the snapshots they name."""
    grid = RichTable(title="tags", title_justify="left")
    for column in ("tag", "snapshot", "committed", "records"):
        grid.add_column(column)
    for name, tagged in sorted(load_table(table, warehouse, storage).tags().items()):
        committed = dt.datetime.fromtimestamp(tagged.time_millis / 1000).isoformat(sep=" ", timespec="seconds")
        grid.add_row(Text(name), str(tagged.id), committed, str(tagged.total_record_count))
    console().print(grid)
