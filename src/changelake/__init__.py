"""changelake: Apache Paimon primary-key tables in pure Python."""

from changelake import errors
from changelake.api.catalog import Catalog, open_table
from changelake.api.merge import Merge
from changelake.api.scan import Scan
from changelake.api.schema_update import UpdateSchema
from changelake.api.table import Table
from changelake.api.writer import TableWriter
from changelake.changelog.offsets import ChangeKind, ReadLimit, StreamOffset
from changelake.changelog.source import ChangeChunk, ChangePlan, ChangeSource, ChangeSplit
from changelake.changelog.stream import ChangeBatch, Changes, ChangeStream
from changelake.option_values import ChangelogProducer, LookupCompactMode, MergeEngineKind, ScanMode
from changelake.options import TableOptions
from changelake.table.commit.message import CommitMessage
from changelake.table.format.kv import RowKind
from changelake.table.format.snapshot import CommitKind, Snapshot
from changelake.table.io.atomic import CommitLock
from changelake.table.lsm.bucket_tree import BucketInspection
from changelake.table.lsm.inspection import TableInspection
from changelake.table.lsm.universal import PickRule
from changelake.table.read.planner import Split
from changelake.table.snapshot_expiry import ExpireResult

__all__ = [
    "BucketInspection",
    "Catalog",
    "ChangeBatch",
    "ChangeChunk",
    "ChangeKind",
    "ChangePlan",
    "ChangeSource",
    "ChangeSplit",
    "ChangeStream",
    "ChangelogProducer",
    "Changes",
    "CommitKind",
    "CommitLock",
    "CommitMessage",
    "ExpireResult",
    "LookupCompactMode",
    "Merge",
    "MergeEngineKind",
    "PickRule",
    "ReadLimit",
    "RowKind",
    "Scan",
    "ScanMode",
    "Snapshot",
    "Split",
    "StreamOffset",
    "Table",
    "TableInspection",
    "TableOptions",
    "TableWriter",
    "UpdateSchema",
    "errors",
    "open_table",
]
