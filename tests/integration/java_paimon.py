"""Apache Paimon's own Java engine as an interop oracle, driven over py4j.

PyPI carries Paimon's Java engine in one place: pypaimon 0.2.0's source distribution bundles
Apache Paimon 0.9.0 (core, Parquet format, deletion vectors, changelog producers) as
``paimon-python-java-bridge-0.9.0.jar``. ``./dev test`` downloads it into ``.cache/paimon-java``
(``CHANGELAKE_PAIMON_JAR`` may name another copy); Hadoop's client jars come from pyspark. The
JVM runs py4j's gateway on loopback, and the tests call Paimon's Java API through it: tables
are created, written (one batch commit at a time, rows with their row kinds) and read (any
snapshot, or as a stream of changes) by Java Paimon itself.

Rows cross py4j one call a row: written through Paimon's ``BinaryRowWriter`` by type (py4j
boxes a Python int as an Integer, which a BIGINT field of a ``GenericRow`` cannot take), read
as each row's BinaryRow bytes, decoded here by type. Values are as changelake's scans give
them, but DATE is days since the epoch, TIMESTAMP(0..6) microseconds since the epoch (naive)
and TIMESTAMP(7..9) nanoseconds since the epoch (written from such an int, or a datetime)."""

from __future__ import annotations

import datetime as dt
import decimal
import glob
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pyspark
from py4j.java_gateway import CallbackServerParameters, GatewayParameters, JavaGateway, launch_gateway

JAR_ENV = "CHANGELAKE_PAIMON_JAR"
DEFAULT_JAR = Path(__file__).resolve().parents[2] / ".cache" / "paimon-java" / "paimon-python-java-bridge-0.9.0.jar"
# Java Paimon's row kinds by the short names changelake uses
ROW_KINDS = {"+I": "INSERT", "-U": "UPDATE_BEFORE", "+U": "UPDATE_AFTER", "-D": "DELETE"}
TYPES = ("STRING", "INT", "BIGINT", "DOUBLE", "BOOLEAN")  # what create_table declares (read and write take more)
EPOCH = dt.datetime(1970, 1, 1)

Row = dict[str, Any]


def jar_path() -> Path:
    return Path(os.environ.get(JAR_ENV) or DEFAULT_JAR)


def jar_reason() -> str | None:
    """Why Java Paimon cannot run here (its jar is absent), or None."""
    jar = jar_path()
    if not jar.is_file():
        return (f"Apache Paimon's Java engine is not at {jar} (./dev test downloads it from PyPI's "
                "pypaimon==0.2.0 source distribution; or set CHANGELAKE_PAIMON_JAR)")
    return None


