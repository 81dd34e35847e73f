"""Apache Paimon's own Java engine as an interop oracle, driven over py4j.

PyPI carries Paimon's Java engine in one place: pypaimon 0.2.0's source distribution bundles
Apache Paimon 0.9.0 (core, Parquet format, deletion vectors, changelog producers) as
``paimon-python-java-bridge-0.9.0.jar``. ``./dev test`` downloads it into ``.cache/paimon-java``
and names it in ``CHANGELAKE_PAIMON_JAR``; Hadoop's client jars come from pyspark. The JVM runs
py4j's gateway on loopback, and the tests call Paimon's Java API through it: tables are
created, written (one batch commit at a time, rows with their row kinds) and read (any
snapshot) by Java Paimon itself.

Only a few column types are needed here (STRING, INT, BIGINT, DOUBLE); ``write`` fills no
BIGINT column, since py4j boxes a Python int as a Java Integer (rows given as Arrow IPC bytes
to the bridge's ``BytesWriter`` can: benchmarks/paimon_java.py)."""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyspark
from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

JAR_ENV = "CHANGELAKE_PAIMON_JAR"
DEFAULT_JAR = Path(__file__).resolve().parents[2] / ".cache" / "paimon-java" / "paimon-python-java-bridge-0.9.0.jar"
# Java Paimon's row kinds by the short names changelake uses
ROW_KINDS = {"+I": "INSERT", "-U": "UPDATE_BEFORE", "+U": "UPDATE_AFTER", "-D": "DELETE"}
TYPES = ("STRING", "INT", "BIGINT", "DOUBLE")

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
              full_compaction: bool = False) -> None:
        """One batch commit of ``rows``: (row kind "+I"/"-U"/"+U"/"-D", values by column).
        ``full_compaction``: every bucket of the partitions written is fully compacted before
        the commit, as Paimon's Flink sink does every ``full-compaction.delta-commits`` (tables
        with one STRING partition key)."""
        paimon = self.jvm.org.apache.paimon
        table = self.table(warehouse, name)
        columns = list(table.rowType().getFieldNames())
        types = [f.type().getTypeRoot().name() for f in table.rowType().getFields()]
        rows = list(rows)
        builder = paimon.python.InvocationUtil.getBatchWriteBuilder(table)
        write = builder.newWrite()
        # lookups (deletion vectors, the lookup producer) spill to local disk
        write.withIOManager(paimon.disk.IOManager.create(self.spill))
        commit = builder.newCommit()
        try:
            for kind, values in rows:
                row = paimon.data.GenericRow(len(columns))
                row.setRowKind(getattr(paimon.types.RowKind, ROW_KINDS[kind]))
                for i, column in enumerate(columns):
                    value = values.get(column)
                    if value is not None and types[i] == "BIGINT":
                        raise ValueError(f"column {column}: BIGINT values cannot be written through py4j rows")
                    row.setField(i, paimon.data.BinaryString.fromString(value) if isinstance(value, str) else value)
                write.write(row)
            if full_compaction:
                [partition_key] = list(table.partitionKeys())
                buckets = int(table.options()["bucket"])
                for value in sorted({values[partition_key] for _, values in rows}):
                    for bucket in range(buckets):
                        write.compact(paimon.data.BinaryRow.singleColumn(value), bucket, True)
            commit.commit(write.prepareCommit())
        finally:
            write.close()
            commit.close()

    def read(self, warehouse: str, name: str, snapshot_id: int | None = None) -> list[Row]:
        """Every row of the latest snapshot (or ``snapshot_id``), as Java Paimon reads it."""
        options = None if snapshot_id is None else {"scan.snapshot-id": str(snapshot_id)}
        table = self.table(warehouse, name, options)
        fields = [(f.name(), f.type().getTypeRoot().name()) for f in table.rowType().getFields()]
        builder = self.jvm.org.apache.paimon.python.InvocationUtil.getReadBuilder(table)
        read = builder.newRead()
        rows = []
        for split in builder.newScan().plan().splits():
            iterator = read.createReader(split).toCloseableIterator()
            try:
                while iterator.hasNext():
                    rows.append(_row(iterator.next(), fields))
            finally:
                iterator.close()
        return rows

    def stream(self, warehouse: str, name: str, snapshot_id: int) -> list[tuple[str, Row]]:
        """The changes from ``snapshot_id`` to the latest snapshot as Java Paimon's streaming
        read returns them (``scan.mode`` from-snapshot): (row kind, row) pairs."""
        table = self.table(warehouse, name, {"scan.mode": "from-snapshot", "scan.snapshot-id": str(snapshot_id)})
        fields = [(f.name(), f.type().getTypeRoot().name()) for f in table.rowType().getFields()]
        builder = self.jvm.org.apache.paimon.python.InvocationUtil.getReadBuilder(table)
        scan, read = builder.newStreamScan(), builder.newRead()
        latest = table.snapshotManager().latestSnapshotId()
        changes = []
        # each plan is one snapshot's changes (none for a snapshot the producer skips), until
        # the scan has gone past the latest
        for _ in range(latest + 2):
            if scan.checkpoint() is not None and scan.checkpoint() > latest:
                break
            for split in scan.plan().splits():
                iterator = read.createReader(split).toCloseableIterator()
                try:
                    while iterator.hasNext():
                        row = iterator.next()
                        changes.append((row.getRowKind().shortString(), _row(row, fields)))
                finally:
                    iterator.close()
        else:
            raise AssertionError(f"Java Paimon's stream did not reach snapshot {latest}")
        return changes


def _row(row: Any, fields: list[tuple[str, str]]) -> Row:
    out: Row = {}
    for i, (name, root) in enumerate(fields):
        if row.isNullAt(i):
            out[name] = None
        elif root in ("CHAR", "VARCHAR"):
            out[name] = row.getString(i).toString()
        elif root == "INTEGER":
            out[name] = row.getInt(i)
        elif root == "DOUBLE":
            out[name] = row.getDouble(i)
        else:
            raise ValueError(f"column {name}: {root} is not read here")
    return out
