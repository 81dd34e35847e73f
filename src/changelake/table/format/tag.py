"""Tag files (``tag/tag-<name>``): the tagged snapshot's JSON, plus Paimon's optional
``tagCreateTime`` and ``tagTimeRetained`` when the tag was created with a retention.

Paimon writes them with Jackson's Java-time defaults (``org.apache.paimon.tag.Tag``): the
creation time is a ``LocalDateTime`` as an array ``[year, month, day, hour, minute, second,
nanos]`` (trailing zeros left out), the retention a ``Duration`` as decimal seconds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import Field, ValidationError, field_serializer, field_validator

from changelake.errors import CorruptMetadataError
from changelake.table.format.snapshot import Snapshot


class Tag(Snapshot):
    """A tag: its snapshot, and when it was created and how long it is kept (both None for a
    tag created without a retention, which Paimon writes as the bare snapshot)."""

    tag_create_time: dt.datetime | None = Field(default=None, alias="tagCreateTime")
    tag_time_retained: dt.timedelta | None = Field(default=None, alias="tagTimeRetained")

    @field_validator("tag_create_time", mode="before")
    @classmethod
    def _from_java_array(cls, value: Any) -> Any:
        if isinstance(value, list):
            year, month, day, hour, minute, second, nanos = [*value, 0, 0, 0, 0, 0, 0, 0][:7]
            return dt.datetime(year, month, day, hour, minute, second, nanos // 1000)
        return value

    @field_serializer("tag_create_time")
    def _to_java_array(self, value: dt.datetime | None) -> list[int] | None:
        if value is None:
            return None
        parts = [value.year, value.month, value.day, value.hour, value.minute]
        nanos = value.microsecond * 1000
        if value.second or nanos:
            parts.append(value.second)
        if nanos:
            parts.append(nanos)
        return parts

    @field_serializer("tag_time_retained")
    def _to_seconds(self, value: dt.timedelta | None) -> float | None:
        return None if value is None else value.total_seconds()


def of(snapshot: Snapshot, *, time_retained: dt.timedelta | None, now: dt.datetime) -> Tag:
    """The tag of ``snapshot``; with a retention it records ``now`` (local wall-clock time, as
    Paimon's ``LocalDateTime.now()``) as its creation time."""
    fields = snapshot.model_dump()
    if time_retained is not None:
        fields.update(tag_create_time=now, tag_time_retained=time_retained)
    return Tag.model_validate(fields)


def parse(data: bytes, path: str) -> Tag:
    """A tag file's content; CorruptMetadataError naming the file if it is not one."""
    try:
        return Tag.model_validate_json(data)
    except ValidationError as exc:
        raise CorruptMetadataError(f"tag file is corrupt: {exc.errors()[0]['msg']}", file=path) from None