class JavaPaimon:
    """One JVM running Paimon 0.9.0 behind a py4j gateway (Arrow's Java memory may be used:
    ``java.nio`` is opened to it); ``close`` ends it."""

    def __init__(self, jar: Path, *, heap: str = "1g") -> None:
        # Hadoop's client jars (Paimon's Parquet format needs them) come with pyspark
        spark_jars = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "*.jar")))
        port = launch_gateway(classpath=os.pathsep.join([str(jar), *spark_jars]), die_on_exit=True,
                              javaopts=[f"-Xmx{heap}", "--add-opens=java.base/java.nio=ALL-UNNAMED"])
        self.gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
        self.jvm: Any = self.gateway.jvm
        self.spill = tempfile.mkdtemp(prefix="java-paimon-")  # where writers' lookups spill

    def close(self) -> None:
        self.gateway.shutdown()
        shutil.rmtree(self.spill, ignore_errors=True)

    def catalog(self, warehouse: str) -> Any:
        """Java Paimon's filesystem catalog of ``warehouse``."""
        paimon = self.jvm.org.apache.paimon
        options = paimon.options.Options()
        options.set("warehouse", warehouse)
        return paimon.catalog.CatalogFactory.createCatalog(paimon.catalog.CatalogContext.create(options))

    def table(self, warehouse: str, name: str, options: dict[str, str] | None = None) -> Any:
        """Java Paimon's handle of ``name`` ("db.table"), with ``options`` (e.g. time travel)."""
        database, table = name.split(".")
        identifier = self.jvm.org.apache.paimon.catalog.Identifier.create(database, table)
        handle = self.catalog(warehouse).getTable(identifier)
        return handle.copy(options) if options else handle

    def create_table(self, warehouse: str, name: str, fields: Sequence[tuple[str, str]], *,
                     primary_keys: Sequence[str], partition_keys: Sequence[str] = (),
                     options: dict[str, str] | None = None) -> None:
        """Create ``name`` ("db.table"), ``fields`` as (column, one of TYPES) pairs."""
        paimon = self.jvm.org.apache.paimon
        types = paimon.types.DataTypes
        builder = paimon.schema.Schema.newBuilder()
        for column, sql in fields:
            if sql not in TYPES:
                raise ValueError(f"column {column}: {sql} is not one of {TYPES}")
            data_type = getattr(types, sql)()
            builder.column(column, data_type.notNull() if column in primary_keys else data_type)
        builder.primaryKey(list(primary_keys))
        builder.partitionKeys(list(partition_keys))
        for key, value in (options or {}).items():
            builder.option(key, value)
        catalog = self.catalog(warehouse)
        database, table = name.split(".")
        catalog.createDatabase(database, True)
        catalog.createTable(paimon.catalog.Identifier.create(database, table), builder.build(), False)

    def write(self, warehouse: str, name: str, rows: Iterable[tuple[str, Row]], *,
              full_compaction: bool = False, overwrite: dict[str, str] | None = None) -> None:
        """One batch commit of ``rows``: (row kind "+I"/"-U"/"+U"/"-D", values by column).
        ``full_compaction``: every bucket of the partitions written (of an unpartitioned
        table: every bucket) is fully compacted before the commit, as Paimon's Flink sink does
        every ``full-compaction.delta-commits``. ``overwrite``: an INSERT OVERWRITE of that
        static partition (its values as strings; empty: the whole table, or with
        ``dynamic-partition-overwrite`` the partitions the rows are in)."""
        paimon = self.jvm.org.apache.paimon
        table = self.table(warehouse, name)
        fields = fields_of(table)
        rows = list(rows)
        builder = paimon.python.InvocationUtil.getBatchWriteBuilder(table)
        if overwrite is not None:
            static = self.jvm.java.util.HashMap()
            for key, value in overwrite.items():
                static.put(key, value)
            builder = builder.withOverwrite(static)
        write = builder.newWrite()
        # lookups (deletion vectors, the lookup producer) spill to local disk
        write.withIOManager(paimon.disk.IOManager.create(self.spill))
        commit = builder.newCommit()
        try:
            for kind, values in rows:
                row = _binary_row(paimon, fields, values)
                row.setRowKind(getattr(paimon.types.RowKind, ROW_KINDS[kind]))
                write.write(row)
            if full_compaction:
                keys = list(table.partitionKeys())
                key_fields = [next(f for f in fields if f[0] == key) for key in keys]
                written = {tuple(values[key] for key in keys) for _, values in rows}
                partitions = [_binary_row(paimon, key_fields, dict(zip(keys, partition, strict=True)))
                              for partition in sorted(written, key=repr)]
                for partition in partitions:
                    for bucket in range(int(table.options()["bucket"])):
                        write.compact(partition, bucket, True)
            commit.commit(write.prepareCommit())
        finally:
            write.close()
            commit.close()

    def drop_partition(self, warehouse: str, name: str, partition: dict[str, str]) -> None:
        """Paimon's ``ALTER TABLE ... DROP PARTITION`` (the catalog's ``dropPartition``)."""
        database, table = name.split(".")
        identifier = self.jvm.org.apache.paimon.catalog.Identifier.create(database, table)
        spec = self.jvm.java.util.HashMap()
        for key, value in partition.items():
            spec.put(key, value)
        self.catalog(warehouse).dropPartition(identifier, spec)

    def write_dynamic(self, warehouse: str, name: str, rows: Iterable[tuple[str, Row]]) -> None:
        """One batch commit of ``rows`` into a dynamic-bucket table (``bucket = -1``): Java's
        batch writer cannot pick such a bucket itself, so each row's bucket comes from Paimon's
        ``HashBucketAssigner`` (one assigner, as a Flink job of parallelism 1), from the key hash
        of the trimmed primary key; the writer extends the HASH index as it writes."""
        paimon = self.jvm.org.apache.paimon
        table = self.table(warehouse, name)
        fields = fields_of(table)
        target = int(table.options().getOrDefault("dynamic-bucket.target-row-num", "2000000"))
        assigner = paimon.index.HashBucketAssigner(table.snapshotManager(), "changelake-test",
                                                   table.store().newIndexFileHandler(), 1, 1, 0, target)
        extractor = table.createRowKeyExtractor()
        builder = paimon.python.InvocationUtil.getBatchWriteBuilder(table)
        write = builder.newWrite()
        commit = builder.newCommit()
        try:
            for kind, values in rows:
                row = _binary_row(paimon, fields, values)
                row.setRowKind(getattr(paimon.types.RowKind, ROW_KINDS[kind]))
                extractor.setRecord(row)
                write.write(row, assigner.assign(extractor.partition(), extractor.trimmedPrimaryKey().hashCode()))
            commit.commit(write.prepareCommit())
        finally:
            write.close()
            commit.close()

    def write_cross_partition(self, warehouse: str, name: str, rows: Iterable[tuple[str, Row]], *,
                              assigners: int = 1) -> None:
        """One batch commit of ``rows`` into a cross-partition table (a primary key without
        every partition column, ``bucket = -1``), each row placed by Paimon's own
        ``GlobalIndexAssigner``s, as a Flink job with ``assigners`` of them: its key index
        bootstrapped from the table (``IndexBootstrap``), a moved key's -D sent to its old
        partition, each row sent to the assigner of its key hash (Flink's
        ``KeyPartRowChannelComputer``; every assigner learns every key, which places rows as
        Flink's routing of keys does: an assigner looks up only its own keys, and fills only its
        own buckets). An assigner hands each row and bucket to a Java ``BiConsumer``, here a
        Python object behind py4j's callback server, which writes it."""
        paimon = self.jvm.org.apache.paimon
        self._serve_callbacks()
        table = self.table(warehouse, name)
        fields = fields_of(table)
        key_fields = [next(f for f in fields if f[0] == key) for key in table.primaryKeys()]
        io_manager = paimon.disk.IOManager.create(self.spill)
        builder = paimon.python.InvocationUtil.getBatchWriteBuilder(table)
        write = builder.newWrite()
        write.withIOManager(io_manager)
        commit = builder.newCommit()
        placers = [paimon.crosspartition.GlobalIndexAssigner(table) for _ in range(assigners)]
        try:
            for i, placer in enumerate(placers):
                placer.open(0, io_manager, assigners, i, _WriteRow(write))
            keys = paimon.crosspartition.IndexBootstrap(table).bootstrap(1, 0).toCloseableIterator()
            try:
                while keys.hasNext():
                    key = keys.next()
                    for placer in placers:
                        placer.bootstrapKey(key)
            finally:
                keys.close()
            for placer in placers:
                placer.endBoostrap(False)
            for kind, values in rows:
                row = _binary_row(paimon, fields, values)
                row.setRowKind(getattr(paimon.types.RowKind, ROW_KINDS[kind]))
                key_hash = _binary_row(paimon, key_fields, values).hashCode()
                placers[abs(key_hash) % assigners].processInput(row)
            commit.commit(write.prepareCommit())
        finally:
            for placer in placers:
                placer.close()
            write.close()
            commit.close()

    def compact(self, warehouse: str, name: str, buckets: Iterable[tuple[Row, int]]) -> None:
        """One batch commit fully compacting ``buckets``: (partition values by column, bucket)
        pairs, e.g. of a dynamic-bucket table (whose buckets Java's batch writer cannot list)."""
        paimon = self.jvm.org.apache.paimon
        table = self.table(warehouse, name)
        fields = fields_of(table)
        key_fields = [next(f for f in fields if f[0] == key) for key in table.partitionKeys()]
        builder = paimon.python.InvocationUtil.getBatchWriteBuilder(table)
        write = builder.newWrite()
        write.withIOManager(paimon.disk.IOManager.create(self.spill))
        commit = builder.newCommit()
        try:
            for partition, bucket in buckets:
                write.compact(_binary_row(paimon, key_fields, partition), bucket, True)
            commit.commit(write.prepareCommit())
        finally:
            write.close()
            commit.close()

    def _serve_callbacks(self) -> None:
        """Start py4j's callback server (Java calls Python objects through it) on a free port."""
        if self.gateway.start_callback_server(CallbackServerParameters(port=0, daemonize=True,
                                                                      daemonize_connections=True)):
            server = self.gateway.java_gateway_server
            server.resetCallbackClient(server.getCallbackClient().getAddress(),
                                       self.gateway.get_callback_server().get_listening_port())

    def read(self, warehouse: str, name: str, snapshot_id: int | None = None, *,
             options: dict[str, str] | None = None, by_id: bool = False) -> list[Row]:
        """Every row of the latest snapshot (or ``snapshot_id``; ``options`` such as
        ``scan.tag-name``), as Java Paimon reads it; ``by_id`` keys values by field id."""
        if snapshot_id is not None:
            options = {**(options or {}), "scan.snapshot-id": str(snapshot_id)}
        table = self.table(warehouse, name, options)
        builder = self.jvm.org.apache.paimon.python.InvocationUtil.getReadBuilder(table)
        return [row for _, row in self._rows(table, builder.newScan().plan().splits(), builder.newRead(),
                                             by_id=by_id)]

    def stream(self, warehouse: str, name: str, snapshot_id: int) -> list[tuple[str, Row]]:
        """The changes from ``snapshot_id`` to the latest snapshot as Java Paimon's streaming
        read returns them (``scan.mode`` from-snapshot): (row kind, row) pairs."""
        table = self.table(warehouse, name, {"scan.mode": "from-snapshot", "scan.snapshot-id": str(snapshot_id)})
        builder = self.jvm.org.apache.paimon.python.InvocationUtil.getReadBuilder(table)
        scan, read = builder.newStreamScan(), builder.newRead()
        latest = table.snapshotManager().latestSnapshotId()
        changes = []
        # each plan is one snapshot's changes (none for a snapshot the producer skips), until
        # the scan has gone past the latest
        for _ in range(latest + 2):
            if scan.checkpoint() is not None and scan.checkpoint() > latest:
                break
            changes += self._rows(table, scan.plan().splits(), read)
        else:
            raise AssertionError(f"Java Paimon's stream did not reach snapshot {latest}")
        return changes

    def _rows(self, table: Any, splits: Any, read: Any, *, by_id: bool = False) -> list[tuple[str, Row]]:
        fields = fields_of(table)
        serializer = self.jvm.org.apache.paimon.data.serializer.InternalRowSerializer(table.rowType())
        rows = []
        for split in splits:
            iterator = read.createReader(split).toCloseableIterator()
            try:
                while iterator.hasNext():
                    row = iterator.next()
                    values = _decode(serializer.toBinaryRow(row).toBytes(), fields)
                    rows.append((row.getRowKind().shortString(),
                                 {f[3] if by_id else f[0]: v for f, v in zip(fields, values, strict=True)}))
            finally:
                iterator.close()
        return rows


