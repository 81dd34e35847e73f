"""Apache Paimon's Java engine (0.9.0, over py4j: ``java_paimon.py``) and changelake on the same
tables: changelake reads every snapshot of deletion-vector tables Java Paimon writes (its
index files, index manifests and the vectors its lookup compaction marks), both write to
one such table in turn, Java Paimon reads every snapshot of the deletion-vector tables
changelake writes, and changelake streams the changelog Java Paimon's ``lookup`` producer
writes. pypaimon 2.1 writes no deletion vectors and produces no lookup changelog, so these
are the only tests of those files as another Paimon writer makes them."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from java_paimon import JavaPaimon

import changelake as cl

FIELDS = [("dt", "STRING"), ("id", "INT"), ("name", "STRING"), ("v", "DOUBLE")]
SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int32(), nullable=False),
                    ("name", pa.string()), ("v", pa.float64())])
Key = tuple[str, int]
Row = dict[str, Any]
Change = tuple[str, Row]


class Model:
    """The table as a dict of key -> row, and random commits of changes against it."""

    def __init__(self, seed: int) -> None:
        self.rows: dict[Key, Row] = {}
        self.rng = random.Random(seed)
        self.next_id = 0

    def commit(self, new: int, updates: int, deletes: int, tag: str) -> list[Change]:
        """One commit's changes (every key at most once) as a writer sends them: +I of new
        keys, +U of updated ones, -D (with the whole row) of deleted ones; applied."""
        live = sorted(self.rows)
        changed = self.rng.sample(live, min(len(live), updates + deletes))
        changes: list[Change] = []
        for i in range(new):
            key = (self.rng.choice(["a", "b", "c"]), self.next_id + i)
            changes.append(("+I", self._row(key, tag)))
        self.next_id += new
        for key in changed[:updates]:
            changes.append(("+U", self._row(key, tag)))
        for key in changed[updates:]:
            changes.append(("-D", self.rows[key]))
        for kind, row in changes:
            key = (row["dt"], row["id"])
            if kind == "-D":
                del self.rows[key]
            else:
                self.rows[key] = row
        return changes

    def _row(self, key: Key, tag: str) -> Row:
        return {"dt": key[0], "id": key[1], "name": f"{tag}-{self.rng.randrange(1000)}",
                "v": round(self.rng.uniform(0, 100), 3)}

    def sorted_rows(self) -> list[Row]:
        return _sorted(self.rows.values())


def _sorted(rows: Any) -> list[Row]:
    return sorted(rows, key=lambda r: (r["dt"], r["id"]))


def _ours(table: cl.Table, snapshot_id: int | None = None) -> list[Row]:
    scan = table.scan() if snapshot_id is None else table.scan(snapshot_id=snapshot_id)
    return _sorted(scan.to_arrow().to_pylist())


def _arrow(changes: list[Change]) -> pa.Table:
    """Changes as changelake writes them: the rows, with their kinds in a ``rowkind`` column."""
    rows = [row for _, row in changes]
    return pa.Table.from_pylist(rows, schema=SCHEMA).append_column("rowkind", pa.array([k for k, _ in changes]))


def _change_order(change: Change) -> tuple[str, int, str]:
    """Changes of one key come once per kind in these tests: sorted by key, then kind."""
    return change[1]["dt"], change[1]["id"], change[0]


def test_java_and_changelake_share_a_deletion_vector_table(tmp_path: Any, java: JavaPaimon) -> None:
    """Java Paimon writes a deletion-vector table, changelake reads every snapshot as Java does,
    then writes to it (keeping Java's vectors up), then Java writes again on top."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", FIELDS, primary_keys=["dt", "id"], partition_keys=["dt"],
                      options={"bucket": "2", "deletion-vectors.enabled": "true"})
    model = Model(seed=11)
    java.write(warehouse, "db.t", model.commit(60, 0, 0, "java"))
    for step in range(4):
        java.write(warehouse, "db.t", model.commit(12, 15, 6, f"java{step}"))
    table = cl.open_table(f"{warehouse}/db.db/t")
    # Java's lookup compaction marked replaced rows in vectors: the table has index files
    assert table.latest_snapshot().index_manifest is not None
    assert any((tmp_path / "db.db" / "t" / "index").iterdir())
    for snapshot in table.snapshots():
        assert _ours(table, snapshot.id) == _sorted(java.read(warehouse, "db.t", snapshot.id)), \
            f"Java Paimon's snapshot {snapshot.id}"
    assert _ours(table) == model.sorted_rows()

    first_ours = table.latest_snapshot().id + 1
    for step in range(3):
        table.write(_arrow(model.commit(10, 15, 6, f"cl{step}")))
        assert _ours(table) == model.sorted_rows()
        assert _sorted(java.read(warehouse, "db.t")) == model.sorted_rows(), f"after changelake's commit {step}"
    for step in range(2):
        java.write(warehouse, "db.t", model.commit(8, 15, 6, f"again{step}"))
        assert _sorted(java.read(warehouse, "db.t")) == model.sorted_rows()
        assert _ours(table) == model.sorted_rows(), f"after Java's commit {step} on changelake's"
    for snapshot in table.snapshots():
        if snapshot.id >= first_ours:
            assert _ours(table, snapshot.id) == _sorted(java.read(warehouse, "db.t", snapshot.id)), \
                f"snapshot {snapshot.id}"


ENGINES = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
}


