"""pypaimon as the interop oracle: open a table, commit rows with it."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pypaimon import CatalogFactory


def paimon_table(warehouse: str, name: str, options: dict[str, str] | None = None) -> Any:
    """pypaimon's handle of ``name`` (``options`` may time travel, e.g. scan.snapshot-id)."""
    table = CatalogFactory.create({"warehouse": warehouse}).get_table(name)
    return table.copy(options) if options else table


def paimon_write(warehouse: str, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    """One pypaimon batch commit of ``rows``."""
    builder = paimon_table(warehouse, name).new_batch_write_builder()
    write = builder.new_write()
    commit = builder.new_commit()
    try:
        write.write_arrow(pa.Table.from_pylist(rows, schema=schema))
        commit.commit(write.prepare_commit())
    finally:
        write.close()
        commit.close()
