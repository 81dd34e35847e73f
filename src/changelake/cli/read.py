"""Reading rows: ``scan`` a snapshot, ``changes`` between snapshots (or follow new ones)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import typer

from changelake import Table
from changelake.cli.common import StorageOpt, TableArg, UsageError, WarehouseOpt, load_table
from changelake.cli.output import Format, RowWriter, default_format
from changelake.cli.progress import progress_bar
from changelake.errors import FilterError
from changelake.table.read import sql_filter

WhereOpt = Annotated[str | None, typer.Option(
    "--where", help="Row filter, e.g. \"id >= 10 AND (name = 'x' OR d IS NULL)\"; see docs/cli.md.")]
ColumnsOpt = Annotated[str | None, typer.Option(help="Comma-separated columns to print, in this order.")]
FormatOpt = Annotated[Format | None, typer.Option(
    "--format", "-f", help="Output format (default: table on a terminal, csv otherwise).", show_default=False)]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", help="Write to FILE instead of stdout (required for parquet).", dir_okay=False)]

# Rows a scan draws on a terminal without --limit: drawing is slow (100,000 rows take half a
# minute) and no screen shows them; pipes and files get every row.
TERMINAL_LIMIT = 1000


def _filter(table: Table, where: str | None) -> pc.Expression | None:
    if where is None:
        return None
    try:
        return sql_filter.parse(where, table.schema)
    except FilterError as error:
        raise UsageError(f"--where: {error.message}") from None


def _columns(columns: str | None) -> list[str] | None:
    if columns is None:
        return None
    names = [c.strip() for c in columns.split(",")]
    if "" in names:
        raise UsageError(f"--columns: an empty column name in {columns!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"--columns names {', '.join(map(repr, twice))} more than once")
    return names


@contextlib.contextmanager
def _sink(output: Path | None) -> Iterator[BinaryIO | None]:
    if output is None:
        yield None
        return
    with output.open("wb") as sink:
        yield sink


def scan(
    table: TableArg,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    snapshot: Annotated[int | None, typer.Option(help="Read this snapshot id.")] = None,
    tag: Annotated[str | None, typer.Option(help="Read the snapshot this tag names.")] = None,
    timestamp_ms: Annotated[int | None, typer.Option(
        help="Read the newest snapshot committed at or before this time (epoch milliseconds).")] = None,
    where: WhereOpt = None,
    columns: ColumnsOpt = None,
    limit: Annotated[int | None, typer.Option(
        min=0, help=f"Stop after N rows (reading no further). Default: every row, or {TERMINAL_LIMIT} when drawn "
                    "on a terminal.")] = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Print a table's rows, merged to one row per key (the latest snapshot unless --snapshot,
    --tag or --timestamp-ms picks another)."""
    opened = load_table(table, warehouse, storage)
    reading = opened.scan(snapshot, tag=tag, timestamp_ms=timestamp_ms, filter=_filter(opened, where),
                          columns=_columns(columns))
    chosen = default_format(fmt)
    terminal_limit = limit is None and chosen is Format.TABLE and output is None and sys.stdout.isatty()
    # One row past the terminal's limit tells whether rows were left out.
    wanted = TERMINAL_LIMIT + 1 if terminal_limit else limit
    schema = reading.output_schema
    with _sink(output) as sink:
        writer = RowWriter(schema, chosen, sink)
        splits = reading.plan()
        drawn: list[pa.RecordBatch] = []  # a terminal table is drawn once, at the end
        read = 0
        with progress_bar("reading splits") as progress:
            for done, split in enumerate(splits, start=1):
                if wanted is not None and read >= wanted:
                    break
                rows = reading.read_split(split).cast(schema)
                if wanted is not None:
                    rows = rows.slice(0, wanted - read)
                read += rows.num_rows
                if chosen is Format.TABLE:
                    drawn.extend(rows.to_batches())
                else:
                    writer.write(rows.to_batches())
                if progress is not None:
                    progress(done, len(splits))
        if chosen is Format.TABLE:
            if terminal_limit and read > TERMINAL_LIMIT:
                writer.footer = (f"the first {TERMINAL_LIMIT} rows, the default limit on a terminal: --limit N "
                                 "shows N (a pipe or --output gets every row)")
                drawn = pa.Table.from_batches(drawn, schema=schema).slice(0, TERMINAL_LIMIT).to_batches()
            writer.write(drawn)
        writer.close()


def changes(
    *,
    table: TableArg,
    start: Annotated[int, typer.Option("--from", help="Show the changes committed after snapshot N.",
                                       show_default=False)],
    end: Annotated[int | None, typer.Option("--to", help="Up to and including snapshot M (default: the latest).",
                                            show_default=False)] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing new changes until Ctrl-C.")] = False,
    poll_interval: Annotated[float, typer.Option(min=0.01, help="Seconds between polls with --follow.")] = 1.0,
    warehouse: WarehouseOpt = None,
    storage: StorageOpt = None,
    where: WhereOpt = None,
    columns: ColumnsOpt = None,
    fmt: FormatOpt = None,
    output: OutputOpt = None,
) -> None:
    """Print a table's changelog: a rowkind column (+I, -U, +U, -D) then the row, for the
    snapshots after --from up to --to (Paimon's incremental-between), or with --follow from
    there on as new snapshots are committed."""
    if follow and end is not None:
        raise UsageError("--follow reads on without end; give --to or --follow, not both")
    opened = load_table(table, warehouse, storage)
    row_filter, selected = _filter(opened, where), _columns(columns)
    chosen = default_format(fmt)
    with _sink(output) as sink:
        if not follow:
            latest = opened.latest_snapshot()
            read = opened.changes(start, end if end is not None else (latest.id if latest else 0),
                                  columns=selected, filter=row_filter)
            writer = RowWriter(read.schema, chosen, sink)
            if chosen is Format.TABLE:
                writer.write(read.to_batches())
            else:
                for batch in read.to_batches():
                    writer.write([batch])
            writer.close()
            return
        latest = opened.latest_snapshot()
        if start > (latest.id if latest else 0):
            raise UsageError(f"--from {start} is past the latest snapshot ({latest.id if latest else 'none yet'}): "
                             "--follow starts from a snapshot the table has")
        stream = opened.stream(mode="from-snapshot", snapshot_id=start + 1, columns=selected, filter=row_filter)
        writer = RowWriter(stream.schema, chosen, sink)
        # Ctrl-C ends the follow between polls. The SIGINT handler is set again before every poll:
        # a library call in a poll can leave another handler in place (pyarrow puts its own around
        # interruptible calls), and about one follow in 20 then ignored Ctrl-C for good.
        interrupted = threading.Event()

        def stopped() -> bool:
            signal.signal(signal.SIGINT, lambda *_: interrupted.set())
            return interrupted.is_set()

        try:
            for batch in stream.follow(poll_interval, stop=stopped):
                writer.title = f"snapshot {batch.snapshot_id}"
                writer.write(batch.data.to_batches())
        except KeyboardInterrupt:
            pass  # Ctrl-C before the first poll
        finally:
            writer.close()
