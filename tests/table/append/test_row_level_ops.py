"""DELETE, UPDATE and MERGE on append tables, against a model, on every kind of append table
(unaware and fixed buckets, partitioned or not, with and without deletion vectors): each lands
as one OVERWRITE snapshot; with deletion vectors the rows are marked in the files' vectors
(no data file rewritten) and updated rows written anew; scans, change streams and compaction
then leave the deleted rows out; races with compaction and other deletes fail and change
nothing; bad merges write nothing."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import CommitConflictError, DataError, OptionError, SchemaMismatchError
from changelake.table.append import compaction
from changelake.table.commit import overwrite
from changelake.table.read import deletion_vectors, live_files

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("name", pa.string()), ("dt", pa.string())])
KINDS = {
    "unaware": {},
    "unaware, deletion vectors": {"deletion-vectors.enabled": "true"},
    "fixed": {"bucket": "2", "bucket-key": "id"},
    "fixed, deletion vectors": {"bucket": "2", "bucket-key": "id", "deletion-vectors.enabled": "true"},
}
CASES = [pytest.param(kind, partitioned, id=f"{kind}{', partitioned' if partitioned else ''}")
         for kind in KINDS for partitioned in (False, True)]
Row = tuple[int, int | None, str | None, str]


def make(tmp_path: Path, kind: str, *, partitioned: bool, name: str = "t") -> cl.Table:
    # write-only: the fixed-bucket writers' own compactions would hide what the operations do to files
    return cl.Catalog(str(tmp_path)).create_table(f"db.{name}", SCHEMA, partition_keys=["dt"] if partitioned else [],
                                                  options={**KINDS[kind], "write-only": "true"})


def rows_of(ids: list[int], *, v: int, name: str) -> pa.Table:
    return pa.table({"id": ids, "v": [v + i for i in ids], "name": [f"{name}{i}" for i in ids],
                     "dt": [f"d{i % 3}" for i in ids]}, schema=SCHEMA)


def as_rows(table: pa.Table) -> list[Row]:
    return [(r["id"], r["v"], r["name"], r["dt"]) for r in table.to_pylist()]


def state(table: cl.Table) -> Counter[Row]:
    return Counter(as_rows(table.scan().to_arrow()))


def data_files(table: cl.Table) -> set[str]:
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    return {e.file.file_name for e in live_files.live_entries(table.context, snapshot)}


def vectors(table: cl.Table) -> int:
    """How many rows the latest snapshot's deletion vectors mark."""
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    files = deletion_vectors.snapshot_vectors(table.context, snapshot)
    return sum(len(v) for bucket in files.values() for v in deletion_vectors.bucket_vectors(table.context,
                                                                                              bucket).values())


@pytest.mark.parametrize(("kind", "partitioned"), CASES)
def test_deletes_and_updates_follow_the_model(tmp_path: Path, kind: str, partitioned: bool) -> None:
    table = make(tmp_path, kind, partitioned=partitioned)
    with_vectors = "deletion vectors" in kind
    model: Counter[Row] = Counter()
    for step in range(3):
        batch = rows_of([*range(step * 12, step * 12 + 12), 5], v=100 * step, name="n")  # id 5 repeats
        table.write(batch)
        model.update(as_rows(batch))
    rng = random.Random(kind)
    for step in range(6):
        files_before = data_files(table)
        low = rng.randrange(36)
        if step % 2 == 0:
            landed = table.delete(f"id >= {low} AND id < {low + 5}")
            gone = [r for r in model if low <= r[0] < low + 5]
            for r in gone:
                del model[r]
            if with_vectors and landed is not None:
                assert data_files(table) == files_before  # only vectors changed
        else:
            moved = {"id": pc.field("id") + 100} if step == 3 else {}  # a new bucket-key value: another bucket
            landed = table.update(f"id >= {low} AND id < {low + 8}", set={"name": f"u{step}", **moved})
            changed = [r for r in model if low <= r[0] < low + 8]
            for r in changed:
                count = model.pop(r)
                model[(r[0] + 100 if moved else r[0], r[1], f"u{step}", r[3])] += count
            if with_vectors and landed is not None:
                assert data_files(table) >= files_before  # old files stay, marked; new values in new files
        assert state(table) == model, f"step {step}"
        if landed is not None:
            assert landed.commit_kind is cl.CommitKind.OVERWRITE
            assert (landed.index_manifest is not None) == with_vectors
    assert (vectors(table) > 0) == with_vectors
    # a fresh stream's first read and a compaction leave the deleted rows out
    streamed = pa.concat_tables([b.data for b in table.stream(mode="latest-full")])
    assert Counter(as_rows(streamed.drop_columns(["rowkind"]))) == model
    table.compact(full=True)
    assert state(table) == model
    if with_vectors:
        assert vectors(table) == 0 or kind.startswith("fixed")  # a fixed bucket keeps its big files


