"""MERGE INTO a table, built clause by clause as deltalake's ``TableMerger`` is, and executed
as one commit: in one process (``Table.merge``) or on Spark (``streaming.merge``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import pyarrow.compute as pc

from changelake.table.format.snapshot import Snapshot
from changelake.table.write.merge_rows import Clause, MergeAction, MergeCase

Condition: TypeAlias = "pc.Expression | str | None"


@dataclass(frozen=True)
class Merge:
    """A merge of ``source`` rows into a table, matched by its primary key (an append table's
    by the columns ``on`` names); the first clause whose condition holds decides each row.
    Conditions and values see ``source.<column>`` and ``target.<column>``
    (``pc.field("source.qty")``, or SQL-like text for conditions). Every method returns a new
    merge; :meth:`execute` runs it."""

    # Carries out the clauses (in one process or on Spark): the snapshot, None when no row changes.
    run: Callable[[tuple[Clause, ...]], Snapshot | None]
    clauses: tuple[Clause, ...] = ()

    def _with(self, clause: Clause) -> Merge:
        return dataclasses.replace(self, clauses=(*self.clauses, clause))

    def when_matched_update(self, set: Mapping[str, Any] | None = None, *, condition: Condition = None) -> Merge:
        """Update a table row a source row matches: the columns ``set`` maps (to values or
        expressions), or with ``set`` None every column the source has (``update all``)."""
        return self._with(Clause(MergeCase.MATCHED, MergeAction.UPDATE, condition, set))

    def when_matched_delete(self, condition: Condition = None) -> Merge:
        """Delete a table row a source row matches."""
        return self._with(Clause(MergeCase.MATCHED, MergeAction.DELETE, condition))

    def when_not_matched_insert(self, values: Mapping[str, Any] | None = None, *,
                                condition: Condition = None) -> Merge:
        """Insert a source row no table row matches: ``values`` for the columns it maps, the
        source's columns for the others (null where the source has none)."""
        return self._with(Clause(MergeCase.NOT_MATCHED, MergeAction.INSERT, condition, values))

    def when_not_matched_by_source_delete(self, condition: Condition = None) -> Merge:
        """Delete a table row no source row matches."""
        return self._with(Clause(MergeCase.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE, condition))

    def execute(self) -> Snapshot | None:
        """Run the merge as one commit; None when no row changes."""
        return self.run(self.clauses)
