"""The ``changelake`` command through real subprocesses (``python -m changelake.cli``): output,
exit codes, one-line errors, ``--help``, following changes, and progress only on a terminal."""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import changelake

SRC = str(Path(changelake.__file__).resolve().parents[1])
SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("d", pa.date32()), ("name", pa.string())])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [env.get("PYTHONPATH")])])
    return env


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "changelake.cli", *args], capture_output=True, text=True,
                          env=_env(), timeout=120, check=False)


def _make(warehouse: Path, name: str = "db.t", **options: str) -> changelake.Table:
    table = changelake.Catalog(str(warehouse)).create_table(
        name, SCHEMA, ["id", "p"], ["p"], options={"bucket": "2", "changelog-producer": "input", **options})
    table.write(pa.table({"id": [1, 2, 3], "p": ["x", "y", "x"],
                          "d": [dt.date(2024, 1, 1), dt.date(2024, 2, 1), None], "name": ["a", "b", "c"]},
                         schema=SCHEMA))
    table.write(pa.table({"id": [1], "p": ["x"], "d": [dt.date(2024, 3, 1)], "name": ["a2"]}, schema=SCHEMA))
    return table


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _one_error_line(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> changelake.Table:
    """A table the read-only tests share: snapshot 1 wrote ids 1-3, snapshot 2 updated id 1."""
    return _make(tmp_path_factory.mktemp("warehouse"))


def test_help_lists_every_command() -> None:
    result = cli("--help")
    assert result.returncode == 0
    for command in ("ls", "show", "scan", "changes", "compact", "rescale", "expire", "remove-orphans", "rollback",
                    "tag", "branch"):
        assert command in result.stdout


def test_ls_lists_tables_with_their_latest_snapshot(table: changelake.Table) -> None:
    warehouse = str(Path(table.location).parents[1])
    result = cli("ls", warehouse)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "db.t" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == ["db.t", "0", "2", "4", "id, p", "p"]


def test_show_marks_keys_and_lists_options_snapshots_and_buckets(table: changelake.Table) -> None:
    result = cli("show", table.location)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split("│")[1:4] == [" 1  ", " p    ", " STRING NOT NULL "] and "PK PARTITION" in line
               for line in lines if line.startswith("│"))
    assert any("changelog-producer" in line and "input" in line for line in lines)
    assert sum("APPEND" in line for line in lines) == 2
    assert any("{x}" in line for line in lines) and any("{y}" in line for line in lines)


def test_scan_filters_and_projects(table: changelake.Table) -> None:
    warehouse = str(Path(table.location).parents[1])
    result = cli("scan", "--warehouse", warehouse, "db.t", "--where", "d >= '2024-01-15' or d is null",
                 "--columns", "id,name")  # piped: CSV by default
    assert result.returncode == 0, result.stderr
    assert sorted(_csv(result.stdout), key=lambda r: r["id"]) == [
        {"id": "1", "name": "a2"}, {"id": "2", "name": "b"}, {"id": "3", "name": "c"}]


def test_errors_are_one_line_with_an_exit_code(table: changelake.Table, tmp_path: Path) -> None:
    _one_error_line(cli("scan", str(tmp_path / "db.db" / "missing")), 1, "does not exist")
    _one_error_line(cli("scan", table.location, "--where", "id = = 3"), 2,
                    "--where: expected a column or a value at character 6")
    latest = table.latest_snapshot()
    assert latest is not None
    _one_error_line(cli("changes", table.location, "--from", str(latest.id + 1), "--follow"), 2,
                    f"--from {latest.id + 1} is past the latest snapshot ({latest.id})")


