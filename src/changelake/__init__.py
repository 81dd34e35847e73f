"""changelake: Apache Paimon primary-key tables in pure Python."""

from changelake import errors
from changelake.table.catalog import Catalog, open_table
from changelake.table.commit import CommitMessage
from changelake.table.scan import Scan, Split
from changelake.table.snapshot import Snapshot
from changelake.table.table import Table
from changelake.table.write import TableWriter

__all__ = [
    "Catalog",
    "CommitMessage",
    "Scan",
    "Snapshot",
    "Split",
    "Table",
    "TableWriter",
    "errors",
    "open_table",
]
