"""``with table.update_schema() as u:``: column changes gathered in a block, landing together."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

import pyarrow as pa

from changelake.table.context import TableContext
from changelake.table.schema_update import AddColumn, DropColumn, RenameColumn, SchemaChange, WidenColumn, commit


class UpdateSchema:
    """Column changes of one ``with`` block (pyiceberg's shape). On a clean exit they are
    validated together and land as one new schema; an exception in the block, or any change
    refused (SchemaError, OptionError), writes nothing."""

    def __init__(self, context: TableContext, on_commit: Callable[[TableContext], None]) -> None:
        self._context = context
        self._on_commit = on_commit
        self._changes: list[SchemaChange] = []

    def add_column(self, name: str, type: pa.DataType, *, after: str | None = None,
                   doc: str | None = None) -> UpdateSchema:
        """A new nullable column, at the end (or right after column ``after``); rows written
        before read it as null."""
        self._changes.append(AddColumn(name, type, after, doc))
        return self

    def drop_column(self, name: str) -> UpdateSchema:
        """Remove a value column (not a primary-key or partition column)."""
        self._changes.append(DropColumn(name))
        return self

    def rename_column(self, old: str, new: str) -> UpdateSchema:
        """Rename a column other than a partition column (a primary key too, as Paimon does); the
        options that name it follow where Paimon's rename has them follow."""
        self._changes.append(RenameColumn(old, new))
        return self

    def update_column(self, name: str, type: pa.DataType) -> UpdateSchema:
        """Widen a value column's type: int8 -> int16 -> int32 -> int64, float32 -> float64, or a
        decimal to a higher precision at the same scale."""
        self._changes.append(WidenColumn(name, type))
        return self

    def commit(self) -> None:
        """Land the changes gathered so far as one schema (the ``with`` block does this)."""
        changes, self._changes = self._changes, []
        if changes:
            self._context = commit(self._context, changes)
            self._on_commit(self._context)

    def __enter__(self) -> UpdateSchema:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None:
            self.commit()
