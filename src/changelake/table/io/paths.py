"""Where a table's files live, and Paimon's partition directory names."""

from __future__ import annotations

import datetime as dt
import decimal
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from changelake.option_values import POSTPONE_BUCKET

_ESCAPED = set("\"#%'*/:=?\\{}[]^")
_EPOCH = dt.datetime(1970, 1, 1)


def escape(text: str) -> str:
    """Paimon's (Hive's) path escaping of a partition name or value."""
    return "".join(
        f"%{ord(c):02X}" if ord(c) < 32 or ord(c) == 127 or c in _ESCAPED else c for c in text
    )


def _java_float(value: float) -> str:
    """Java's ``Double.toString``: plain notation in [1e-3, 1e7), else ``d.dddE±n``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    digits = decimal.Decimal(repr(value))
    if 1e-3 <= abs(value) < 1e7:
        text = format(digits, "f")
        return text if "." in text else text + ".0"
    mantissa, exponent = format(digits.normalize(), "e").split("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}E{int(exponent)}"


def timestamp_parts(value: dt.datetime | int) -> tuple[dt.datetime, int]:
    """A timestamp (a datetime, or nanoseconds since the epoch, as TIMESTAMP(7..9) values
    decode) as its date and time to the second, zone-less (UTC for a zoned one), and its
    nanosecond of the second."""
    if isinstance(value, int):
        seconds, nanos = divmod(value, 1_000_000_000)
        return _EPOCH + dt.timedelta(seconds=seconds), nanos
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.replace(microsecond=0), value.microsecond * 1000


def timestamp_text(value: dt.datetime | int, precision: int) -> str:
    """Paimon's cast of a timestamp to STRING: ``2024-01-02 03:04:05.123``, the fraction's
    trailing zeros cut down to ``precision`` digits."""
    moment, nanos = timestamp_parts(value)
    fraction = f"{nanos:09d}"
    while len(fraction) > precision and fraction.endswith("0"):
        fraction = fraction[:-1]
    text = moment.isoformat(sep=" ", timespec="seconds")
    return f"{text}.{fraction}" if fraction else text


def local_date_time_text(value: dt.datetime | int) -> str:
    """Java's ``LocalDateTime.toString``: seconds only when not zero, the fraction in groups
    of 3 digits."""
    moment, nanos = timestamp_parts(value)
    if not nanos:
        return moment.isoformat(timespec="seconds" if moment.second else "minutes")
    fraction = f"{nanos:09d}"
    digits = 3 if nanos % 1_000_000 == 0 else 6 if nanos % 1000 == 0 else 9
    return f"{moment.isoformat(timespec='seconds')}.{fraction[:digits]}"


def partition_value_text(value: Any, arrow_type: pa.DataType, default_name: str, *, legacy: bool = True) -> str:
    """A partition value as Paimon writes it in directory names.

    With ``partition.legacy-name`` (Paimon's default) dates are day numbers, times are
    milliseconds and timestamps use Java's ``LocalDateTime.toString``; otherwise values are
    cast to strings as Paimon's SQL casts do.
    """
    if value is None:
        return default_name
    if pa.types.is_timestamp(arrow_type):
        if legacy:
            return local_date_time_text(value)
        return timestamp_text(value, {"s": 0, "ms": 3, "us": 6, "ns": 9}[arrow_type.unit])
    if legacy:
        if isinstance(value, dt.date):
            return str((value - dt.date(1970, 1, 1)).days)
        if isinstance(value, dt.time):
            return str(((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_float(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = str(value)
    return default_name if not text.strip() else text


def partition_path(
    keys: Sequence[str],
    values: Sequence[Any],
    arrow_types: Sequence[pa.DataType],
    default_name: str,
    *,
    legacy: bool = True,
) -> str:
    """``k1=v1/k2=v2`` with Paimon's escaping ('' for an unpartitioned table)."""
    return "/".join(
        f"{escape(k)}={escape(partition_value_text(v, t, default_name, legacy=legacy))}"
        for k, v, t in zip(keys, values, arrow_types, strict=True)
    )


@dataclass(frozen=True)
class TablePaths:
    """The directory layout of one table, or of one of its branches.

    A branch (Paimon's ``BranchManager.branchPath``) keeps its own snapshots, schemas, tags,
    changelogs and consumers under ``branch/branch-<name>/``; its manifests, index files and
    data files live with the table's, in the table's directories."""

    root: str
    branch: str | None = None

    @property
    def metadata_root(self) -> str:
        """Where the snapshots, schemas, tags, changelogs and consumers live."""
        return self.root if self.branch is None else f"{self.branch_dir}/branch-{self.branch}"

    @property
    def branch_dir(self) -> str:
        """The directory of the table's branches (``branch-<name>`` each)."""
        return f"{self.root}/branch"

    @property
    def snapshot_dir(self) -> str:
        return f"{self.metadata_root}/snapshot"

    def snapshot(self, snapshot_id: int) -> str:
        return f"{self.snapshot_dir}/snapshot-{snapshot_id}"

    @property
    def schema_dir(self) -> str:
        return f"{self.metadata_root}/schema"

    def schema(self, schema_id: int) -> str:
        return f"{self.schema_dir}/schema-{schema_id}"

    @property
    def manifest_dir(self) -> str:
        return f"{self.root}/manifest"

    def manifest(self, name: str) -> str:
        return f"{self.root}/manifest/{name}"

    @property
    def index_dir(self) -> str:
        return f"{self.root}/index"

    def index(self, name: str) -> str:
        """An index file (deletion vectors of a bucket): ``index/index-<uuid>-<n>``."""
        return f"{self.root}/index/{name}"

    @property
    def tag_dir(self) -> str:
        return f"{self.metadata_root}/tag"

    def tag(self, name: str) -> str:
        return f"{self.tag_dir}/tag-{name}"

    @property
    def changelog_dir(self) -> str:
        return f"{self.metadata_root}/changelog"

    def changelog(self, snapshot_id: int) -> str:
        """A decoupled changelog: the JSON of an expired snapshot whose changelog is kept."""
        return f"{self.changelog_dir}/changelog-{snapshot_id}"

    @property
    def consumer_dir(self) -> str:
        return f"{self.metadata_root}/consumer"

    def consumer(self, consumer_id: str) -> str:
        return f"{self.consumer_dir}/consumer-{consumer_id}"

    @property
    def commit_user_dir(self) -> str:
        """changelake's own (other engines ignore it): the last commit of each commit user
        whose snapshots expired, ``commit-user/user-<quoted user>/snapshot-<id>``."""
        return f"{self.metadata_root}/commit-user"

    def commit_user(self, commit_user: str) -> str:
        """The directory of one commit user's record (the name quoted whole: any user is one
        directory name)."""
        return f"{self.commit_user_dir}/user-{urllib.parse.quote(commit_user, safe='')}"

    def data_root(self, directory: str | None = None) -> str:
        """Where the partition and bucket directories are: the root, or its subdirectory
        ``directory`` (``data-file.path-directory``)."""
        return self.root if not directory else f"{self.root}/{directory.strip('/')}"

    def bucket_dir(self, partition: str, bucket: int, *, directory: str | None = None) -> str:
        """A bucket's directory (``partition`` its partition's, '' when unpartitioned), under
        the data directory ``directory`` when given."""
        name = "bucket-postpone" if bucket == POSTPONE_BUCKET else f"bucket-{bucket}"
        root = self.data_root(directory)
        return f"{root}/{partition}/{name}" if partition else f"{root}/{name}"