class _WriteRow:
    """A ``java.util.function.BiConsumer`` of (row, bucket) writing each row into its bucket."""

    def __init__(self, write: Any) -> None:
        self.write = write

    def accept(self, row: Any, bucket: int) -> None:
        self.write.write(row, bucket)

    class Java:
        implements: ClassVar[list[str]] = ["java.util.function.BiConsumer"]


Field = tuple[str, str, tuple[int, ...], int]  # name, type root, (precision[, scale]), field id


def fields_of(table: Any) -> list[Field]:
    fields = []
    for field in table.rowType().getFields():
        data_type = field.type()
        root = data_type.getTypeRoot().name()
        if root == "DECIMAL":
            params: tuple[int, ...] = (data_type.getPrecision(), data_type.getScale())
        elif root.startswith("TIMESTAMP"):
            params = (data_type.getPrecision(),)
        else:
            params = ()
        fields.append((field.name(), root, params, field.id()))
    return fields


def _decode(data: bytes, fields: list[Field]) -> list[Any]:
    """The values of a row in Paimon's BinaryRow layout (Java serializes each row it reads
    into one, so a row crosses py4j in one call): a null bit set after the row kind's byte,
    an 8-byte slot per field, variable-length parts behind them, little-endian."""
    null_bytes = (len(fields) + 63 + 8) // 64 * 8
    values: list[Any] = []
    for i, (_, root, params, _) in enumerate(fields):
        if data[(i + 8) >> 3] & (1 << ((i + 8) & 7)):
            values.append(None)
            continue
        at = null_bytes + 8 * i
        slot = data[at:at + 8]
        word = int.from_bytes(slot, "little")
        if root == "BOOLEAN":
            values.append(slot[0] != 0)
        elif root in ("TINYINT", "SMALLINT", "INTEGER", "DATE", "BIGINT", "TIME_WITHOUT_TIME_ZONE"):
            width = {"TINYINT": 1, "SMALLINT": 2, "BIGINT": 8}.get(root, 4)
            values.append(int.from_bytes(slot[:width], "little", signed=True))
        elif root in ("FLOAT", "DOUBLE"):
            values.append(struct.unpack("<f" if root == "FLOAT" else "<d", slot[:4 if root == "FLOAT" else 8])[0])
        elif root in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
            # up to 7 bytes inline, the length in the last byte; else offset and length
            inline = slot[7] & 0x80
            raw = slot[:slot[7] & 0x7F] if inline else data[word >> 32:(word >> 32) + (word & 0xFFFFFFFF)]
            values.append(raw.decode() if root in ("CHAR", "VARCHAR") else bytes(raw))
        elif root == "DECIMAL":
            if params[0] <= 18:
                unscaled = int.from_bytes(slot, "little", signed=True)
            else:
                unscaled = int.from_bytes(data[word >> 32:(word >> 32) + (word & 0xFFFFFFFF)], "big", signed=True)
            values.append(decimal.Decimal(unscaled).scaleb(-params[1]))
        elif root.startswith("TIMESTAMP"):
            if params[0] <= 3:
                values.append(int.from_bytes(slot, "little", signed=True) * 1000)
            else:  # epoch millis behind the slot, nanos of the millisecond in it
                millis = int.from_bytes(data[word >> 32:(word >> 32) + 8], "little", signed=True)
                nanos = word & 0xFFFFFFFF
                values.append(millis * 1_000_000 + nanos if params[0] > 6 else millis * 1000 + nanos // 1000)
        else:
            raise ValueError(f"{root} is not read here")
    return values


def _binary_row(paimon: Any, fields: Sequence[Field], values: Row) -> Any:
    """A BinaryRow of ``fields`` holding ``values`` (by column name; absent ones null)."""
    row = paimon.data.BinaryRow(len(fields))
    writer = paimon.data.BinaryRowWriter(row)
    for i, (column, root, params, _) in enumerate(fields):
        _set(paimon, writer, i, root, params, values.get(column))
    writer.complete()
    return row


# BinaryRowWriter's method for each type whose Python value it takes as it is
_PLAIN_WRITES = {"BOOLEAN": "writeBoolean", "TINYINT": "writeByte", "SMALLINT": "writeShort", "INTEGER": "writeInt",
                 "BIGINT": "writeLong", "FLOAT": "writeFloat", "DOUBLE": "writeDouble"}


def _set(paimon: Any, writer: Any, i: int, root: str, params: tuple[int, ...], value: Any) -> None:
    if value is None:
        # a non-compact decimal or timestamp keeps its variable-length slot
        if root == "DECIMAL" and params[0] > 18:
            writer.writeDecimal(i, None, params[0])
        elif root.startswith("TIMESTAMP") and params[0] > 3:
            writer.writeTimestamp(i, None, params[0])
        else:
            writer.setNullAt(i)
    elif root in _PLAIN_WRITES:
        getattr(writer, _PLAIN_WRITES[root])(i, value)
    elif root == "DATE":
        writer.writeInt(i, (value - EPOCH.date()).days)
    elif root == "TIME_WITHOUT_TIME_ZONE":  # milliseconds of the day
        writer.writeInt(i, ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000)
    elif root == "DECIMAL":
        writer.writeDecimal(i, paimon.data.Decimal.fromBigDecimal(value, params[0], params[1]), params[0])
    elif root in ("CHAR", "VARCHAR"):
        writer.writeString(i, paimon.data.BinaryString.fromString(value))
    elif root in ("BINARY", "VARBINARY"):
        writer.writeBinary(i, bytearray(value))
    elif root.startswith("TIMESTAMP"):
        nanos = value if isinstance(value, int) else (value - EPOCH) // dt.timedelta(microseconds=1) * 1000
        timestamp = paimon.data.Timestamp.fromEpochMillis(nanos // 1_000_000, nanos % 1_000_000)
        writer.writeTimestamp(i, timestamp, params[0])
    else:
        raise ValueError(f"{root} is not written here")
