"""Hand-offs of Arrow data to pandas, polars and DuckDB, whose libraries are optional extras.

Scans, change reads and change batches all produce Arrow; these functions are their one way to
other libraries. A library is imported when first asked for (``import changelake`` needs none of
them), and a missing one raises :class:`~changelake.errors.MissingExtraError` naming the extra.
"""

from __future__ import annotations

import abc
import importlib
from types import ModuleType
from typing import TYPE_CHECKING

import pyarrow as pa

from changelake.errors import MissingExtraError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import polars as pl


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import an optional library, or raise MissingExtraError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(f"{feature} needs {module}, which is not installed: "
                                f"pip install 'changelake[{extra}]'") from e


def to_pandas(data: pa.Table) -> pd.DataFrame:
    """A pandas DataFrame of ``data`` (converted by pyarrow)."""
    require("pandas", "pandas", "to_pandas()")
    frame: pd.DataFrame = data.to_pandas()
    return frame


def to_polars(data: pa.Table) -> pl.DataFrame:
    """A polars DataFrame sharing ``data``'s Arrow buffers (zero-copy where polars supports
    the type)."""
    polars = require("polars", "polars", "to_polars()")
    frame: pl.DataFrame = polars.from_arrow(data, rechunk=False)
    return frame


def to_duckdb(data: pa.Table, name: str, connection: duckdb.DuckDBPyConnection | None = None
              ) -> duckdb.DuckDBPyConnection:
    """Register ``data`` as view ``name`` on ``connection`` (default: a new in-memory
    database) and return the connection. DuckDB scans the Arrow buffers in place (no copy),
    and the view can be queried any number of times while the connection lives."""
    duck = require("duckdb", "duckdb", "to_duckdb()")
    con: duckdb.DuckDBPyConnection = duck.connect() if connection is None else connection
    con.register(name, data)
    return con


class ArrowExports(abc.ABC):
    """``to_pandas``, ``to_polars`` and ``to_duckdb`` for a read whose rows ``to_arrow()`` gives."""

    @abc.abstractmethod
    def to_arrow(self) -> pa.Table:
        """All the rows as one Arrow table."""

    def to_pandas(self) -> pd.DataFrame:
        """All the rows as a pandas DataFrame (extra ``changelake[pandas]``)."""
        return to_pandas(self.to_arrow())

    def to_polars(self) -> pl.DataFrame:
        """All the rows as a polars DataFrame over the same Arrow buffers (extra
        ``changelake[polars]``)."""
        return to_polars(self.to_arrow())

    def to_duckdb(self, name: str, connection: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        """Register the rows as DuckDB view ``name`` on ``connection`` (default: a new in-memory
        database) and return the connection; DuckDB reads the Arrow data in place (extra
        ``changelake[duckdb]``)."""
        return to_duckdb(self.to_arrow(), name, connection)
