"""Writing rows in the output formats: a rich table on a terminal, CSV, JSON lines, Parquet
(values made printable by :mod:`.printable`)."""

from __future__ import annotations

import enum
import io
import sys
from collections.abc import Iterable
from typing import BinaryIO, TextIO

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from changelake.cli.common import UsageError
from changelake.cli.printable import for_csv, for_json, for_terminal, json_text

# Width of a rich table that is not drawn on a terminal: whole lines, however wide (rich would
# cut them at 80 columns in a pipe or a file).
_UNBOUNDED = 1_000_000


class Format(enum.StrEnum):
    """How rows are printed."""

    TABLE = "table"
    CSV = "csv"
    JSON = "json"
    PARQUET = "parquet"


def default_format(given: Format | None) -> Format:
    """The given format, else a table on a terminal and CSV in a pipe."""
    if given is not None:
        return given
    return Format.TABLE if sys.stdout.isatty() else Format.CSV


def console(file: TextIO | None = None) -> Console:
    """A rich console writing to ``file`` (default stdout): as wide as the terminal on one,
    unbounded elsewhere."""
    target = sys.stdout if file is None else file
    return Console(file=target, soft_wrap=False, width=None if target.isatty() else _UNBOUNDED)


def _cell(value: object) -> Text:
    """A value as plain text (never read as rich markup)."""
    return Text("NULL", style="dim") if value is None else Text(str(value))


class RowWriter:
    """Writes batches of one schema as they come (a follow prints each as it arrives)."""

    def __init__(self, schema: pa.Schema, fmt: Format, sink: BinaryIO | None, *, title: str | None = None) -> None:
        if fmt is Format.PARQUET and sink is None:
            raise UsageError("--format parquet needs --output FILE")
        self.schema = schema
        self.format = fmt
        self.title = title
        self.footer: str | None = None  # a line under a terminal table
        self.rows = 0
        self._sink: BinaryIO = sink if sink is not None else sys.stdout.buffer
        self._console = console(None if sink is None else io.TextIOWrapper(sink, write_through=True))
        self._csv: pa_csv.CSVWriter | None = None
        self._parquet: pq.ParquetWriter | None = None

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        """Write these rows now (a table format draws them as one table)."""
        table = pa.Table.from_batches(list(batches), schema=self.schema)
        self.rows += table.num_rows
        if self.format is Format.TABLE:
            self._draw(table)
        elif self.format is Format.CSV:
            self._csv_writer().write_table(for_csv(table))
            self._sink.flush()
        elif self.format is Format.JSON:
            self._sink.write(b"".join(json_text(row).encode() + b"\n" for row in for_json(table).to_pylist()))
            self._sink.flush()
        else:
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._sink, self.schema)
            self._parquet.write_table(table)

    def _csv_writer(self) -> pa_csv.CSVWriter:
        if self._csv is None:
            self._csv = pa_csv.CSVWriter(self._sink, for_csv(self.schema.empty_table()).schema)
        return self._csv

    def _draw(self, table: pa.Table) -> None:
        grid = RichTable(title=self.title, show_lines=False)
        for field in self.schema:
            grid.add_column(field.name, justify="right" if pa.types.is_integer(field.type)
                            or pa.types.is_floating(field.type) or pa.types.is_decimal(field.type) else "left")
        for row in for_terminal(table).to_pylist():
            grid.add_row(*(_cell(row[name]) for name in self.schema.names))
        self._console.print(grid)
        if self.footer is not None:
            self._console.print(Text(self.footer, style="dim"))

    def close(self) -> None:
        """Finish the file formats (an empty result still gets a CSV header / Parquet schema)."""
        if self.format is Format.CSV:
            self._csv_writer()
        if self.format is Format.PARQUET and self._parquet is None:
            self._parquet = pq.ParquetWriter(self._sink, self.schema)
        if self._csv is not None:
            self._csv.close()
        if self._parquet is not None:
            self._parquet.close()
        self._sink.flush()
