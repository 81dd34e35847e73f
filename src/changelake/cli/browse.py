"""Looking around: ``ls`` a warehouse, ``show`` a table."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated

import pyarrow as pa
import typer
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from changelake.cli.common import CommandError, StorageOpt, TableArg, WarehouseOpt, load_catalog, load_table
from changelake.cli.output import console
from changelake.table.format.types import sql_string


def _cell(value: object) -> Text:
    """A cell shown as is (a partition such as ``[x]`` is text, not rich markup)."""
    if value is None:
        return Text("")
    if isinstance(value, dt.datetime):
        return Text(value.isoformat(sep=" ", timespec="seconds"))
    return Text(str(value))


def _print_rows(out: Console, title: str, rows: pa.Table, columns: dict[str, str]) -> None:
    """``rows`` as a table of ``columns`` (system-table column: header)."""
    grid = RichTable(title=title, title_justify="left")
    for header in columns.values():
        grid.add_column(header)
    for row in rows.select(list(columns)).to_pylist():
        grid.add_row(*(_cell(row[c]) for c in columns))
    out.print(grid)


def ls(
    warehouse: Annotated[str, typer.Argument(help="Warehouse directory (a path or fsspec URL).", show_default=False)],
    storage: StorageOpt = None,
) -> None:
    """List the databases of a warehouse and their tables, with each table's latest snapshot
    and row count (read from the snapshot file, no data is read)."""
    catalog = load_catalog(warehouse, storage)
    if not catalog.file_io.exists(catalog.warehouse):
        raise CommandError(f"warehouse {warehouse} does not exist")
    grid = RichTable(title=f"warehouse {warehouse}", title_justify="left")
    for column in ("table", "schema", "snapshot", "records", "primary keys", "partitioned by"):
        grid.add_column(column, justify="right" if column in ("schema", "snapshot", "records") else "left")
    for database in catalog.list_databases():
        for name in catalog.list_tables(database):
            table = catalog.get_table(f"{database}.{name}")
            latest = table.latest_snapshot()
            # The table's schema, not the latest snapshot's: schema changes need no commit.
            grid.add_row(Text(table.name), str(table.context.schema.id), str(latest.id) if latest else "-",
                         str(latest.total_record_count) if latest else "0",
                         ", ".join(table.primary_keys), ", ".join(table.partition_keys))
    console().print(grid)


def show(
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    snapshots: Annotated[int, typer.Option(min=0, help="How many of the newest snapshots to list.")] = 10,
) -> None:
    """Show a table: its schema (field ids, types, key and partition markers), options, tags,
    newest snapshots and the buckets of each partition."""
    opened = load_table(table, warehouse, storage)
    out = console()
    schema_row = opened.system("schemas").to_pylist()[-1]
    out.print(Text(f"{opened.name}  {opened.location}  schema {schema_row['schema_id']}", style="bold"))
    fields = RichTable(title="schema", title_justify="left")
    for column in ("id", "name", "type", "key", "comment"):
        fields.add_column(column)
    for field in json.loads(schema_row["fields"]):
        marks = [m for m, on in (("PK", field["name"] in opened.primary_keys),
                                 ("PARTITION", field["name"] in opened.partition_keys)) if on]
        fields.add_row(*(_cell(v) for v in (field["id"], field["name"], sql_string(field["type"]), " ".join(marks),
                                             field.get("description"))))
    out.print(fields)
    _print_rows(out, "options", opened.system("options"), {"key": "option", "value": "value"})
    tags = opened.system("tags")
    if tags.num_rows:
        _print_rows(out, "tags", tags, {"tag_name": "tag", "snapshot_id": "snapshot", "commit_time": "committed",
                                            "record_count": "records"})
    history = opened.system("snapshots")
    _print_rows(out, f"snapshots (newest {snapshots})", history.slice(max(0, history.num_rows - snapshots)),
                {"snapshot_id": "id", "schema_id": "schema", "commit_kind": "kind", "commit_time": "committed",
                 "total_record_count": "records", "delta_record_count": "delta", "changelog_record_count": "changelog"})
    _print_rows(out, "buckets", opened.system("buckets"),
                {"partition": "partition", "bucket": "bucket", "record_count": "records", "file_count": "files",
                 "file_size_in_bytes": "bytes"})
