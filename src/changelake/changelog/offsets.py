"""Positions in a table's change stream, the kinds of change reads, and read limits."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from changelake.errors import ScanError


class ChangeKind(enum.StrEnum):
    """Where the rows of a change batch come from."""

    # The first read of a ``*-full`` scan mode: a snapshot's merged rows, all as +I.
    FULL = "full"
    # Producer ``none``: an APPEND snapshot's new data files, rows with their stored kinds.
    DELTA = "delta"
    # The other producers: the changelog files a snapshot lists in its changelog manifest list.
    CHANGELOG = "changelog"
    # ``streaming-read-overwrite``: an OVERWRITE snapshot's removed files (their merged rows as
    # -D), then its added files (their merged rows as +I).
    OVERWRITE = "overwrite"


class StreamOffset(BaseModel):
    """A position in a change stream: the next row to read is row ``index`` of snapshot
    ``snapshot_id``'s read, its full read when ``scan_snapshot`` is set, else its changes.

    The JSON form has the fields of Paimon's Spark source offset (``snapshotId``, ``index``,
    ``scanSnapshot``); ``index`` counts rows already read from that snapshot (positions before
    any filter: an offset is valid for streams of the same table with the same filter and
    split options, ``source.split.*``, which shape a full read's units), and
    ``tableId`` names the table the offset belongs to (absent in offsets made elsewhere).
    A finished snapshot is the position ``(next snapshot, 0, False)``.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    snapshot_id: int = Field(alias="snapshotId", ge=1)
    index: int = Field(default=0, ge=0)
    scan_snapshot: bool = Field(default=False, alias="scanSnapshot")
    table_id: str | None = Field(default=None, alias="tableId")

    def to_json(self) -> str:
        """The offset as JSON with Paimon's field names."""
        return self.model_dump_json(by_alias=True, exclude_none=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> StreamOffset:
        """An offset from its JSON form (as :meth:`to_json` writes it)."""
        return cls.model_validate_json(text)


@dataclass(frozen=True)
class ReadLimit:
    """How much one plan may cover: rows (as stored, before merging or filtering) and files.
    A plan always covers at least one row when there is one to read, so streams progress."""

    max_rows: int | None = None
    max_files: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("max_rows", self.max_rows), ("max_files", self.max_files)):
            if value is not None and value <= 0:
                raise ScanError(f"read limit {name} must be positive, got {value}")
