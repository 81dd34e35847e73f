"""Writing rows in the output formats: a rich table on a terminal, CSV, JSON lines, Parquet."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import io
import json
import sys
from collections.abc import Iterable
from typing import BinaryIO

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from changelake.cli.common import UsageError


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


def _json_value(value: object) -> object:
    if isinstance(value, dt.date | dt.time | dt.datetime | decimal.Decimal | dt.timedelta):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


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
        self.rows = 0
        self._sink: BinaryIO = sink if sink is not None else sys.stdout.buffer
        text = sys.stdout if sink is None else io.TextIOWrapper(sink, write_through=True)
        self._console = Console(file=text, soft_wrap=False)
        self._csv: pa_csv.CSVWriter | None = None
        self._parquet: pq.ParquetWriter | None = None

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        """Write these rows now (a table format draws them as one table)."""
        table = pa.Table.from_batches(list(batches), schema=self.schema)
        self.rows += table.num_rows
        if self.format is Format.TABLE:
            self._draw(table)
        elif self.format is Format.CSV:
            if self._csv is None:
                self._csv = pa_csv.CSVWriter(self._sink, self.schema)
            self._csv.write_table(table)
            self._sink.flush()
        elif self.format is Format.JSON:
            for row in table.to_pylist():
                self._sink.write(json.dumps(row, default=_json_value).encode() + b"\n")
            self._sink.flush()
        else:
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._sink, self.schema)
            self._parquet.write_table(table)

    def _draw(self, table: pa.Table) -> None:
        grid = RichTable(title=self.title, show_lines=False)
        for field in self.schema:
            grid.add_column(field.name, justify="right" if pa.types.is_integer(field.type)
                            or pa.types.is_floating(field.type) or pa.types.is_decimal(field.type) else "left")
        for row in table.to_pylist():
            grid.add_row(*(_cell(row[name]) for name in self.schema.names))
        self._console.print(grid)

    def close(self) -> None:
        """Finish the file formats (an empty result still gets a CSV header / Parquet schema)."""
        if self.format is Format.CSV and self._csv is None:
            self._csv = pa_csv.CSVWriter(self._sink, self.schema)
        if self.format is Format.PARQUET and self._parquet is None:
            self._parquet = pq.ParquetWriter(self._sink, self.schema)
        if self._csv is not None:
            self._csv.close()
        if self._parquet is not None:
            self._parquet.close()
        self._sink.flush()
