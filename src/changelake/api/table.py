"""The user-facing table: metadata, time travel, tags, scans, writes and compaction."""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from changelake.api import system_tables
from changelake.api.merge import Merge
from changelake.api.scan import Scan
from changelake.api.schema_update import UpdateSchema
from changelake.api.table_history import Progress, TableHistory
from changelake.api.writer import TableWriter, open_write
from changelake.changelog import producers
from changelake.changelog.offsets import StreamOffset
from changelake.changelog.source import DEFAULT_MAX_ROWS, ChangeSource
from changelake.changelog.stream import Changes, ChangeStream
from changelake.option_values import LookupCompactMode, ScanMode, TimeTravelSchema
from changelake.table import metadata, partition_drops, partition_expiry, schema_update, snapshot_expiry
from changelake.table.append import compaction as append_compaction
from changelake.table.append import merge as append_merge
from changelake.table.append import row_level as append_rows
from changelake.table.commit import committer
from changelake.table.context import TableContext
from changelake.table.format.schema import TableKind
from changelake.table.format.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from changelake.table.lsm import compactor, inspection
from changelake.table.lsm.inspection import TableInspection
from changelake.table.maintenance import orphans, rescale
from changelake.table.write import conform, merge_rows, overwrite_rows, postpone, postpone_compaction, row_level
from changelake.table.write.merge_rows import Clause

if TYPE_CHECKING:
    import pyarrow.compute as pc

    from changelake.table.write.conform import WriteInput