@pytest.mark.parametrize("engine", ["aggregation", "deduplicate", "partial-update"])
def test_java_paimon_reads_every_snapshot_of_changelake_deletion_vector_tables(
        tmp_path: Any, java: JavaPaimon, engine: str) -> None:
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "2", "deletion-vectors.enabled": "true", "num-sorted-run.compaction-trigger": "3",
                 **ENGINES[engine]})
    model = Model(seed=5)
    with table.writer(commit_user="u") as writer:
        for step in range(6):
            changes = model.commit(20, 15, 5 if engine == "deduplicate" else 0, f"s{step}")
            if engine == "partial-update":  # some columns left as they are
                changes = [(k, {**row, "name": None}) if i % 3 == 0 else (k, row)
                           for i, (k, row) in enumerate(changes)]
            writer.write(_arrow(changes))
            writer.commit(step)
    table.compact(full=True)
    snapshots = table.snapshots()
    assert any(s.index_manifest for s in snapshots)
    for snapshot in snapshots:
        assert _sorted(java.read(warehouse, "db.t", snapshot.id)) == _ours(table, snapshot.id), \
            f"snapshot {snapshot.id}"
    if engine == "deduplicate":
        assert _ours(table) == model.sorted_rows()


@pytest.mark.parametrize("engine", ["aggregation", "partial-update"])
def test_changelake_reads_every_snapshot_of_java_paimon_deletion_vector_tables(
        tmp_path: Any, java: JavaPaimon, engine: str) -> None:
    """The merge engines that merge with (or keep) the older row, as Java Paimon's lookup
    compaction leaves their files and vectors."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", FIELDS, primary_keys=["dt", "id"], partition_keys=["dt"],
                      options={"bucket": "2", "deletion-vectors.enabled": "true", **ENGINES[engine]})
    model = Model(seed=13)
    for step in range(5):
        changes = model.commit(25, 20, 0, f"j{step}")
        if engine == "partial-update":
            changes = [(k, {**row, "name": None}) if i % 3 == 0 else (k, row) for i, (k, row) in enumerate(changes)]
        java.write(warehouse, "db.t", changes)
    table = cl.open_table(f"{warehouse}/db.db/t")
    snapshots = table.snapshots()
    assert len(snapshots) >= 5
    assert any(s.index_manifest for s in snapshots)
    for snapshot in snapshots:
        assert _ours(table, snapshot.id) == _sorted(java.read(warehouse, "db.t", snapshot.id)), \
            f"snapshot {snapshot.id}"


@pytest.mark.parametrize("producer", ["lookup", "full-compaction"])
def test_changelake_streams_the_changelog_java_paimon_produces(tmp_path: Any, java: JavaPaimon, producer: str) -> None:
    """Java Paimon's ``lookup`` and ``full-compaction`` producers: +I of new keys, -U/+U with the
    previous row of updated ones, -D with the deleted row, in changelog files of its COMPACT
    snapshots (the full-compaction writer compacts fully at every commit, as Paimon's Flink
    sink does at every ``full-compaction.delta-commits``); changelake's change read
    returns exactly those, and streams them from the start."""
    warehouse = str(tmp_path)
    java.create_table(warehouse, "db.t", FIELDS, primary_keys=["dt", "id"], partition_keys=["dt"],
                      options={"bucket": "2", "changelog-producer": producer})
    model = Model(seed=3)
    expected: list[Change] = []
    for step in range(4):
        before = dict(model.rows)
        changes = model.commit(15 if step == 0 else 6, 0 if step == 0 else 8, 0 if step == 0 else 4, f"j{step}")
        java.write(warehouse, "db.t", changes, full_compaction=producer == "full-compaction")
        for kind, row in changes:
            key = (row["dt"], row["id"])
            if kind == "+I":
                expected.append(("+I", row))
            elif kind == "+U":
                expected += [("-U", before[key]), ("+U", row)]
            else:
                expected.append(("-D", before[key]))
    table = cl.open_table(f"{warehouse}/db.db/t")
    assert any(s.changelog_manifest_list for s in table.snapshots())

    changes = table.changes(0, table.latest_snapshot().id).to_arrow().to_pylist()
    ours = [(row.pop("rowkind"), row) for row in changes]
    assert sorted(ours, key=_change_order) == sorted(expected, key=_change_order)
    streamed = [(row.pop("rowkind"), row) for batch in table.stream(mode="from-snapshot", snapshot_id=1)
                for row in batch.data.to_pylist()]
    assert sorted(streamed, key=_change_order) == sorted(expected, key=_change_order)
    assert _ours(table) == model.sorted_rows() == _sorted(java.read(warehouse, "db.t"))


@pytest.mark.parametrize("producer", ["input", "lookup"])
def test_java_paimon_streams_the_changelog_changelake_produces(tmp_path: Any, java: JavaPaimon, producer: str) -> None:
    """Java Paimon's streaming read (``scan.mode`` from-snapshot) of changelake's changelog
    files returns what changelake's own change read does, row kinds included."""
    warehouse = str(tmp_path)
    table = cl.Catalog(warehouse).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "2", "changelog-producer": producer})
    model = Model(seed=17)
    with table.writer(commit_user="u") as writer:
        for step in range(4):
            changes = model.commit(15 if step == 0 else 6, 0 if step == 0 else 8, 0 if step == 0 else 4, f"s{step}")
            writer.write(_arrow(changes))
            writer.commit(step)

    ours = [(row.pop("rowkind"), row) for row in table.changes(0, table.latest_snapshot().id).to_arrow().to_pylist()]
    assert {kind for kind, _ in ours} >= ({"+I", "-D", "+U"} if producer == "input" else {"+I", "-U", "+U", "-D"})
    assert sorted(java.stream(warehouse, "db.t", 1), key=_change_order) == sorted(ours, key=_change_order)
