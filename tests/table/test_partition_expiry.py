"""Partition expiration as Paimon runs it: by the time partition values name (default format,
``partition.timestamp-pattern`` and ``-formatter``) or by the last update, at most
``partition.expiration-max-num`` a run, oldest first, on demand and by writers after their
commits once per check interval; values that name no time never expire."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import OptionError
from changelake.table import partition_expiry

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("hh", pa.string(), nullable=False),
                    pa.field("id", pa.int64(), nullable=False)])


def make(tmp_path: Path, partitions: list[tuple[str, str]], *, expire_on_write: bool = False,
         **options: str) -> cl.Table:
    """A table of ``partitions``, with ``options`` set after the write unless ``expire_on_write``
    (the write's own expiry would drop the old partitions before a test looks)."""
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["dt", "hh", "id"],
                                                   partition_keys=["dt", "hh"],
                                                   options={"bucket": "1", **(options if expire_on_write else {})})
    table.write(pa.table({"dt": [d for d, _ in partitions], "hh": [h for _, h in partitions],
                          "id": list(range(len(partitions)))}, schema=SCHEMA))
    if not expire_on_write:
        table.set_options(options)
    return table


def left(table: cl.Table) -> list[tuple[str, str]]:
    return sorted({(r["dt"], r["hh"]) for r in table.scan().to_arrow().to_pylist()})


def test_values_time_in_the_default_format(tmp_path: Path) -> None:
    table = make(tmp_path, [("2024-01-01", "0"), ("2024-01-10", "0"), ("2024-01-02 10:30", "1"), ("someday", "0")],
                 **{"partition.expiration-time": "7 d"})
    latest = table.latest_snapshot()
    gone = table.expire_partitions(now=dt.datetime(2024, 1, 15))
    assert gone == [{"dt": "2024-01-01", "hh": "0"}, {"dt": "2024-01-02 10:30", "hh": "1"}]  # oldest first
    assert left(table) == [("2024-01-10", "0"), ("someday", "0")]  # no time: never expires
    dropped = table.latest_snapshot()
    assert dropped is not None and latest is not None and dropped.commit_kind is cl.CommitKind.OVERWRITE
    assert table.expire_partitions(now=dt.datetime(2024, 1, 15)) == []
    assert table.latest_snapshot() == dropped


def test_pattern_formatter_and_max_num(tmp_path: Path) -> None:
    table = make(tmp_path, [("20240101", "05"), ("20240101", "23"), ("20240102", "01"), ("20240301", "00")],
                 **{"partition.expiration-time": "1 d", "partition.timestamp-pattern": "$dt $hh:00",
                    "partition.timestamp-formatter": "yyyyMMdd HH:mm", "partition.expiration-max-num": "2"})
    now = dt.datetime(2024, 1, 3, 3)
    assert table.expire_partitions(now=now) == [{"dt": "20240101", "hh": "05"}, {"dt": "20240101", "hh": "23"}]
    assert table.expire_partitions(now=now) == [{"dt": "20240102", "hh": "01"}]
    assert left(table) == [("20240301", "00")]
    assert partition_expiry.strptime_format("yyyy-MM-dd'T'HH:mm:ss.SSS") == "%Y-%m-%dT%H:%M:%S.%f"


def test_update_time(tmp_path: Path) -> None:
    table = make(tmp_path, [("a", "0"), ("b", "0")], **{"partition.expiration-time": "1 h",
                                                           "partition.expiration-strategy": "update-time"})
    assert table.expire_partitions() == []  # written just now
    table.write(pa.table({"dt": ["b"], "hh": ["0"], "id": [9]}, schema=SCHEMA))
    later = dt.datetime.now() + dt.timedelta(hours=2)
    assert len(table.expire_partitions(now=later)) == 2 and left(table) == []


def test_writers_expire_partitions_after_their_commits_once_per_interval(tmp_path: Path) -> None:
    partition_expiry.CHECKS.clear()
    table = make(tmp_path, [("2000-01-01", "0")], expire_on_write=True, **{"partition.expiration-time": "1 d"})
    assert left(table) == []  # the first commit's own check dropped its old partition
    table.write(pa.table({"dt": ["2999-01-01", "2000-01-02"], "hh": ["0", "0"], "id": [1, 2]}, schema=SCHEMA))
    assert left(table) == [("2000-01-02", "0"), ("2999-01-01", "0")]  # the next check is an hour away
    partition_expiry.CHECKS.clear()
    table.write(pa.table({"dt": ["2999-01-01"], "hh": ["0"], "id": [3]}, schema=SCHEMA))
    assert left(table) == [("2999-01-01", "0")]
    kinds = [s.commit_kind for s in table.snapshots()]
    assert kinds.count(cl.CommitKind.OVERWRITE) == 2


def test_options_that_do_not_parse_are_refused(tmp_path: Path) -> None:
    for key, value, message in [("partition.timestamp-formatter", "yyyy-QQ", "'Q' is not a pattern letter"),
                                ("partition.expiration-strategy", "sometimes", "is not one of"),
                                ("partition.expiration-time", "soon", "")]:
        with pytest.raises(OptionError, match=message) as info:
            make(tmp_path / key, [("2024-01-01", "0")], expire_on_write=True, **{key: value})
        assert info.value.option == key