@pytest.mark.parametrize(("kind", "partitioned"), CASES)
def test_merge_runs_every_clause_as_the_model(tmp_path: Path, kind: str, partitioned: bool) -> None:
    table = make(tmp_path, kind, partitioned=partitioned)
    table.write(rows_of([1, 2, 3, 4, 5, 6], v=0, name="a"))
    table.write(rows_of([7, 8, 9], v=0, name="b"))
    before = table.latest_snapshot()
    source = pa.table({"id": [2, 3, 7, 10, 11], "v": [1, 0, 5, 50, 60], "name": ["x", "x", "x", "new", "new"],
                       "dt": ["d2", "d0", "d1", "d1", "d2"]}, schema=SCHEMA)
    landed = (table.merge(source, on=["id"])
              .when_matched_delete(condition="source.v = 0")
              .when_matched_update({"v": pc.field("target.v") + pc.field("source.v"), "name": "merged"})
              .when_not_matched_insert(condition=pc.field("source.id") < 11)
              .when_not_matched_by_source_delete(condition="target.id >= 8")
              .execute())
    assert landed is not None and landed.commit_kind is cl.CommitKind.OVERWRITE
    assert before is not None and landed.id == before.id + 1  # one commit
    assert sorted(state(table).elements()) == [
        (1, 1, "a1", "d1"), (2, 3, "merged", "d2"), (4, 4, "a4", "d1"), (5, 5, "a5", "d2"), (6, 6, "a6", "d0"),
        (7, 12, "merged", "d1"), (10, 50, "new", "d1")]
    # streams skip the OVERWRITE, as Paimon's streams of append tables do
    assert table.changes(before.id, landed.id).to_arrow().num_rows == 0

    # update all from the source moves a row to its new partition; insert all; match on two columns
    table.merge(pa.table({"id": [1, 12], "v": [9, 9], "name": ["m", "m"], "dt": ["d0", "d0"]}, schema=SCHEMA),
                on=["id"]).when_matched_update().when_not_matched_insert().execute()
    table.merge(pa.table({"id": [4, 5], "name": ["a4", "zz"]}), on=["id", "name"]).when_matched_delete().execute()
    assert sorted(state(table).elements()) == [
        (1, 9, "m", "d0"), (2, 3, "merged", "d2"), (5, 5, "a5", "d2"), (6, 6, "a6", "d0"),
        (7, 12, "merged", "d1"), (10, 50, "new", "d1"), (12, 9, "m", "d0")]
    assert table.merge(pa.table({"id": [99]}), on=["id"]).when_matched_delete().execute() is None
    assert table.scan(filter="dt = 'd0'").to_arrow().num_rows == 3


def test_merge_into_an_empty_append_table_inserts(tmp_path: Path) -> None:
    table = make(tmp_path, "fixed, deletion vectors", partitioned=True)
    landed = table.merge(rows_of([1, 2], v=0, name="a"), on=["id"]).when_not_matched_insert().execute()
    assert landed is not None and sorted(state(table).elements()) == [(1, 1, "a1", "d1"), (2, 2, "a2", "d2")]


