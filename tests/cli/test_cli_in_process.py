"""The rest of the ``changelake`` command, run in this process (``app([...])``, output captured
at the file descriptors) to keep the suite fast: formats, tags, orphan deletion and the errors
of each command."""

from __future__ import annotations

import datetime as dt
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
])
def test_errors(capfd: pytest.CaptureFixture[str], table: changelake.Table, args: list[str], code: int,
                message: str) -> None:
    warehouse = str(Path(table.location).parents[1])
    got, _, err = run(capfd, *(a.format(t=table.location, w=warehouse) for a in args))
    assert got == code, err
    if code:
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_every_command_has_help(capfd: pytest.CaptureFixture[str]) -> None:
    for command in (["ls"], ["show"], ["scan"], ["changes"], ["compact"], ["expire"], ["remove-orphans"],
                    ["rollback"], ["tag"], ["tag", "create"], ["tag", "delete"], ["tag", "list"]):
        code, out, _ = run(capfd, *command, "--help")
        assert code == 0
        assert "Usage:" in out and len(out.splitlines()) > 5, command


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
