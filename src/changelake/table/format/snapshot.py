"""Snapshots: the JSON files that define each version of a table, and how to find them."""

from __future__ import annotations

import enum
import json
import logging
import random
import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from changelake.errors import CorruptMetadataError, SnapshotNotFoundError, StorageError
from changelake.table.io import killpoints
from changelake.table.io.fileio import FileIO
from changelake.table.io.killpoints import KillPoint
from changelake.table.io.paths import TablePaths

BATCH_COMMIT_IDENTIFIER = 2**63 - 1
_SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)$")
LATEST = "LATEST"
EARLIEST = "EARLIEST"
# A hint write is tried this many times, as Paimon's HintFileUtils.commitHint does. Paimon waits
# 0.5 to 1.5 s between tries; a put reaches us only after the client's own retries backed off
# for seconds, so a tenth of that is waited here.
HINT_ATTEMPTS = 3
HINT_RETRY_WAIT_S = (0.05, 0.15)

_log = logging.getLogger(__name__)


class CommitKind(enum.StrEnum):
    """What a snapshot's commit did."""

    APPEND = "APPEND"
    COMPACT = "COMPACT"
    OVERWRITE = "OVERWRITE"
    ANALYZE = "ANALYZE"


class Snapshot(BaseModel):
    """One version of a table (Paimon snapshot format 3). Unknown fields are ignored."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    version: int = 3
    id: int
    schema_id: int = Field(alias="schemaId")
    base_manifest_list: str = Field(alias="baseManifestList")
    base_manifest_list_size: int | None = Field(default=None, alias="baseManifestListSize")
    delta_manifest_list: str = Field(alias="deltaManifestList")
    delta_manifest_list_size: int | None = Field(default=None, alias="deltaManifestListSize")
    changelog_manifest_list: str | None = Field(default=None, alias="changelogManifestList")
    changelog_manifest_list_size: int | None = Field(default=None, alias="changelogManifestListSize")
    index_manifest: str | None = Field(default=None, alias="indexManifest")
    commit_user: str = Field(alias="commitUser")
    commit_identifier: int = Field(alias="commitIdentifier")
    commit_kind: CommitKind = Field(alias="commitKind")
    time_millis: int = Field(alias="timeMillis")
    log_offsets: dict[int, int] | None = Field(default=None, alias="logOffsets")
    total_record_count: int | None = Field(default=None, alias="totalRecordCount")
    delta_record_count: int | None = Field(default=None, alias="deltaRecordCount")
    changelog_record_count: int | None = Field(default=None, alias="changelogRecordCount")
    watermark: int | None = None
    statistics: str | None = None
    properties: dict[str, str] | None = None
    # row tracking's next row id (written by Paimon tables with row-tracking.enabled)
    next_row_id: int | None = Field(default=None, alias="nextRowId")

    def to_json(self) -> str:
        data: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True)
        data.setdefault("changelogManifestList", None)
        return json.dumps(data, indent=2)


def parse(data: bytes, path: str) -> Snapshot:
    try:
        return Snapshot.model_validate_json(data)
    except ValidationError as exc:
        raise CorruptMetadataError(f"snapshot file is corrupt: {exc.errors()[0]['msg']}", file=path) from None


def read(file_io: FileIO, paths: TablePaths, snapshot_id: int, table_name: str) -> Snapshot:
    """Snapshot ``snapshot_id``; SnapshotNotFoundError if there is no such file."""
    path = paths.snapshot(snapshot_id)
    try:
        data = file_io.read_bytes(path)
    except FileNotFoundError:
        raise SnapshotNotFoundError(f"snapshot {snapshot_id} does not exist ({path})", table=table_name) from None
    return parse(data, path)


def list_ids(file_io: FileIO, paths: TablePaths) -> list[int]:
    """Ids of every snapshot file present, ascending."""
    ids = []
    for name in file_io.list_names(paths.snapshot_dir):
        match = _SNAPSHOT_FILE.match(name)
        if match:
            ids.append(int(match.group(1)))
    return sorted(ids)


def _hint(file_io: FileIO, paths: TablePaths, name: str) -> int | None:
    try:
        return int(file_io.read_text(f"{paths.snapshot_dir}/{name}").strip())
    except (FileNotFoundError, ValueError):
        return None


def latest_id(file_io: FileIO, paths: TablePaths) -> int | None:
    """Id of the newest snapshot. LATEST is only a hint (a slow committer may write it late):
    it is verified and walked forward, else the snapshot files are listed (Paimon's
    HintFileUtils.findLatest).

    Under concurrent expiry the walk is checked once more at its end: expiry deletes snapshots
    oldest first (Paimon's ExpireSnapshotsImpl, and ours), so when the walk stopped because
    expiry had just deleted the next snapshot, the snapshot it stopped on is gone too by then,
    and the listing answers instead of an id long expired."""
    hint = _hint(file_io, paths, LATEST)
    if hint is not None and file_io.exists(paths.snapshot(hint)):
        current = hint
        while file_io.exists(paths.snapshot(current + 1)):
            current += 1
        if file_io.exists(paths.snapshot(current)):
            return current
    ids = list_ids(file_io, paths)
    return ids[-1] if ids else None


def earliest_id(file_io: FileIO, paths: TablePaths) -> int | None:
    """Id of the oldest snapshot still present (EARLIEST hint verified, else a listing)."""
    hint = _hint(file_io, paths, EARLIEST)
    if (
        hint is not None
        and file_io.exists(paths.snapshot(hint))
        and (hint == 1 or not file_io.exists(paths.snapshot(hint - 1)))
    ):
        return hint
    ids = list_ids(file_io, paths)
    return ids[0] if ids else None


def try_commit(file_io: FileIO, paths: TablePaths, snapshot: Snapshot) -> bool:
    """Atomically create the snapshot file; False if another commit took that id first
    (CommitOutcomeUnknownError if the store never said). Once the file exists the commit has
    landed: the hints that follow cannot fail it."""
    if not file_io.create_if_absent(paths.snapshot(snapshot.id), snapshot.to_json().encode("utf-8")):
        return False
    killpoints.reached(KillPoint.SNAPSHOT_BEFORE_LATEST)
    try:  # nothing raised from here may make a caller take the commit for failed and clean up
        commit_hint(file_io, paths, LATEST, snapshot.id)
        if snapshot.id == 1 or _hint(file_io, paths, EARLIEST) is None:
            commit_hint(file_io, paths, EARLIEST, earliest_id(file_io, paths) or snapshot.id)
    except Exception as exc:
        _log.warning("snapshot %d landed, but its hints were not all written: %s", snapshot.id, exc)
    return True


def commit_hint(file_io: FileIO, paths: TablePaths, name: str, snapshot_id: int) -> bool:
    """Write the snapshot hint ``name`` (LATEST or EARLIEST), tried up to ``HINT_ATTEMPTS``
    times (Paimon's HintFileUtils.commitHint). A hint is advisory (:func:`latest_id` and
    :func:`earliest_id` verify it), and it is written after something landed, so a write that
    fails every time is logged, not raised. Returns whether the hint was written."""
    path = f"{paths.snapshot_dir}/{name}"
    for attempt in range(1, HINT_ATTEMPTS + 1):
        try:
            file_io.overwrite_hint(path, str(snapshot_id))
            return True
        except StorageError as exc:
            failure = exc
        if attempt < HINT_ATTEMPTS:
            killpoints.reached(KillPoint.HINT_RETRY)
            time.sleep(random.uniform(*HINT_RETRY_WAIT_S))
    _log.warning("the %s hint was not updated to snapshot %d (readers list the snapshots instead): %s",
                 name, snapshot_id, failure)
    return False
