"""Value statistics (``metadata.stats-mode``, ``fields.<name>.stats-mode``) and the files they
let a read skip: append tables, deletion-vector tables and primary-key files no other file
shares keys with; never a file whose rows a merge could shadow or be shadowed by."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import OptionError
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                    pa.field("ts", pa.timestamp("us")), pa.field("score", pa.float64())])


def _batch(lo: int, n: int = 100, *, prefix: str = "name") -> pa.Table:
    ids = list(range(lo, lo + n))
    return pa.table({"id": ids, "name": [f"{prefix}-{i:06d}" for i in ids],
                     "ts": pa.array([i * 1_000_000 for i in ids], pa.timestamp("us")),
                     "score": [None if i % 10 == 0 else i / 2 for i in ids]}, schema=SCHEMA)


def _files(scan: cl.Scan) -> int:
    return sum(len(split.files) for split in scan.plan())


def _ids(scan: cl.Scan) -> list[int]:
    return sorted(scan.to_arrow().column("id").to_pylist())


def _append(tmp_path: Path, options: dict[str, str] | None = None, batches: int = 4) -> cl.Table:
    table = cl.Catalog(str(tmp_path)).create_table("db.a", SCHEMA, options={"bucket": "-1", **(options or {})})
    for b in range(batches):
        table.write(_batch(b * 1000))
    return table


def _stats(table: cl.Table) -> list[tuple[str, str, str]]:
    files = sorted(table.system("files").to_pylist(), key=lambda r: r["min_sequence_number"])
    return [(r["null_value_counts"], r["min_value_stats"], r["max_value_stats"]) for r in files]


@pytest.mark.parametrize("file_format", ["parquet", "orc", "avro"])
def test_append_table_skips_files_by_every_column_kind(tmp_path: Path, file_format: str) -> None:
    table = _append(tmp_path, {"file.format": file_format})
    assert _files(table.scan()) == 4
    by_id = table.scan(filter=(pc.field("id") >= 2010) & (pc.field("id") < 2020))
    assert _files(by_id) == 1 and _ids(by_id) == list(range(2010, 2020))
    by_time = table.scan(filter=pc.field("ts") > pa.scalar(3050 * 1_000_000, pa.timestamp("us")))
    assert _files(by_time) == 1 and _ids(by_time) == list(range(3051, 3100))
    by_name = table.scan(filter=pc.field("name") == "name-001042")
    assert _files(by_name) == 1 and _ids(by_name) == [1042]
    by_score = table.scan(filter=pc.field("score") < 30.0)
    assert _files(by_score) == 1 and _ids(by_score) == [i for i in range(60) if i % 10]
    # nulls are left out of min and max: an is-null filter keeps every file holding some
    assert _files(table.scan(filter=pc.field("score").is_null())) == 4
    assert _files(table.scan(filter=pc.field("id") > 10_000)) == 0


def test_stats_modes_and_the_files_table(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    rows = pa.table({"id": [1, 2], "name": ["a" * 20, None], "ts": pa.array([5, 6], pa.timestamp("us")),
                     "score": [1.5, 2.5]}, schema=SCHEMA)
    shown = {}
    for mode in ("none", "counts", "truncate(4)", "full"):
        table = catalog.create_table(f"db.{mode[:4]}", SCHEMA, options={"metadata.stats-mode": mode})
        table.write(rows)
        shown[mode] = _stats(table)[0]
    assert shown["none"] == ("{id=null, name=null, score=null, ts=null}",) + (
        "{id=null, name=null, score=null, ts=null}",) * 2
    assert shown["counts"] == ("{id=0, name=1, score=0, ts=0}",) + ("{id=null, name=null, score=null, ts=null}",) * 2
    assert shown["full"] == ("{id=0, name=1, score=0, ts=0}",
                             f"{{id=1, name={'a' * 20}, score=1.5, ts=1970-01-01T00:00:00.000005}}",
                             f"{{id=2, name={'a' * 20}, score=2.5, ts=1970-01-01T00:00:00.000006}}")
    # truncate(N) cuts strings to N characters, the max rounded up to stay an upper bound
    assert shown["truncate(4)"][1:] == ("{id=1, name=aaaa, score=1.5, ts=1970-01-01T00:00:00.000005}",
                                        "{id=2, name=aaab, score=2.5, ts=1970-01-01T00:00:00.000006}")
    assert _stats(catalog.get_table("db.none"))[0] == shown["none"]


def test_truncated_strings_still_bound_and_find_their_rows(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.s", SCHEMA, options={"metadata.stats-mode": "truncate(3)"})
    table.write(pa.table({"id": [1, 2], "name": ["abcz", "abzzzz"], "ts": [None, None], "score": [None, None]},
                         schema=SCHEMA))
    # a max whose every code point is the last one cannot be rounded up: no bounds (as Paimon)
    table.write(pa.table({"id": [3], "name": ["\U0010ffff" * 5], "ts": [None], "score": [None]}, schema=SCHEMA))
    table.write(pa.table({"id": [4], "name": ["b"], "ts": [None], "score": [None]}, schema=SCHEMA))
    assert [s[1:] for s in _stats(table)] == [
        ("{id=1, name=abc, score=null, ts=null}", "{id=2, name=ab{, score=null, ts=null}"),
        ("{id=3, name=null, score=null, ts=null}", "{id=3, name=null, score=null, ts=null}"),
        ("{id=4, name=b, score=null, ts=null}", "{id=4, name=b, score=null, ts=null}"),
    ]
    assert _ids(table.scan(filter=pc.field("name") == "abzzzz")) == [2]
    assert _files(table.scan(filter=pc.field("name") == "abzzzz")) == 2  # and the unbounded file
    # the all-null columns of every file: an is-not-null filter on them skips everything
    assert _files(table.scan(filter=pc.field("score").is_valid())) == 0
    assert _files(table.scan(filter=pc.field("name") > "c")) == 1  # only the unbounded file


def test_per_field_mode_overrides_the_table_mode(tmp_path: Path) -> None:
    table = _append(tmp_path, {"metadata.stats-mode": "full", "fields.name.stats-mode": "none",
                               "fields.ts.stats-mode": "counts"}, batches=2)
    nulls, low, _ = _stats(table)[0]
    assert nulls == "{id=0, name=null, score=10, ts=0}"
    assert low == "{id=0, name=null, score=0.5, ts=null}"
    assert _files(table.scan(filter=pc.field("name") == "name-001042")) == 2
    assert _files(table.scan(filter=pc.field("ts") > pa.scalar(1_050_000_000, pa.timestamp("us")))) == 2
    assert _files(table.scan(filter=pc.field("id") == 1042)) == 1


def test_bad_stats_modes_are_refused(tmp_path: Path) -> None:
    catalog = cl.Catalog(str(tmp_path))
    with pytest.raises(OptionError, match=r"metadata\.stats-mode.*must be positive"):
        catalog.create_table("db.x", SCHEMA, options={"metadata.stats-mode": "truncate(0)"})
    with pytest.raises(OptionError, match=r"fields\.name\.stats-mode.*'fulll'"):
        catalog.create_table("db.x", SCHEMA, options={"fields.name.stats-mode": "fulll"})
    with pytest.raises(OptionError, match=r"fields\.nmae\.stats-mode.*did you mean 'name'"):
        catalog.create_table("db.x", SCHEMA, options={"fields.nmae.stats-mode": "full"})
    for key, value in (("metadata.stats-mode.per.level", "x:full"), ("metadata.stats-mode.per.level", "0:fulll"),
                       ("changelog-file.stats-mode", "truncate(0)")):
        with pytest.raises(OptionError, match=key.replace(".", r"\.")):
            catalog.create_table("db.x", SCHEMA, options={key: value})
    assert not (tmp_path / "db.db" / "x").exists()
    table = catalog.create_table("db.y", SCHEMA)
    with pytest.raises(OptionError, match=r"fields\.nope\.stats-mode"):
        table.set_options({"fields.nope.stats-mode": "full"})
    assert table.options.get("fields.nope.stats-mode") is None


def test_files_without_stats_are_never_skipped(tmp_path: Path) -> None:
    table = _append(tmp_path, {"metadata.stats-mode": "none"}, batches=2)
    assert _files(table.scan(filter=pc.field("id") == 1042)) == 2
    table.set_options({"metadata.stats-mode": "truncate(16)"})
    table.write(_batch(5000))
    table.write(_batch(6000))
    scan = table.scan(filter=pc.field("id") == 1042)
    assert _files(scan) == 2 and _ids(scan) == [1042]  # the two old files, read; the new ones skipped


def test_primary_key_table_without_vectors_never_skips_overlapping_files(tmp_path: Path) -> None:
    """Key 1 is written with score 100, then updated to 5: a filter score >= 50 must find no
    row. Skipping the newer file (whose score 5 fails) would read the old version back."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.pk", SCHEMA, primary_keys=["id"], options={"bucket": "1", "num-sorted-run.compaction-trigger": "10"})
    table.write(pa.table({"id": [1, 2], "name": ["a", "b"], "ts": [None, None], "score": [100.0, 60.0]},
                         schema=SCHEMA))
    table.write(pa.table({"id": [1], "name": ["a"], "ts": [None], "score": [5.0]}, schema=SCHEMA))
    high = table.scan(filter=pc.field("score") >= 50.0)
    assert _files(high) == 2
    assert _ids(high) == [2]
    low = table.scan(filter=pc.field("score") < 50.0)
    assert _files(low) == 2 and _ids(low) == [1]
    # a file whose keys no other file holds is read alone: its values skip it
    table.write(pa.table({"id": [10], "name": ["z"], "ts": [None], "score": [7.0]}, schema=SCHEMA))
    assert _files(table.scan(filter=pc.field("score") >= 50.0)) == 2
    assert _files(table.scan(filter=pc.field("score") == 7.0)) == 3