def test_bad_merges_write_nothing(tmp_path: Path) -> None:
    table = make(tmp_path, "unaware, deletion vectors", partitioned=True)
    table.write(rows_of([1, 2, 3], v=0, name="a"))
    keyed = cl.Catalog(str(tmp_path)).create_table("db.k", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    keyed.write(rows_of([1], v=0, name="a"))
    latest, keyed_latest = table.latest_snapshot(), keyed.latest_snapshot()
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: table.merge(pa.table({"id": [1]})).when_matched_delete().execute(), OptionError, r"on=\[\.\.\.\]"),
        (lambda: table.merge(pa.table({"id": [1, 1], "v": [1, 2]}), on=["id"]).when_matched_update().execute(),
         DataError, "more than one row"),
        (lambda: table.merge(pa.table({"id": [1]}), on=["nope"]).when_matched_delete().execute(),
         SchemaMismatchError, "'nope'"),
        (lambda: table.merge(pa.table({"v": [1]}), on=["id"]).when_matched_delete().execute(),
         SchemaMismatchError, "lacks the columns"),
        (lambda: table.merge(pa.table({"id": [1]}), on="id").when_matched_delete().execute(), OptionError,
         "list of column names"),
        (lambda: table.merge(pa.table({"id": [1]}), on=["id"]).when_matched_update({"dt": "d9"}).execute(),
         SchemaMismatchError, "partition column"),
        (lambda: table.merge(pa.table({"id": [1]}), on=["id"]).when_matched_update({"v": "many"}).execute(),
         SchemaMismatchError, "not a value of type int64"),
        (lambda: keyed.merge(pa.table({"id": [1], "v": [2]}), on=["v"]).when_matched_delete().execute(),
         OptionError, "primary key"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert table.latest_snapshot() == latest and keyed.latest_snapshot() == keyed_latest
    # on= naming the primary key is the default made explicit
    assert keyed.merge(pa.table({"id": [1]}), on=["id"]).when_matched_delete().execute() is not None
    assert keyed.scan().to_arrow().num_rows == 0


def _files_on_disk(table: cl.Table) -> set[str]:
    return {p.name for p in Path(table.location).rglob("*") if p.is_file() and p.parent.name != "snapshot"}


@pytest.mark.parametrize("kind", ["unaware, deletion vectors", "fixed, deletion vectors"])
def test_a_delete_racing_a_compaction_or_another_delete_is_void(tmp_path: Path, kind: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    table = make(tmp_path, kind, partitioned=False)
    for i in range(4):
        table.write(rows_of([i, i + 10, i + 20, i + 30], v=0, name="a"))
    table.delete("id >= 20")  # the buckets have vectors already
    real = overwrite.commit_rewrite
    races = [(lambda: table.compact(full=True), set()), (lambda: table.delete("id = 11 OR id = 12"), {11, 12})]
    for race, deleted in races:
        model = state(table)
        on_disk = _files_on_disk(table)

        def raced(*args: Any, race: Any = race, **kwargs: Any) -> Any:
            monkeypatch.setattr(overwrite, "commit_rewrite", real)
            assert race() is not None  # another process landed first, after this delete read the files
            return real(*args, **kwargs)

        monkeypatch.setattr(overwrite, "commit_rewrite", raced)
        with pytest.raises(CommitConflictError, match="run the operation again"):
            table.delete("id = 1 OR id = 2 OR id = 13")
        assert state(table) == Counter({r: n for r, n in model.items() if r[0] not in deleted})
        # nothing of the void delete is left: what is new on disk is the race's
        assert not (_files_on_disk(table) - on_disk) - _named_by(table)
    assert sorted(r[0] for r in state(table).elements()) == [0, 1, 2, 3, 10, 13]


def _named_by(table: cl.Table) -> set[str]:
    """Names of the files the latest snapshot names (data, index, manifests)."""
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    ctx = table.context
    names = {e.file.file_name for e in live_files.live_entries(ctx, snapshot)}
    names |= {e.file.file_name for e in deletion_vectors.index_entries(ctx, snapshot)}
    names |= {snapshot.base_manifest_list, snapshot.delta_manifest_list}
    if snapshot.index_manifest is not None:
        names.add(snapshot.index_manifest)
    names |= {m.file_name for m in live_files.data_manifests(ctx, snapshot)}
    names |= {m.file_name for m in live_files.manifest_list(ctx, snapshot.delta_manifest_list)}
    return names


def test_a_compaction_racing_a_delete_is_void(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other order: the delete lands while the compaction rewrites the files it marks."""
    table = make(tmp_path, "unaware, deletion vectors", partitioned=False)
    for i in range(3):
        table.write(rows_of([i, i + 10], v=0, name="a"))
    real = compaction.rewrite
    raced = []

    def rewrite(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            raced.append(table.delete("id = 11"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compaction, "rewrite", rewrite)
    with pytest.raises(CommitConflictError, match="concurrent delete"):
        table.compact(full=True)
    assert sorted(r[0] for r in state(table).elements()) == [0, 1, 2, 10, 12]
