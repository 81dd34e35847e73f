"""The rest of the ``changelake`` command, run in this process (``app([...])``, output captured
at the file descriptors) to keep the suite fast: formats, tags, orphan deletion and the errors
of each command."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import changelake
from changelake.cli.main import app

SCHEMA = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("name", pa.string())])


def run(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of one command."""
    with pytest.raises(SystemExit) as exited:
        app(list(args))
    out, err = capfd.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), out, err


@pytest.fixture
def table(tmp_path: Path) -> changelake.Table:
    made = changelake.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, ["id"])
    made.write(pa.table({"id": [1, 2, 3], "d": [dt.date(2024, 1, 1), None, dt.date(2024, 3, 1)],
                         "name": ["a", "b", "it's"]}, schema=SCHEMA))
    made.write(pa.table({"id": [2], "d": [dt.date(2024, 2, 2)], "name": ["b2"]}, schema=SCHEMA))
    return made


def test_formats(capfd: pytest.CaptureFixture[str], table: changelake.Table, tmp_path: Path) -> None:
    code, out, _ = run(capfd, "scan", table.location, "--format", "json", "--where", "id in (2, 3)")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"id": 2, "d": "2024-02-02", "name": "b2"}, {"id": 3, "d": "2024-03-01", "name": "it's"}]

    target = tmp_path / "rows.parquet"
    assert run(capfd, "scan", table.location, "--snapshot", "1", "--format", "parquet", "--output", str(target))[0] == 0
    assert pq.read_table(target).equals(table.scan(1).to_arrow())

    code, out, _ = run(capfd, "scan", table.location, "--limit", "2", "--format", "csv", "--columns", "name,id")
    assert out.splitlines() == ['"name","id"', '"a",1', '"b2",2']

    code, out, _ = run(capfd, "scan", table.location, "--limit", "0", "--format", "csv")
    assert out.splitlines() == ['"id","d","name"']

    code, out, _ = run(capfd, "scan", table.location, "--format", "table", "--where", "d is null", "--snapshot", "1")
    assert code == 0
    row = next(line for line in out.splitlines() if "│" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == ["2", "NULL", "b"]


def test_limit_stops_reading(capfd: pytest.CaptureFixture[str], tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    made = changelake.Catalog(str(tmp_path)).create_table("db.wide", SCHEMA, ["id"], options={"bucket": "4"})
    made.write(pa.table({"id": list(range(40)), "d": [None] * 40, "name": ["n"] * 40}, schema=SCHEMA))
    assert len(made.scan().plan()) == 4
    read: list[changelake.Split] = []
    real = changelake.Scan.read_split

    def counting(scan: changelake.Scan, split: changelake.Split) -> pa.Table:
        read.append(split)
        return real(scan, split)

    monkeypatch.setattr(changelake.Scan, "read_split", counting)
    code, out, _ = run(capfd, "scan", made.location, "--limit", "3", "--format", "csv")
    assert (code, len(out.splitlines())) == (0, 4)
    assert len(read) == 1
    code, out, _ = run(capfd, "scan", made.location, "--format", "csv")
    assert (code, len(out.splitlines()), len(read)) == (0, 41, 5)


def test_tags(capfd: pytest.CaptureFixture[str], table: changelake.Table) -> None:
    assert run(capfd, "tag", "create", table.location, "first", "--snapshot", "1")[1] == \
        "created tag first on snapshot 1\n"
    assert run(capfd, "tag", "create", table.location, "[last]")[1] == "created tag [last] on snapshot 2\n"
    code, out, _ = run(capfd, "tag", "list", table.location)
    assert code == 0
    first = next(r for r in out.splitlines() if "first" in r)
    assert [c.strip() for c in first.strip("│ ").split("│")][:2] == ["first", "1"]
    assert "[last]" in out
    code, out, _ = run(capfd, "scan", table.location, "--tag", "first", "--format", "csv", "--columns", "name")
    assert out.splitlines() == ['"name"', '"a"', '"b"', '"it\'s"']
    assert run(capfd, "tag", "delete", table.location, "first")[1] == "deleted tag first\n"
    assert list(table.tags()) == ["[last]"]


def test_branches(capfd: pytest.CaptureFixture[str], table: changelake.Table) -> None:
    assert run(capfd, "branch", "create", table.location, "dev", "--snapshot", "1")[1] == \
        "created branch dev at snapshot 1\n"
    assert run(capfd, "branch", "create", table.location, "empty")[1] == "created branch empty\n"
    table.branch("dev").write(pa.table({"id": [9], "d": [None], "name": ["dev"]}, schema=SCHEMA))
    code, out, _ = run(capfd, "branch", "list", table.location)
    assert code == 0
    dev = next(r for r in out.splitlines() if "dev" in r)
    assert [c.strip() for c in dev.strip("│ ").split("│")][:3] == ["dev", "2", "4"]
    warehouse = str(Path(table.location).parents[1])
    code, out, _ = run(capfd, "scan", "-w", warehouse, "db.t$branch_dev", "--format", "csv", "--columns", "name")
    assert out.splitlines() == ['"name"', '"a"', '"b"', '"it\'s"', '"dev"']
    code, _, err = run(capfd, "branch", "create", table.location, "123")
    assert code == 1 and "branch name '123' is a pure number" in err
    code, _, err = run(capfd, "branch", "create", table.location, "x", "--tag", "a", "--snapshot", "1")
    assert code == 2 and "at most one of --tag and --snapshot" in err
    assert run(capfd, "branch", "fast-forward", table.location, "dev")[1] == \
        "fast-forwarded db.t to branch dev (snapshot 2)\n"
    assert sorted(table.scan().to_arrow().column("name").to_pylist()) == ["a", "b", "dev", "it's"]
    assert run(capfd, "branch", "delete", table.location, "dev")[1] == "deleted branch dev\n"
    code, _, err = run(capfd, "branch", "delete", table.location, "dev")
    assert code == 1 and "has no branch 'dev'" in err
    assert table.list_branches() == ["empty"]


def test_remove_orphans_deletes_only_old_files(capfd: pytest.CaptureFixture[str], table: changelake.Table) -> None:
    old, new = (Path(table.location) / "bucket-0" / f"data-{n}.parquet" for n in ("old", "new"))
    for orphan in (old, new):
        orphan.write_bytes(b"left behind")
    stamp = time.time() - 3 * 86400
    os.utime(old, (stamp, stamp))
    code, out, _ = run(capfd, "remove-orphans", table.location)  # default: older than one day
    assert (code, out.splitlines()) == (0, [str(old), "deleted 1 orphan files"])
    assert not old.exists() and new.exists()


def test_rollback_and_dry_run(capfd: pytest.CaptureFixture[str], table: changelake.Table) -> None:
    table.create_tag("v1", 1)
    orphan = Path(table.location) / "bucket-0" / "data-orphan.parquet"
    orphan.write_bytes(b"left behind")
    stamp = time.time() - 2 * 3600
    os.utime(orphan, (stamp, stamp))
    code, out, _ = run(capfd, "remove-orphans", table.location, "--older-than", "1 h", "--dry-run")
    assert (code, out.splitlines()) == (0, [str(orphan), "would delete 1 orphan files"])
    assert orphan.exists()
    assert run(capfd, "remove-orphans", table.location, "--older-than", "3 h")[1] == "deleted 0 orphan files\n"

    assert run(capfd, "rollback", table.location, "--snapshot", "2")[1] == "rolled back to snapshot 2 (4 records)\n"
    code, out, _ = run(capfd, "rollback", table.location, "--tag", "v1")
    assert (code, out) == (0, "rolled back to snapshot 1 (3 records)\n")
    assert table.scan().to_arrow()["name"].to_pylist() == ["a", "b", "it's"]


def test_expire_reports_nothing_to_do(capfd: pytest.CaptureFixture[str], table: changelake.Table) -> None:
    code, out, _ = run(capfd, "expire", table.location)
    assert (code, out.splitlines()) == (0, ["expired 0 snapshots",
                                            "deleted 0 data files, 0 changelog files, 0 manifests"])
    code, out, _ = run(capfd, "expire", table.location, "--older-than", "0 ms", "--retain-min", "1")
    assert out.splitlines()[0] == "expired 1 snapshots (1..1)"


def test_changes_formats(capfd: pytest.CaptureFixture[str], table: changelake.Table) -> None:
    code, out, _ = run(capfd, "changes", table.location, "--from", "1", "--format", "json")
    assert code == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {"rowkind": "+I", "id": 2, "d": "2024-02-02", "name": "b2"}]
    code, out, _ = run(capfd, "changes", table.location, "--from", "0", "--to", "1", "--format", "csv",
                       "--where", "name = 'a'")
    assert code == 0
    assert out.splitlines() == ['"rowkind","id","d","name"', '"+I",1,2024-01-01,"a"']


@pytest.mark.parametrize(("args", "code", "message"), [
    (["scan", "{t}", "--where", "nope > 1"], 2, "unknown column 'nope'"),
    (["scan", "{t}", "--where", "d > 'soon'"], 2, "'soon' is not a value of column 'd'"),
    (["scan", "{t}", "--format", "parquet"], 2, "--format parquet needs --output FILE"),
    (["scan", "{t}", "--snapshot", "9"], 1, "snapshot 9"),
    (["scan", "{t}", "--snapshot", "1", "--tag", "x"], 1, "give at most one of"),
    (["scan", "{t}", "--columns", "id,nope"], 1, "unknown columns ['nope']"),
    (["scan", "{t}", "-o", "novalue"], 2, "--storage-option takes KEY=VALUE"),
    (["scan", "--warehouse", "{w}", "nodb.t"], 1, "database nodb does not exist"),
    (["scan", "--warehouse", "{w}", "no-dot"], 1, "must be 'database.table'"),
    (["changes", "{t}", "--from", "1", "--to", "9"], 1, "snapshot 9 does not exist"),
    (["changes", "{t}", "--from", "1", "--to", "2", "--follow"], 2, "give --to or --follow"),
    (["remove-orphans", "{t}", "--older-than", "soon"], 2, "--older-than: 'soon' is not a duration"),
    (["expire", "{t}", "--older-than", "1 fortnight"], 2, "is not a duration"),
    (["rollback", "{t}"], 2, "give exactly one of --snapshot and --tag"),
    (["rollback", "{t}", "--tag", "nope"], 1, "nope"),
    (["tag", "delete", "{t}", "nope"], 1, "nope"),
    (["ls", "{w}/missing"], 1, "warehouse"),
    (["scan", "{t}", "--columns", "id,name,id"], 2, "--columns names 'id' more than once"),
    (["scan", "{t}", "--columns", "id,"], 2, "--columns: an empty column name in 'id,'"),
    (["scan", "{t}", "--where", "name < id"], 2, "< does not apply to column 'name' (string) and column 'id'"),
    (["scan", "nosuch://bucket/db.db/t"], 2, "nosuch://bucket/db.db/t: Protocol not known: nosuch"),
    (["ls", "nosuch://bucket/warehouse"], 2, "Protocol not known"),
    (["scan", "dbfs://host/wh/db.db/t", "-o", "token=x"], 2, "dbfs://host/wh/db.db/t (storage options ['token']): "),
    (["remove-orphans", "{t}", "--older-than", "99999999999 d"], 2, "is longer than 999999999 days"),
    (["expire", "{t}", "--retain-max", "0"], 2, "Invalid value for '--retain-max'"),
    (["show", "{t}", "--snapshots", "-1"], 2, "Invalid value for '--snapshots'"),
    (["scan", "{t}", "--format", "xml"], 2, "Invalid value for '--format'"),
    (["scan"], 2, "Missing argument 'TABLE'"),
    (["scan", "{t}", "--nope"], 2, "No such option: --nope"),
    (["nope"], 2, "No such command 'nope'"),
])
def test_errors(capfd: pytest.CaptureFixture[str], table: changelake.Table, args: list[str], code: int,
                message: str) -> None:
    warehouse = str(Path(table.location).parents[1])
    got, _, err = run(capfd, *(a.format(t=table.location, w=warehouse) for a in args))
    assert got == code, err
    if code:
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_an_unexpected_error_is_one_line_too(capfd: pytest.CaptureFixture[str], table: changelake.Table,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> changelake.Table:
        raise RuntimeError("a storage library's own error\nover two lines")

    monkeypatch.setattr("changelake.cli.common.open_table", broken)
    assert run(capfd, "show", table.location) == (
        1, "", "error: RuntimeError: a storage library's own error; over two lines\n")
    monkeypatch.setenv("CHANGELAKE_TRACEBACK", "1")  # for a bug report: the error with its traceback
    with pytest.raises(RuntimeError, match="over two lines"):
        app(["show", table.location])


def test_every_command_has_help(capfd: pytest.CaptureFixture[str]) -> None:
    for command in (["ls"], ["show"], ["scan"], ["changes"], ["compact"], ["rescale"], ["expire"], ["remove-orphans"],
                    ["rollback"], ["tag"], ["tag", "create"], ["tag", "delete"], ["tag", "list"], ["delete"],
                    ["truncate"], ["drop-partition"], ["expire-partitions"]):
        code, out, _ = run(capfd, *command, "--help")
        assert code == 0
        assert "Usage:" in out and len(out.splitlines()) > 5, command


DATED = pa.schema([pa.field("d", pa.date32(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                   pa.field("v", pa.int64())])


def _dated(tmp_path: Path, name: str, buckets: int, days: list[dt.date], rows: int) -> changelake.Table:
    """A table partitioned by date ``d``, its ``rows`` spread over ``days`` (``v`` = ``id``)."""
    made = changelake.Catalog(str(tmp_path)).create_table(f"db.{name}", DATED, ["d", "id"], partition_keys=["d"],
                                                          options={"bucket": str(buckets)})
    made.write(pa.table({"d": (days * rows)[:rows], "id": list(range(rows)), "v": list(range(rows))}, schema=DATED))
    return made


def test_rescale_rewrites_the_partitions_given(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    schema = DATED
    days = [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]
    made = _dated(tmp_path, "r", 2, days, 40)
    before = made.scan().to_arrow().sort_by("id")
    code, out, err = run(capfd, "rescale", made.location, "--bucket", "3", "--partition", "d=2024-01-02")
    assert (code, err) == (0, "")
    assert out == "rescaled to 3 buckets: snapshot 2 (40 records)\n"
    made.refresh()
    assert made.options["bucket"] == "3" and made.scan().to_arrow().sort_by("id").equals(before)
    code, out, _ = run(capfd, "rescale", made.location, "--partition", "d=2024-01-01")
    assert (code, out) == (0, "rescaled to 3 buckets: snapshot 3 (40 records)\n")
    made.write(pa.table({"d": days, "id": [0, 1], "v": [9, 9]}, schema=schema))  # both partitions at 3 now
    for args, message in ((["--partition", "e=1"], "--partition: 'e' is not a partition key of db.r"),
                          (["--partition", "d=soon"], "--partition: 'soon' is not a value of column 'd'"),
                          (["--partition", "d=2024-01-09"], "holds no data: nothing to rescale"),
                          (["--bucket", "0"], "rescale takes a number of buckets of 1 or more, not 0")):
        code, _, err = run(capfd, "rescale", made.location, *args)
        assert code and message in err, err


def test_inspect_prints_the_tree_and_draws_a_bucket(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    schema = pa.schema([pa.field("d", pa.date32(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.int64())])
    made = changelake.Catalog(str(tmp_path)).create_table(
        "db.lsm", schema, ["d", "id"], partition_keys=["d"],
        options={"bucket": "2", "num-sorted-run.compaction-trigger": "10"})
    for value in range(3):
        made.write(pa.table({"d": [dt.date(2024, 1, 1)] * 20 + [dt.date(2024, 1, 2)] * 4,
                             "id": list(range(20)) + list(range(4)), "v": [value] * 24}, schema=schema))
    code, out, _ = run(capfd, "inspect", made.location)
    assert code == 0
    assert str(made.inspect()) in out  # the library's summary, as is
    assert "num-sorted-run.compaction-trigger 10" in out  # why nothing is picked yet

    picture = tmp_path / "tree.png"
    code, out, _ = run(capfd, "inspect", made.location, "--png", str(picture), "--partition", "d=2024-01-02",
                       "--bucket", "1")
    assert code == 0, out
    assert "wrote" in out and "bucket 1" in out and "2024-01-02" in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000

    code, _, err = run(capfd, "inspect", made.location, "--png", str(picture), "--partition", "d=1999-01-01")
    assert code == 2 and err.startswith("error: --partition: no bucket") and len(err.splitlines()) == 1
    code, _, err = run(capfd, "inspect", made.location, "--snapshot", "99")
    assert code == 1 and "snapshot 99" in err


@pytest.mark.parametrize("zone", [None, "UTC"], ids=["TIMESTAMP(9)", "TIMESTAMP_LTZ(9)"])
def test_inspect_finds_a_nanosecond_partition_by_its_text(capfd: pytest.CaptureFixture[str], tmp_path: Path,
                                                           zone: str | None) -> None:
    """``--partition`` takes a TIMESTAMP(9) partition as the summary prints it, not only as the
    nanoseconds the partition decodes to."""
    pytest.importorskip("matplotlib")
    nanos = pa.timestamp("ns", tz=zone)
    schema = pa.schema([pa.field("p", nanos, nullable=False), pa.field("id", pa.int64(), nullable=False)])
    made = changelake.Catalog(str(tmp_path)).create_table("db.ns", schema, ["p", "id"], partition_keys=["p"],
                                                          options={"bucket": "1"})
    made.write(pa.table({"p": pa.array([1_700_000_000_123_456_789] * 3 + [0], nanos), "id": [1, 2, 3, 4]}))
    text = "2023-11-14 22:13:20.123456789" + ("+00:00" if zone else "")
    code, out, err = run(capfd, "inspect", made.location)
    assert code == 0 and f"partition p={text} bucket 0: 1 file" in out, err
    picture = tmp_path / "tree.png"
    code, out, err = run(capfd, "inspect", made.location, "--png", str(picture), "--partition", f"p={text}")
    assert code == 0, err
    assert out.splitlines()[-1] == f"wrote {picture}: bucket 0 of partition p={text}"
    code, _, err = run(capfd, "inspect", made.location, "--png", str(picture), "--partition", "p=soon")
    assert code == 2 and err.startswith("error: --partition: 'soon' is not a value of column 'p'"), err
    code, _, err = run(capfd, "inspect", made.location, "--png", str(picture), "--partition", "q=1")
    assert code == 2 and "'q' is not a partition key of db.ns (partitioned by p)" in err, err


NESTED = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("b", pa.binary()), ("fixed", pa.binary(2)), ("f", pa.float64()),
    ("l", pa.list_(pa.int32())), ("m", pa.map_(pa.string(), pa.float64())),
    ("s", pa.struct([("x", pa.int32()), ("raw", pa.binary()), ("at", pa.timestamp("ns"))])),
])


def _nested_table(tmp_path: Path) -> changelake.Table:
    made = changelake.Catalog(str(tmp_path)).create_table("db.nested", NESTED, ["id"])
    made.write(pa.table({
        "id": [1, 2, 3], "b": [b"\xff\x00\xfe", None, b"ok"], "fixed": [b"\x80\x81", None, b"ab"],
        "f": [float("nan"), float("inf"), None],
        "l": [[1, 2], None, []], "m": [[("a", float("-inf"))], None, []],
        "s": [{"x": 1, "raw": b"\xc3\x28", "at": pa.scalar(1_704_067_200_000_000_001, pa.timestamp("ns"))}, None,
              {"x": None, "raw": None, "at": None}],
    }, schema=NESTED))
    return made


def _strict_json(line: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")
    return json.loads(line, parse_constant=refuse)


def test_text_formats_print_binary_nested_and_non_finite_values(capfd: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    made = _nested_table(tmp_path)
    first = {"id": 1, "b": "ff00fe", "fixed": "8081", "f": "NaN", "l": [1, 2], "m": [["a", "-Infinity"]],
             "s": {"x": 1, "raw": "c328", "at": "2024-01-01 00:00:00.000000001"}}
    code, out, err = run(capfd, "scan", made.location, "--format", "json")
    assert code == 0, err
    assert [_strict_json(line) for line in out.splitlines()] == [
        first,
        {"id": 2, "b": None, "fixed": None, "f": "Infinity", "l": None, "m": None, "s": None},
        {"id": 3, "b": "6f6b", "fixed": "6162", "f": None, "l": [], "m": [], "s": {"x": None, "raw": None, "at": None}},
    ]

    code, out, err = run(capfd, "scan", made.location, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0] == {"id": "1", "b": "ff00fe", "fixed": "8081", "f": "nan", "l": "[1, 2]",
                       "m": '[["a", "-Infinity"]]', "s": json.dumps(first["s"])}
    assert rows[1] == {"id": "2", "b": "", "fixed": "", "f": "inf", "l": "", "m": "", "s": ""}
    assert [_strict_json(rows[2][c]) for c in ("l", "m", "s")] == [[], [], {"x": None, "raw": None, "at": None}]

    code, out, err = run(capfd, "changes", made.location, "--from", "0", "--format", "csv", "--columns", "id,b,s")
    assert code == 0, err
    assert out.splitlines()[1] == ('"+I",1,"ff00fe","{""x"": 1, ""raw"": ""c328"", '
                                   '""at"": ""2024-01-01 00:00:00.000000001""}"')

    code, out, err = run(capfd, "scan", made.location, "--format", "table", "--where", "id = 1")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("│"))
    assert [c.strip() for c in row.strip("│").split("│")] == [
        "1", "ff00fe", "8081", "nan", "[1, 2]", '[["a", "-Infinity"]]', json.dumps(first["s"])]


def test_where_drops_nulls_under_every_negation(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64()), ("name", pa.string())])
    made = changelake.Catalog(str(tmp_path)).create_table("db.nulls", schema, ["id"])
    made.write(pa.table({"id": [1, 2, 3, 4], "v": [1, 2, None, 4], "name": ["ab", "b", None, "ac"]}, schema=schema))
    for where, ids in [("v NOT IN (1, 2)", ["4"]), ("NOT v IN (1, 2)", ["4"]), ("NOT (v NOT IN (1, 2))", ["1", "2"]),
                       ("v <> 1", ["2", "4"]), ("NOT v = 1", ["2", "4"]), ("NOT (v > 1 OR name = 'x')", ["1"]),
                       ("name NOT LIKE 'a%'", ["2"]), ("name LIKE 'a_'", ["1", "4"]),
                       ("v NOT IN (1, 2) OR v IS NULL", ["3", "4"])]:
        code, out, err = run(capfd, "scan", made.location, "--where", where, "--columns", "id", "--format", "csv")
        assert (code, out.splitlines()[1:]) == (0, ids), (where, err)


def test_ls_shows_the_current_schema_and_whole_names_in_a_pipe(capfd: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    name = "a_table_whose_name_alone_is_wider_than_the_eighty_columns_a_pipe_used_to_get"
    made = changelake.Catalog(str(tmp_path)).create_table(f"db.{name}", SCHEMA, ["id"])
    made.write(pa.table({"id": [1], "d": [None], "name": ["a"]}, schema=SCHEMA))
    for column in ("x", "y", "z"):  # three schema changes, no commit after them
        with made.update_schema() as update:
            update.add_column(column, pa.int32())
    code, out, err = run(capfd, "ls", str(tmp_path))
    assert code == 0, err
    row = next(line for line in out.splitlines() if name in line)
    # table, schema, snapshot, records, primary keys (not partitioned)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [f"db.{name}", "3", "1", "1", "id"]


def test_show_prints_nested_types_as_paimon_does(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    made = _nested_table(tmp_path)
    code, out, err = run(capfd, "show", made.location)
    assert code == 0, err
    types = {cells[1]: cells[2] for line in out.splitlines() if line.startswith("│")
             for cells in [[c.strip() for c in line.strip("│").split("│")]] if len(cells) == 5}
    assert types["b"] == "BYTES" and types["fixed"] == "BINARY(2)"
    assert types["l"] == "ARRAY<INT>"
    assert types["m"] == "MAP<STRING NOT NULL, DOUBLE>"
    assert types["s"] == "ROW<`x` INT, `raw` BYTES, `at` TIMESTAMP(9)>"


def test_expire_says_what_kept_more_than_retain_max(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    made = changelake.Catalog(str(tmp_path)).create_table("db.many", SCHEMA, ["id"], options={"write-only": "true"})
    for i in range(12):
        made.write(pa.table({"id": [i], "d": [None], "name": ["n"]}, schema=SCHEMA))
    code, out, err = run(capfd, "expire", made.location, "--retain-max", "3")
    assert code == 0, err
    assert out.splitlines()[0] == "expired 2 snapshots (1..2)"
    assert out.splitlines()[-1] == ("kept 10 snapshots, more than --retain-max 3: snapshot.num-retained.min (10) "
                                    "keeps the newest 10; lower it with --retain-min N")

    stream = made.stream(mode="from-snapshot", snapshot_id=5, consumer_id="job")
    stream.commit(next(iter(stream)).offset)  # the consumer has read snapshot 5
    code, out, err = run(capfd, "expire", made.location, "--retain-max", "3", "--retain-min", "1")
    assert code == 0, err
    assert out.splitlines()[0] == "expired 3 snapshots (3..5)"
    assert out.splitlines()[-1] == ("kept 7 snapshots, more than --retain-max 3: consumer 'job' has yet to read "
                                    "snapshot 6")

    code, out, err = run(capfd, "expire", made.location, "--retain-max", "3", "--retain-min", "4")
    assert (code, out) == (2, "")
    assert err == "error: --retain-max 3 is less than --retain-min 4\n"


def test_postpone_bucket_tables(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """bucket = -2: inspect names bucket-postpone, scan skips it, compact moves its rows."""
    made = changelake.Catalog(str(tmp_path)).create_table(
        "db.pp", SCHEMA, ["id"], options={"bucket": "-2", "postpone.default-bucket-num": "2"})
    with made.writer() as writer:
        writer.write(pa.table({"id": [1, 2], "d": [None, None], "name": ["a", "b"]}, schema=SCHEMA))
        writer.commit(1)
    code, out, _ = run(capfd, "inspect", made.location)
    assert code == 0 and "bucket postpone: 1 file, " in out
    code, out, _ = run(capfd, "scan", made.location, "--format", "csv")
    assert out.splitlines() == ['"id","d","name"']
    code, out, _ = run(capfd, "compact", made.location)
    assert code == 0 and out.startswith("compacted: snapshot 2 (2 records)")
    code, out, _ = run(capfd, "scan", made.location, "--format", "csv", "--columns", "id,name")
    assert sorted(out.splitlines()) == sorted(['"id","name"', '1,"a"', '2,"b"'])


def test_delete_truncate_and_partitions(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    days = [dt.date(2000, 1, 1), dt.date(2999, 1, 2)]
    made = _dated(tmp_path, "e", 1, days, 10)
    code, out, err = run(capfd, "delete", made.location, "--where", "v >= 8")
    assert (code, err, out) == (0, "", "deleted: snapshot 2 (12 records)\n")
    assert sorted(r["id"] for r in made.scan().to_arrow().to_pylist()) == list(range(8))
    assert run(capfd, "delete", made.location, "--where", "v > 100")[1] == "nothing matches\n"
    code, _, err = run(capfd, "delete", made.location, "--where", "nope = 1")
    assert code == 2 and "--where:" in err and "nope" in err
    assert run(capfd, "drop-partition", made.location, "--partition", "d=2999-01-02")[1].startswith("dropped: snapshot")
    assert {r["d"] for r in made.scan().to_arrow().to_pylist()} == {days[0]}
    made.set_options({"partition.expiration-time": "1 d"})
    assert run(capfd, "expire-partitions", made.location)[1] == "expired: d=2000-01-01\n"
    assert run(capfd, "truncate", made.location)[1] == "nothing to truncate\n"
