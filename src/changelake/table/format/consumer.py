"""Consumer files (``consumer/consumer-<id>``): a named stream's progress in Paimon's format
(``org.apache.paimon.consumer.Consumer``), ``{"nextSnapshot": N}``, the next snapshot whose
changes the consumer has not read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from changelake.errors import CorruptMetadataError
from changelake.table.io.fileio import FileIO
from changelake.table.io.paths import TablePaths

_PREFIX = "consumer-"


class Consumer(BaseModel):
    """A consumer file's content (fields other engines add are ignored)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    next_snapshot: StrictInt = Field(alias="nextSnapshot")


def ids(file_io: FileIO, paths: TablePaths) -> list[str]:
    """The ids of the consumers present, sorted (temp files of a write left out)."""
    return sorted(n[len(_PREFIX):] for n in file_io.list_names(paths.consumer_dir)
                  if n.startswith(_PREFIX) and not n.endswith(".tmp"))


def read(file_io: FileIO, paths: TablePaths, consumer_id: str, table_name: str) -> int | None:
    """The consumer's next snapshot; None when there is no such consumer, CorruptMetadataError
    naming the file when it holds no snapshot id."""
    path = paths.consumer(consumer_id)
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        return Consumer.model_validate_json(data).next_snapshot
    except ValidationError as exc:
        raise CorruptMetadataError(f"consumer file is corrupt: {exc.errors()[0]['msg']}", table=table_name,
                                   file=path) from None


def write(file_io: FileIO, paths: TablePaths, consumer_id: str, next_snapshot: int) -> None:
    """Record that the consumer reads ``next_snapshot`` next (the file replaced whole, so a
    reader never sees half of it)."""
    file_io.makedirs(paths.consumer_dir)
    file_io.overwrite_hint(paths.consumer(consumer_id),
                           Consumer(nextSnapshot=next_snapshot).model_dump_json(by_alias=True))