def test_follow_prints_later_commits_until_interrupted(tmp_path: Path) -> None:
    table = _make(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "changelake.cli", "changes", table.location, "--from", "2", "--follow",
         "--poll-interval", "0.05", "--format", "csv"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert process.stdout is not None
        table.write(pa.table({"id": [7], "p": ["y"], "d": [None], "name": ["later"]}, schema=SCHEMA))
        seen = [process.stdout.readline() for _ in range(2)]  # header, then the later commit's row
        assert seen == ['"rowkind","id","p","d","name"\n', '"+I",7,"y",,"later"\n']
        process.send_signal(signal.SIGINT)
        # communicate() drains both pipes while it waits: a child whose stderr pipe filled up
        # would otherwise block on its last writes and never exit
        _, errors = process.communicate(timeout=60)
        assert process.returncode == 0, errors
        assert "Traceback" not in errors
    finally:
        process.kill()
        process.wait()


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    table = changelake.Catalog(str(tmp_path)).create_table("db.big", SCHEMA, ["id", "p"])
    table.write(pa.table({"id": range(100_000), "p": ["x"] * 100_000, "d": [None] * 100_000,
                          "name": ["some text"] * 100_000}, schema=SCHEMA))
    process = subprocess.Popen([sys.executable, "-m", "changelake.cli", "scan", table.location],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == '"id","p","d","name"\n'
    process.stdout.close()  # as `| head -1` does
    assert process.wait(timeout=60) == 1
    assert process.stderr.read() == ""


def test_expire_reports_what_it_removed(tmp_path: Path) -> None:
    table = _make(tmp_path)
    table.compact(full=True)
    result = cli("expire", table.location, "--retain-max", "1", "--retain-min", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["expired 2 snapshots (1..2)",
                                          "deleted 2 data files, 4 changelog files, 8 manifests"]
    assert [s.id for s in table.snapshots()] == [3]


def _run_on_terminal(*args: str) -> tuple[int, str]:
    """Run the command with stdin, stdout and stderr on a pseudo-terminal; its exit code and
    everything it drew."""
    primary, secondary = pty.openpty()
    env = {**_env(), "TERM": "xterm-256color", "COLUMNS": "100"}
    process = subprocess.Popen([sys.executable, "-m", "changelake.cli", *args], stdin=secondary,
                               stdout=secondary, stderr=secondary, env=env, close_fds=True)
    os.close(secondary)
    drawn = bytearray()
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closes when the process ends (EIO on Linux)
                break
            if not chunk:
                break
            drawn.extend(chunk)
    finally:
        os.close(primary)
    return process.wait(timeout=60), drawn.decode(errors="replace")


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    table = _make(tmp_path)
    code, drawn = _run_on_terminal("compact", table.location, "--full")
    assert code == 0, drawn
    assert "compacting buckets" in drawn
    assert "compacted: snapshot 3" in drawn

    table.write(pa.table({"id": [9], "p": ["x"], "d": [None], "name": ["z"]}, schema=SCHEMA))
    piped = cli("compact", table.location, "--full")
    assert piped.stdout.strip() == "compacted: snapshot 5 (4 records)"
    assert piped.stderr == ""


def test_scan_on_a_terminal_draws_a_default_limit_and_says_so(tmp_path: Path) -> None:
    table = changelake.Catalog(str(tmp_path)).create_table("db.many", SCHEMA, ["id", "p"])
    table.write(pa.table({"id": range(1500), "p": ["x"] * 1500, "d": [None] * 1500, "name": ["n"] * 1500},
                         schema=SCHEMA))
    footer = "the first 1000 rows, the default limit on a terminal: --limit N shows N"

    code, drawn = _run_on_terminal("scan", table.location)
    assert code == 0, drawn
    assert sum(line.startswith("│") for line in drawn.splitlines()) == 1000
    assert footer in drawn

    code, drawn = _run_on_terminal("scan", table.location, "--limit", "1200")
    assert code == 0, drawn
    assert sum(line.startswith("│") for line in drawn.splitlines()) == 1200
    assert "default limit" not in drawn

    piped = cli("scan", table.location)  # a pipe gets every row
    assert piped.returncode == 0, piped.stderr
    assert len(piped.stdout.splitlines()) == 1501