class Table(TableHistory):
    """A Paimon table in a directory (local path or any fsspec URL): a primary-key table, or
    an append table (no primary key).

    Cheap to pickle: it carries its name, file IO, location and schema, never open handles.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (Table, (self._context,))

    def __repr__(self) -> str:
        return f"Table({self.name!r}, {self.location!r})"

    @property
    def context(self) -> TableContext:
        """The storage engine's view of this table (for engine-level code: Spark tasks, tools)."""
        return self._context

    # -- metadata ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``database.table``."""
        return self._context.name

    @property
    def schema(self) -> pa.Schema:
        """Arrow schema of the table's rows."""
        return self._context.arrow_schema

    @property
    def options(self) -> Mapping[str, str]:
        """The table's options exactly as stored (Paimon names)."""
        return dict(self._context.schema.options)

    @property
    def primary_keys(self) -> list[str]:
        """Primary-key columns."""
        return list(self._context.primary_keys)

    @property
    def partition_keys(self) -> list[str]:
        """Partition columns."""
        return list(self._context.partition_keys)

    @property
    def location(self) -> str:
        """The table directory: a local path, or a URL (``s3://...``) that ``open_table`` takes
        back (with the same storage options)."""
        return self._context.file_io.url(self._context.paths.root)

    # -- schema evolution -----------------------------------------------------------------

    def update_schema(self) -> UpdateSchema:
        """Column changes as a block: ``with table.update_schema() as u: u.add_column(...)``.
        They land as one new schema when the block ends; this Table then works on it (readers
        and writers opened before keep their schema: files carry theirs, and reads map every
        file to the reader's schema by field id)."""
        return UpdateSchema(self._context, self._use)

    def set_options(self, options: Mapping[str, str]) -> None:
        """Change table options as a new schema; OptionError for an option Paimon (or
        changelake) cannot change on an existing table, or an unknown or invalid one."""
        self._use(schema_update.commit(self._context, [schema_update.SetOptions(dict(options))]))

    def reset_options(self, keys: Sequence[str]) -> None:
        """Remove table options (back to their defaults) as a new schema."""
        self._use(schema_update.commit(self._context, [schema_update.ResetOptions(tuple(keys))]))

    def refresh(self) -> None:
        """Move to the table's newest schema (after another process changed it)."""
        self._use(metadata.reopened(self._context))

    # -- reads and writes -------------------------------------------------------------------

    def scan(
        self,
        snapshot_id: int | None = None,
        *,
        tag: str | None = None,
        timestamp_ms: int | None = None,
        filter: pc.Expression | str | None = None,
        columns: Sequence[str] | None = None,
        read_optimized: bool = False,
        time_travel_schema: TimeTravelSchema | str | None = None,
    ) -> Scan:
        """A merged read of one snapshot (default the latest; or by id, a tag's, or the latest
        committed at or before ``timestamp_ms``). ``filter`` is a ``pyarrow.compute``
        expression on the table's columns (``pc.field("dt") == "2024-01-01"``) or the same as
        SQL-like text (``"dt = '2024-01-01' AND amount > 10.5"``, :meth:`Scan.filter`);
        partition and primary-key terms prune files, the rest filters rows after the merge. ``columns``
        picks and orders the columns. The result is an immutable builder: ``.filter()``,
        ``.select()``, ``.at_snapshot()`` and friends return new scans; ``.to_arrow()``,
        ``.to_batches()``, ``.to_pandas()``, ``.to_polars()``, ``.to_duckdb()`` read it.
        ``read_optimized`` reads only the fully compacted top level (no merge; rows written
        since the last full compaction are not seen), as Paimon's ``$ro`` table does. A snapshot
        chosen by id, tag or time is read in the schema it was committed with, as Paimon reads
        it; ``time_travel_schema="latest"`` (or the table option ``scan.time-travel.schema``)
        reads it in the table's schema instead (docs/schema-evolution.md)."""
        return Scan.of(self._context, snapshot_id=snapshot_id, tag=tag, timestamp_ms=timestamp_ms,
                       filter=filter, columns=columns, read_optimized=read_optimized,
                       time_travel_schema=time_travel_schema)

    def stream(
        self,
        *,
        mode: ScanMode | str | None = None,
        snapshot_id: int | None = None,
        timestamp_ms: int | None = None,
        tag: str | None = None,
        consumer_id: str | None = None,
        offset: StreamOffset | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | str | None = None,
        options: Mapping[str, str] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        commit_metadata: bool = False,
    ) -> ChangeStream:
        """The table's changes as a stream of :class:`ChangeBatch` items (``rowkind`` then the
        columns), read as Paimon's streaming read does.

        Where it starts: at ``offset`` (a :class:`StreamOffset` saved from an earlier stream's
        ``.offset``), else where consumer ``consumer_id`` last recorded its progress, else by
        ``mode`` (a :class:`ScanMode` or its Paimon name): ``latest-full`` (the default: the
        latest snapshot's rows as +I, then every change after it), ``latest`` (only changes
        committed from now on), ``full``, ``compacted-full`` (the latest full compaction's rows,
        then changes), ``from-snapshot`` / ``from-snapshot-full`` (``snapshot_id`` or ``tag``),
        ``from-timestamp`` (``timestamp_ms``). A snapshot id or tag alone means
        ``from-snapshot``, a time alone ``from-timestamp``. ``options`` takes Paimon option
        names (``scan.mode``, ``scan.snapshot-id``, ``scan.timestamp-millis``, ``consumer-id``,
        ``changelog-producer.row-deduplicate``, ...; unknown keys are an error); the
        arguments override them. ``columns`` and ``filter`` (a ``pyarrow.compute``
        expression or SQL-like text, as :meth:`scan` takes) narrow every batch. Batches hold
        at most ``max_rows`` rows. The changes are the changelog producer's (``none``: the rows
        as written; ``input``, ``lookup``, ``full-compaction``: complete +I/-U/+U/-D; the
        README's "What is implemented" says how). ``commit_metadata`` adds each row's
        ``_commit_snapshot`` and ``_commit_timestamp`` (the snapshot a full read read)."""
        overrides = dict(options or {})
        for key, value in (("scan.mode", mode), ("scan.snapshot-id", snapshot_id),
                           ("scan.timestamp-millis", timestamp_ms), ("scan.tag-name", tag),
                           ("consumer-id", consumer_id)):
            if value is not None:
                overrides[key] = str(value)
        source = ChangeSource.of(self._context, overrides, columns, filter, commit_metadata=commit_metadata)
        return ChangeStream(source, offset, max_rows=max_rows)

    def changes(
        self,
        start_snapshot: int,
        end_snapshot: int,
        *,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | str | None = None,
        commit_metadata: bool = False,
    ) -> Changes:
        """The changes of the snapshots after ``start_snapshot`` up to ``end_snapshot``
        (Paimon's ``incremental-between``), read with ``.to_arrow()`` or ``.to_batches()``;
        ``commit_metadata`` adds each row's ``_commit_snapshot`` and ``_commit_timestamp``."""
        source = ChangeSource.of(self._context, None, columns, filter, commit_metadata=commit_metadata)
        return Changes.of(source, start_snapshot, end_snapshot)

    def writer(self, commit_user: str | None = None) -> TableWriter:
        """A writer whose ``commit(identifier)`` lands each identifier at most once per user,
        also once expiry deleted the user's snapshots (docs/maintenance.md has the exact
        guarantee). Give a stable ``commit_user`` to keep that across restarts."""
        return TableWriter(open_write(self._context, commit_user or str(uuid.uuid4())))

    def write(self, data: WriteInput, *, merge_schema: bool = False) -> Snapshot | None:
        """Write rows as one commit and return the new snapshot (None when ``data`` is empty).

        ``data`` is a ``pyarrow.Table``, ``RecordBatch``, ``RecordBatchReader`` (taken batch by
        batch, never read whole) or pandas ``DataFrame``. Its columns are the table's, by name
        in any order (columns a schema change added may be left out: they are null); values are
        cast to the table's types within a kind (integers to wider or narrower integers when
        they fit, strings to strings, ...), never across kinds. A ``rowkind`` column of
        ``+I``/``-U``/``+U``/``-D`` strings (or the table's ``rowkind.field``) gives each row's
        kind, else every row is ``+I``. Bad input (a missing, extra or repeated column, a value
        that does not cast safely, a null in a primary-key or NOT NULL column, an unknown row
        kind) raises an error that names the table and column, and writes nothing.

        With ``merge_schema`` (or the table option ``write.merge-schema``), columns of ``data``
        the table lacks are added and columns ``data`` holds in a wider type are widened, as one
        schema change before the rows land (Paimon's schema merge on write).

        A commit that landed is never reported as failed, so a write that raised StorageError
        can be retried; after CommitOutcomeUnknownError, only once its snapshot is known not to
        have landed (docs/storage.md)."""
        if merge_schema or self._context.options.write_merge_schema:
            if not isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
                data = conform.to_arrow(data, self.name)  # converted once, for the schema and the write
            changes = schema_update.merged_changes(self._context, data.schema, ignore=(conform.ROWKIND_COLUMN,))
            if changes:
                self._use(schema_update.commit(self._context, changes))
        if postpone.is_postpone(self._context) and self._context.options.postpone_batch_write_fixed_bucket:
            return postpone.write_fixed_buckets(self._context, data, str(uuid.uuid4()), BATCH_COMMIT_IDENTIFIER,
                                                changelog_for=producers.for_table)
        with open_write(self._context, str(uuid.uuid4()), one_shot=True) as writer:
            writer.write(data)
            landed = writer.commit(BATCH_COMMIT_IDENTIFIER)
        return landed[0] if landed else None

    def compact(self, *, full: bool = False, partitions: list[dict[str, Any]] | None = None,
                progress: Progress | None = None) -> Snapshot | None:
        """Compact the table's buckets now (all, or those of ``partitions``, each a dict of
        partition values) as a COMPACT snapshot; ``full`` merges every bucket into its top
        level. An append table's small files are joined as Paimon joins them
        (docs/append-tables.md). Tables whose writers force level 0 up (deletion vectors, first-row, the
        ``lookup`` producer) have it moved up, with ``lookup-compact`` gentle too. Returns None
        when there was nothing to compact. ``progress`` gets (buckets done, buckets)."""
        commit_user = str(uuid.uuid4())
        if postpone.is_postpone(self._context):
            # Postpone-bucket tables: the rows waiting in bucket-postpone/ move into real buckets.
            landed = postpone_compaction.compact(self._context, commit_user, full=full, partitions=partitions,
                                                 changelog_for=producers.for_table, progress=progress)
        else:
            if self._context.kind is TableKind.APPEND:
                messages = append_compaction.compact_table(self._context, full=full, partitions=partitions,
                                                           progress=progress)
            else:
                messages = compactor.compact_table(self._context, full=full, partitions=partitions,
                                                   changelog=producers.for_table(self._context), progress=progress)
            landed = committer.commit(self._context, messages, commit_user, BATCH_COMMIT_IDENTIFIER) \
                if messages else []
        if landed:
            snapshot_expiry.expire_after_commit(self._context)
        return landed[0] if landed else None

    def rescale(self, *, bucket: int | None = None, partitions: list[dict[str, Any]] | None = None,
                progress: Progress | None = None) -> Snapshot | None:
        """Rewrite partitions (all, or ``partitions``, each a dict of partition values) with
        ``bucket`` buckets (default: the table's ``bucket``) as one OVERWRITE snapshot, as
        Paimon's ``rescale`` procedure: a ``bucket`` other than the table's becomes the table's
        ``bucket`` first (a new schema, as ``ALTER TABLE ... SET ('bucket' = 'N')``), so writes
        to the rescaled partitions and to new ones use it; partitions left out keep their number
        and are written again only once rescaled. Rows stay as they are (merged, at the top
        level); streams skip the snapshot. A commit that changed the partitions' rows while the
        rescale ran makes it fail with CommitConflictError (run it again). Returns the snapshot
        (None when the partitions hold no file any more). ``progress`` gets (partitions done,
        partitions)."""
        context, landed = rescale.rescale(self._context, bucket=bucket, partitions=partitions,
                                          commit_user=str(uuid.uuid4()), progress=progress)
        self._use(context)
        if landed is not None:
            snapshot_expiry.expire_after_commit(context)
        return landed

    def delete(self, predicate: pc.Expression | str) -> Snapshot | None:
        """Delete the rows ``predicate`` matches (a ``pyarrow.compute`` expression or SQL-like
        text, as :meth:`scan` takes), Paimon's ``DELETE FROM``. On a primary-key table, one
        commit of -D rows that the merge engine and changelog producer see as any delete
        (OptionError where the merge engine keeps deleted rows: first-row, ``ignore-delete``;
        partial-update and aggregation without ``*.remove-record-on-delete``). On an append
        table, the files holding matching rows are rewritten without them, or with
        ``deletion-vectors.enabled`` the rows are marked in the files' deletion vectors, as one
        OVERWRITE snapshot. None when nothing matches."""
        if self._context.kind is TableKind.APPEND:
            return self._landed(append_rows.delete(self._context, predicate, str(uuid.uuid4())))
        rows = row_level.deletions(self._context, predicate)
        return None if rows is None else self.write(rows)

    def update(self, predicate: pc.Expression | str, *, set: Mapping[str, Any]) -> Snapshot | None:
        """Set columns of the rows ``predicate`` matches, Paimon's ``UPDATE`` on a primary-key
        table: ``set`` maps a column to a value (cast to its type) or to a ``pyarrow.compute``
        expression over the old row (``{"qty": pc.field("qty") + 1}``). Written as one commit
        of -U (old) and +U (new) rows (+U only under partial-update); on an append table, the
        files holding matching rows rewritten (with ``deletion-vectors.enabled``: the old rows
        marked in deletion vectors and the new ones written as new files) as one OVERWRITE
        snapshot. Primary-key and
        partition columns cannot be set; aggregation and first-row tables take no update.
        None when nothing matches."""
        if self._context.kind is TableKind.APPEND:
            return self._landed(append_rows.update(self._context, predicate, set, str(uuid.uuid4())))
        rows = row_level.updates(self._context, predicate, set)
        return None if rows is None else self.write(rows)

    def _landed(self, landed: Snapshot | None) -> Snapshot | None:
        """A snapshot an operation landed, after the expiry writers run after their commits."""
        if landed is not None:
            snapshot_expiry.expire_after_commit(self._context)
        return landed

    def overwrite(self, data: WriteInput, *, partitions: Mapping[str, Any] | None = None) -> Snapshot | None:
        """Replace rows with ``data`` as one OVERWRITE snapshot (Paimon's ``INSERT OVERWRITE``):
        the partition ``partitions`` names (a dict of partition values; a partial one names
        every partition it matches; rows outside it are a DataError), else on a partitioned
        table only the partitions ``data`` is in (``dynamic-partition-overwrite``, Paimon's
        default; false: the whole table), else the whole table. ``data`` is taken as
        :meth:`write` takes it; its rows do not merge with the rows they replace. Every bucket
        mode: the replaced partitions' keys are placed anew (dynamic buckets: a new HASH index;
        a cross-partition table: a DataError for rows whose key lives in a kept partition, and a
        key in several partitions of ``data`` kept in one by the merge engine, as a write keeps
        it). None when there was nothing to replace."""
        return self._landed(overwrite_rows.overwrite_rows(self._context, data, partitions, str(uuid.uuid4())))

    def merge(self, source: WriteInput, *, on: Sequence[str] | None = None) -> Merge:
        """MERGE INTO this table from ``source`` (taken as :meth:`write` takes rows), built
        clause by clause as deltalake's merge is:
        ``table.merge(rows).when_matched_update().when_not_matched_insert().execute()`` (see
        :class:`Merge`). Rows match by the primary key (``on``, if given, must name it); an
        append table's by the columns ``on`` names (Paimon's ``MERGE INTO ... ON``), which it
        needs. A primary-key table's merge lands as one commit of -D, -U/+U and +I rows; an
        append table's as one OVERWRITE snapshot, the files holding changed rows rewritten (or
        the rows marked in deletion vectors where they are enabled) and inserted rows in new
        files. A source with two rows of one key is a DataError."""
        return Merge(functools.partial(self._merge, conform.to_arrow(source, self.name), on))

    def _merge(self, source: pa.Table, on: Sequence[str] | None, clauses: tuple[Clause, ...]) -> Snapshot | None:
        ctx = self._context
        if ctx.kind is TableKind.APPEND:
            return self._landed(append_merge.merge(ctx, source, clauses, on, str(uuid.uuid4())))
        merge_rows.merge_keys(ctx, on)
        rows = merge_rows.merged_changes(ctx, source, clauses)
        return None if rows is None else self.write(rows)

    def truncate(self) -> Snapshot | None:
        """Delete every row as one OVERWRITE snapshot (Paimon's ``TRUNCATE TABLE``): the
        files the table holds when it lands go, rows committed meanwhile included. Older
        snapshots and tags still read the rows until they expire; streams skip the snapshot
        (unless ``streaming-read-overwrite``). None for a table with no file."""
        return self._landed(partition_drops.truncate(self._context, str(uuid.uuid4())))

    def drop_partitions(self, partitions: Sequence[Mapping[str, Any]]) -> Snapshot | None:
        """Delete the rows of ``partitions`` (each a dict of partition values, e.g.
        ``[{"dt": "2024-01-01"}]``) as one OVERWRITE snapshot (Paimon's ``ALTER TABLE ... DROP
        PARTITION``). ScanError, with nothing written, for an unpartitioned table or a
        partition that holds no data."""
        return self._landed(partition_drops.drop_partitions(self._context, partitions, str(uuid.uuid4())))

    def expire_partitions(self, *, now: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Drop the partitions older than ``partition.expiration-time`` at ``now`` (default:
        the local time now) as one OVERWRITE snapshot, as writers do after their commits
        (``partition.expiration-strategy``, ``partition.timestamp-pattern``,
        ``partition.timestamp-formatter``, ``partition.expiration-max-num``). Returns the
        dropped partitions' values, oldest first; none without the option."""
        ctx = self._context
        gone, landed = partition_expiry.expire_partitions(ctx, str(uuid.uuid4()), now=now)
        if landed is not None:
            snapshot_expiry.expire_after_commit(ctx, partitions=False)
        return [dict(zip(ctx.partition_keys, ctx.partition_values(p), strict=True)) for p in gone]

    # -- maintenance ------------------------------------------------------------------------

    def remove_orphan_files(self, *, older_than: dt.datetime | dt.timedelta | None = None,
                            dry_run: bool = False, progress: Progress | None = None) -> list[str]:
        """Delete the files no snapshot, tag, changelog or schema of the table or of any of its
        branches names (left by crashed writers) that were modified before ``older_than`` (a
        time, or an age; default one day, as Paimon's); with ``dry_run`` only list them. Returns
        their paths. The threshold must exceed the longest commit of any concurrent writer:
        newer files are never touched. ``progress`` gets (directories searched, directories)."""
        return orphans.remove_orphan_files(self._context, older_than, dry_run=dry_run, progress=progress)

    def inspect(self, *, snapshot_id: int | None = None) -> TableInspection:
        """The LSM tree of every bucket in a snapshot (default: the latest), from metadata only:
        levels, sorted runs, files with key ranges, what universal compaction would pick next
        and why, and the snapshot's changelog files. ``str()`` of it is a text summary;
        ``.to_png(path)`` draws a bucket's tree (extra ``changelake[plot]``)."""
        ctx = self._context
        snapshot = ctx.latest_snapshot() if snapshot_id is None else ctx.snapshot(snapshot_id)
        changelog = producers.for_table(ctx)
        every = ctx.options.full_compaction_delta_commits or changelog.full_compaction_delta_commits
        # With lookup-compact gentle, level 0 goes up when a writer's interval says (counted in
        # the writer, not the table): the next pick shown is universal compaction's.
        forced = compactor.forces_level0_up(ctx, changelog) and ctx.options.lookup_compact is LookupCompactMode.RADICAL
        return inspection.inspect(ctx, snapshot, force_level0_up=forced, full_compaction_every=every)

    def system(self, name: str) -> pa.Table:
        """Paimon's system table ``name`` (``snapshots``, ``schemas``, ``options``, ``tags``,
        ``branches``, ``consumers``, ``manifests``, ``files``, ``partitions``, ``buckets``,
        ``audit_log``), read now, with Paimon's column names."""
        return system_tables.system_table(self._context, name)
