"""Offsets resume exactly (no duplicate, no gap) from any position; the stateless planning API
plans to read limits and reads picklable splits anywhere; consumers record progress."""

from __future__ import annotations

import json
import pickle
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import changelake as cl
from changelake.errors import OffsetError

SCHEMA = pa.schema([pa.field("p", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.int64())])


def _history(tmp_path: Path, seed: int = 7) -> cl.Table:
    """Random upserts and deletes over two partitions and three buckets, with compactions."""
    rng = random.Random(seed)
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["p", "k"], partition_keys=["p"],
        options={"bucket": "3", "num-sorted-run.compaction-trigger": "3"})
    for commit in range(8):
        keys = rng.sample(range(40), 15)
        kinds = [rng.choice(["+I", "+U", "-D", "-U"]) for _ in keys]
        table.write(pa.table({"p": [rng.choice("ab") for _ in keys], "k": pa.array(keys, pa.int64()),
                              "v": pa.array([commit * 100 + k for k in keys], pa.int64()), "rowkind": kinds}))
    return table


def _rows(batches: list[cl.ChangeBatch]) -> list[tuple[object, ...]]:
    return [(b.snapshot_id, *row.values()) for b in batches for row in b.data.to_pylist()]


@pytest.mark.parametrize("mode", ["latest-full", "from-snapshot", "compacted-full"])
@pytest.mark.parametrize("max_rows", [1, 4])
def test_resuming_at_every_offset_reads_the_rest_exactly(tmp_path: Path, mode: str, max_rows: int) -> None:
    table = _history(tmp_path)
    kwargs = {"snapshot_id": 2} if mode == "from-snapshot" else {}
    whole = list(table.stream(mode=mode, max_rows=max_rows, **kwargs))  # type: ignore[arg-type]
    assert len(whole) > 10
    expected = _rows(whole)
    for stop in range(len(whole)):
        offset = cl.StreamOffset.from_json(whole[stop].offset.to_json())  # as saved by a job
        resumed = list(table.stream(offset=offset, max_rows=max_rows + stop % 3))
        assert _rows(whole[: stop + 1]) + _rows(resumed) == expected


def test_resuming_with_a_filter_and_projection(tmp_path: Path) -> None:
    table = _history(tmp_path)
    args = {"columns": ["k"], "filter": (pc.field("v") > 250) & (pc.field("p") == "a"), "max_rows": 3}
    whole = list(table.stream(**args))  # type: ignore[arg-type]
    for stop in range(len(whole)):
        resumed = list(table.stream(offset=whole[stop].offset, **args))  # type: ignore[arg-type]
        assert _rows(whole[: stop + 1]) + _rows(resumed) == _rows(whole)


def test_a_stream_continues_after_catching_up_and_its_offset_moves(tmp_path: Path) -> None:
    table = _history(tmp_path)
    stream = table.stream(mode="latest")
    assert list(stream) == []
    before = stream.offset
    table.write(pa.table({"p": ["a"], "k": pa.array([1], pa.int64()), "v": pa.array([5], pa.int64())}))
    (batch,) = list(stream)
    assert batch.offset == stream.offset and stream.offset.snapshot_id > before.snapshot_id


def test_offset_json_has_paimons_field_names() -> None:
    offset = cl.StreamOffset(snapshotId=5, index=3, scanSnapshot=True, tableId="abc")
    assert json.loads(offset.to_json()) == {"snapshotId": 5, "index": 3, "scanSnapshot": True, "tableId": "abc"}
    assert cl.StreamOffset.from_json(offset.to_json()) == offset
    assert cl.StreamOffset.model_validate({"snapshotId": 2}) == cl.StreamOffset(snapshotId=2, index=0)
    with pytest.raises(ValueError, match="greater than or equal"):
        cl.StreamOffset(snapshotId=1, index=-1)
    with pytest.raises(ValueError, match="frozen"):
        offset.index = 4  # type: ignore[misc]


def _read_in_process(source: bytes, split: bytes) -> pa.Table:
    src, s = pickle.loads(source), pickle.loads(split)
    return pa.Table.from_batches(list(src.to_batches(s)), schema=src.schema)


def test_planning_to_read_limits_covers_the_stream_exactly(tmp_path: Path) -> None:
    table = _history(tmp_path)
    source = table.stream().source
    expected = pa.concat_tables([b.data for b in table.stream()])
    for limit in (cl.ReadLimit(max_rows=5), cl.ReadLimit(max_files=1), cl.ReadLimit(max_rows=11, max_files=2)):
        start, parts, plans = None, [], 0
        while True:
            plan = source.plan(start, limit)
            if not plan.splits:
                assert plan.end == plan.start
                break
            assert sum(s.stop - s.start for s in plan.splits) <= (limit.max_rows or 1 << 60)
            assert sum(len(s.split.files) for s in plan.splits) <= (limit.max_files or 1 << 60) or \
                len(plan.splits) == 1
            for split in plan.splits:
                copy = pickle.loads(pickle.dumps(split))
                assert len(pickle.dumps(split)) < 8192
                parts.append(pa.Table.from_batches(list(source.to_batches(copy)), schema=source.schema))
            start, plans = cl.StreamOffset.from_json(plan.end.to_json()), plans + 1
        assert plans > 1
        assert pa.concat_tables(parts).equals(expected)


def test_a_split_is_read_in_another_process(tmp_path: Path) -> None:
    table = _history(tmp_path)
    source = table.stream(mode="from-snapshot", snapshot_id=1).source
    splits = source.plan().splits
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        remote = list(pool.map(_read_in_process, [pickle.dumps(source)] * len(splits),
                               [pickle.dumps(s) for s in splits]))
    local = [pa.Table.from_batches(list(source.to_batches(s)), schema=source.schema) for s in splits]
    assert all(r.equals(lo) for r, lo in zip(remote, local, strict=True))


def test_consumers_record_progress_and_new_streams_resume_there(tmp_path: Path) -> None:
    table = _history(tmp_path)
    stream = table.stream(consumer_id="job1", max_rows=2)
    first = next(iter(stream))
    stream.commit(first.offset)  # inside the first full read: nothing is recorded yet
    consumer_file = Path(table.location) / "consumer" / "consumer-job1"
    assert not consumer_file.exists()
    rest = list(stream)
    stream.commit()
    latest = table.latest_snapshot()
    assert latest is not None and rest
    assert json.loads(consumer_file.read_text()) == {"nextSnapshot": latest.id + 1}
    table.write(pa.table({"p": ["b"], "k": pa.array([99], pa.int64()), "v": pa.array([1], pa.int64())}))
    resumed = table.stream(consumer_id="job1")  # the consumer wins over the default latest-full
    assert resumed.offset.snapshot_id == latest.id + 1 and not resumed.offset.scan_snapshot
    assert [r["k"] for b in resumed for r in b.data.to_pylist()] == [99]
    assert table.stream(options={"consumer-id": "job1"}).offset.snapshot_id == latest.id + 1
    with pytest.raises(OffsetError, match="no consumer-id"):
        table.stream().commit()
    with pytest.raises(cl.errors.OptionError, match="consumer id"):
        table.stream(consumer_id="../x")


def test_a_consumer_records_the_snapshot_of_a_partly_read_offset(tmp_path: Path) -> None:
    table = _history(tmp_path)
    stream = table.stream(mode="from-snapshot", snapshot_id=1, consumer_id="c", max_rows=1)
    batch = next(iter(stream))
    assert batch.offset.snapshot_id == 1 and batch.offset.index > 0
    stream.commit(batch.offset)
    assert table.stream(consumer_id="c").offset.snapshot_id == 1
