"""changelake: Apache Paimon primary-key tables in pure Python."""

from changelake import errors
from changelake.api.catalog import Catalog, open_table
from changelake.api.scan import Scan, Split
from changelake.api.table import Table
from changelake.table.commit.committer import CommitMessage
from changelake.table.format.snapshot import Snapshot
from changelake.table.write.writer import TableWriter

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