def test_deletion_vector_table_skips_by_values_and_applies_vectors(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.dv", SCHEMA, primary_keys=["id"],
        options={"bucket": "1", "deletion-vectors.enabled": "true", "target-file-size": "4 kb",
                 "write-buffer-size": "64 kb"})
    table.write(pa.concat_tables([_batch(b * 1000, 1000) for b in range(4)]))
    # the old version of key 2100 (ts 2100 s) moves to ts 1 s: a vector hides the old row
    table.write(pa.table({"id": [2100], "name": ["moved"], "ts": pa.array([1_000_000], pa.timestamp("us")),
                          "score": [0.0]}, schema=SCHEMA))
    total = _files(table.scan())
    assert total >= 4
    window = (pc.field("ts") >= pa.scalar(2050 * 1_000_000, pa.timestamp("us"))) & \
        (pc.field("ts") < pa.scalar(2150 * 1_000_000, pa.timestamp("us")))
    scan = table.scan(filter=window)
    assert _files(scan) == 1
    assert _ids(scan) == [i for i in range(2050, 2150) if i != 2100]
    moved = table.scan(filter=pc.field("ts") < pa.scalar(2_000_000, pa.timestamp("us")))
    assert _ids(moved) == [0, 1, 2100]
    assert _files(moved) == 2  # the first file and the moved row's


def test_read_optimized_scan_skips_top_level_files(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.ro", SCHEMA, primary_keys=["id"], options={"bucket": "1", "target-file-size": "4 kb"})
    table.write(pa.concat_tables([_batch(b * 1000, 1000) for b in range(4)]))
    table.compact(full=True)
    everything = _files(table.scan(read_optimized=True))
    scan = table.scan(read_optimized=True, filter=pc.field("name") == "name-003001")
    assert everything >= 4 and _files(scan) == 1
    assert _ids(scan) == [3001]


def test_stats_follow_renamed_columns_and_not_changed_types(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("qty", pa.int32()), pa.field("score", pa.float64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.e", schema, options={"bucket": "-1"})
    for lo in (0, 1000):
        table.write(pa.table({"id": [lo, lo + 1], "qty": pa.array([lo, lo + 1], pa.int32()),
                              "score": [lo / 2, lo / 2 + 1]}, schema=schema))
    with table.update_schema() as update:
        update.rename_column("score", "points")
        update.update_column("qty", pa.int64())
    renamed = table.scan(filter=pc.field("points") < 30.0)
    assert _files(renamed) == 1 and _ids(renamed) == [0, 1]
    # the old files' qty bounds are int32's: not used for the int64 column (both files read)
    widened = table.scan(filter=pc.field("qty") >= 1000)
    assert _files(widened) == 2 and _ids(widened) == [1000, 1001]


@pytest.mark.parametrize("dense", [True, False])
def test_dense_store_records_only_the_columns_with_statistics(tmp_path: Path, dense: bool) -> None:
    """``metadata.stats-dense-store`` (Paimon's default true): with a ``none`` column the others
    alone are recorded and named; false records every column, the ``none`` one null."""
    table = _append(tmp_path, {"fields.name.stats-mode": "none", "metadata.stats-dense-store": str(dense).lower()},
                    batches=2)
    files = [f for split in table.scan().plan() for f in split.files]
    if dense:
        assert {f.value_stats_cols for f in files} == {("id", "ts", "score")}
    else:
        assert {f.value_stats_cols for f in files} == {None}
    # the files table and the scans read both layouts alike
    assert _stats(table)[0][0] == "{id=0, name=null, score=10, ts=0}"
    assert _files(table.scan(filter=pc.field("id") == 1042)) == 1
    assert _files(table.scan(filter=pc.field("name") == "name-001042")) == 2
    assert _ids(table.scan(filter=pc.field("name") == "name-001042")) == [1042]
    silent = cl.Catalog(str(tmp_path)).create_table(
        "db.n", SCHEMA, options={"bucket": "-1", "metadata.stats-mode": "none",
                                 "metadata.stats-dense-store": str(dense).lower()})
    silent.write(_batch(0))
    [only] = [f for split in silent.scan().plan() for f in split.files]
    assert only.value_stats_cols == (() if dense else None)
    assert _files(silent.scan(filter=pc.field("id") == 5000)) == 1  # nothing known: read


def test_stats_mode_per_level_and_of_changelog_files(tmp_path: Path) -> None:
    """``metadata.stats-mode.per.level`` sets a level's mode (a column's own mode still wins);
    ``changelog-file.stats-mode`` the changelog files'."""
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.pk", SCHEMA, primary_keys=["id"],
        options={"bucket": "1", "metadata.stats-mode.per.level": "0:none", "fields.score.stats-mode": "full",
                 "changelog-producer": "input", "changelog-file.stats-mode": "counts", "write-only": "true"})
    table.write(_batch(0))
    [level0] = [f for split in table.scan().plan() for f in split.files]
    assert level0.level == 0 and level0.value_stats_cols == ("score",)
    snap = table.latest_snapshot()
    assert snap is not None and snap.changelog_manifest_list is not None
    ctx = table.context
    [changelog] = [e.file for m in live_files.manifest_list(ctx, snap.changelog_manifest_list)
                   for e in live_files.manifest_entries(ctx, m.file_name)]
    # counts: every column recorded, no bounds but score's own full mode
    assert changelog.value_stats_cols is None
    assert changelog.value_stats.null_counts == (0, 0, 0, 10)
    table.write(_batch(50))
    table.compact(full=True)  # rewrites the two overlapping files (one alone would move up as it is)
    [top] = [f for split in table.scan().plan() for f in split.files]
    assert top.level > 0 and top.value_stats_cols is None  # the default truncate(16) above level 0
    assert _files(table.scan(filter=pc.field("name") == "nope")) == 0


@pytest.mark.parametrize("primary_keys", [[], ["id"]])
def test_nan_rows_are_not_hidden_by_the_bounds(tmp_path: Path, primary_keys: list[str]) -> None:
    # min and max skip NaN: a file of [1.0, NaN] was bounded to score = 1.0 (and one of [NaN] to
    # NaN..NaN), so filters the NaN rows match (!=, NOT, is_nan, IN (NaN)) skipped the file
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("score", pa.float64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema, primary_keys=primary_keys,
                                                   options={"bucket": "1"} if primary_keys else {})
    table.write(pa.table({"id": [1, 2], "score": [1.0, float("nan")]}, schema=schema))
    table.write(pa.table({"id": [3], "score": [float("nan")]}, schema=schema))
    score = pc.field("score")
    for expression in (score != 1.0, ~(score == 1.0), "score <> 1.0", "NOT score = 1.0", score.is_nan(),
                       score.isin([float("nan")])):
        assert _ids(table.scan(filter=expression)) == [2, 3], expression
    assert _ids(table.scan(filter=score > 0.5)) == [1]
    # a file without NaN keeps its bounds
    table.write(pa.table({"id": [4], "score": [7.0]}, schema=schema))
    assert _files(table.scan(filter=score < 5.0)) == _files(table.scan()) - 1


def test_a_filter_comparing_with_nan_skips_no_file_wrongly(tmp_path: Path) -> None:
    # Arrow's simplification orders NaN above every bound: NOT (score < NaN), true for every
    # non-null score, was taken as false for a file bounded to [0.5, 2.0] and the file skipped
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("score", pa.float64())])
    table = cl.Catalog(str(tmp_path)).create_table("db.t", schema)
    table.write(pa.table({"id": [1, 2], "score": [0.5, 2.0]}, schema=schema))
    nan = pc.scalar(float("nan"))
    for expression in (~(pc.field("score") < nan), ~(pc.field("score") <= nan), ~(pc.field("id") < nan)):
        assert _ids(table.scan(filter=expression)) == [1, 2], expression
    assert _ids(table.scan(filter=pc.field("score") < nan)) == []
