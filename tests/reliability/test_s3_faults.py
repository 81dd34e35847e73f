"""The S3 fault harness at a small size (``./dev crashtest --s3-faults`` runs it at scale), and
the faults it found, each on purpose: a conditional put whose answer is lost past the client's
retries, a LATEST hint put that fails past them, store failures that must name their file, and
a data file put that fails while a writer's commit flushes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
import s3_faults
from s3_fault_proxy import Fault, FaultProxy, Request, TargetedFaults

import changelake as cl
from s3_support import S3Endpoint

AGGREGATED = {"bucket": "1", "merge-engine": "aggregation", "fields.v.aggregate-function": "sum"}
SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def test_nothing_is_lost_or_duplicated_under_s3_faults(s3: S3Endpoint) -> None:
    # No answer comes past the timeout here (seconds each); the test below has one.
    totals = s3_faults.run_on(s3, 8, seed=23, rate=0.02, timeouts=False)
    assert not totals.violations, totals.summary(0)
    assert totals.rows_lost_or_duplicated == 0 and totals.stream_differences == 0
    assert sum(totals.faults.values()) > 0 and totals.retries > 0
    assert totals.stream_batches > 0


@pytest.fixture
def proxy(s3: S3Endpoint) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3.endpoint_url, delay=s3_faults.READ_TIMEOUT_S + 0.5)
    proxy.start()
    yield proxy
    proxy.stop()


def _table(s3: S3Endpoint, proxy: FaultProxy) -> cl.Table:
    catalog = cl.Catalog(s3.new_warehouse(), storage_options=s3_faults.storage_options(proxy.endpoint_url))
    table = catalog.create_table("db.t", SCHEMA, ["k"], options=AGGREGATED)
    table.write(pa.table({"k": [1], "v": [5]}))
    return table


def _write_until_it_lands(table: cl.Table, data: pa.Table) -> cl.Snapshot | None:
    """A caller that retries a write that raised (whatever it raised), as a retry-happy job does."""
    for _ in range(3):
        try:
            return table.write(data)
        except Exception:
            continue
    raise AssertionError("the write never succeeded")


def _put(suffix: str, *, conditional: bool) -> Callable[[Request], bool]:
    return lambda r: r.method == "PUT" and r.path.endswith(suffix) and r.conditional == conditional


def test_a_commit_whose_put_landed_but_whose_answers_were_lost_lands_once(
        s3: S3Endpoint, proxy: FaultProxy) -> None:
    """The put of snapshot-2 lands and its answer is lost, and so are the answers of the
    client's retries (each a 412 now), more of them than the client retries: changelake tries
    again, finds snapshot-2 holding its own bytes, and reports the commit landed."""
    table = _table(s3, proxy)
    plan = TargetedFaults(_put("/snapshot/snapshot-2", conditional=True), Fault.LOST_ANSWER, times=6)
    with proxy.faults(plan) as counts:
        landed = _write_until_it_lands(table, pa.table({"k": [1], "v": [5]}))
    assert len(plan.hits) == 6 and counts.conditional_puts_lost == 6
    assert landed is not None and landed.id == 2
    assert [s.id for s in table.snapshots()] == [1, 2]
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 10}]


def test_a_commit_put_answered_past_the_timeout_lands_once(s3: S3Endpoint, proxy: FaultProxy) -> None:
    """The put of snapshot-2 gets no answer before the client's read timeout, and lands late,
    while the client's retry races it: whichever lands first, the commit lands once."""
    table = _table(s3, proxy)
    plan = TargetedFaults(_put("/snapshot/snapshot-2", conditional=True), Fault.TIMEOUT, times=1)
    with proxy.faults(plan) as counts:
        landed = _write_until_it_lands(table, pa.table({"k": [1], "v": [5]}))
    assert len(plan.hits) == 1 and counts.retries >= 1
    assert landed is not None and landed.id == 2
    assert [s.id for s in table.snapshots()] == [1, 2]
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 10}]


def test_a_latest_hint_put_failing_past_the_client_does_not_fail_the_commit(
        s3: S3Endpoint, proxy: FaultProxy) -> None:
    """Issue 23 item 7 on S3: the LATEST put answers 500 more often than the client retries; the
    hint is tried again (Paimon's HintFileUtils.commitHint) and the landed commit is reported."""
    table = _table(s3, proxy)
    plan = TargetedFaults(_put("/snapshot/LATEST", conditional=False), Fault.INTERNAL_ERROR, times=3)
    with proxy.faults(plan):
        landed = _write_until_it_lands(table, pa.table({"k": [1], "v": [5]}))
    assert len(plan.hits) == 3
    assert landed is not None and landed.id == 2
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 10}]
    assert table.latest_snapshot() == landed


@pytest.mark.parametrize("kind", ["snapshot/snapshot-", "bucket-0/data-"])
def test_a_store_failure_past_the_client_names_its_file(s3: S3Endpoint, proxy: FaultProxy, kind: str) -> None:
    """Reads that fail more often than the client retries raise StorageError naming the file:
    not botocore's or aiohttp's errors, and for a data file not "missing" or "corrupt"."""
    table = _table(s3, proxy)
    plan = TargetedFaults(lambda r: r.method in ("GET", "HEAD") and f"/{kind}" in r.path, Fault.INTERNAL_ERROR,
                          times=100)
    with proxy.faults(plan), pytest.raises(cl.errors.ChangelakeError) as raised:
        table.scan().to_arrow()
    assert type(raised.value) is cl.errors.StorageError and isinstance(raised.value, OSError)
    assert raised.value.file is not None and f"/{kind}" in raised.value.file
    assert any(hit.path.endswith(raised.value.file.rsplit("/", 1)[-1]) for hit in plan.hits)
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 5}]  # nothing changed


def test_a_commit_that_never_hears_back_says_its_outcome_is_unknown_and_deletes_nothing(
        s3: S3Endpoint, proxy: FaultProxy) -> None:
    """Every answer about snapshot-2 is lost, past every retry: the commit cannot know whether it
    landed (it did), says so naming the file, and deletes nothing the snapshot names; a writer's
    retry of the identifier then finds it committed."""
    table = _table(s3, proxy)
    plan = TargetedFaults(_put("/snapshot/snapshot-2", conditional=True), Fault.LOST_ANSWER, times=1000)
    writer = table.writer(commit_user="job")
    writer.write(pa.table({"k": [1], "v": [5]}))
    with proxy.faults(plan), pytest.raises(cl.errors.CommitOutcomeUnknownError) as raised:
        writer.commit(1)
    assert raised.value.file is not None and raised.value.file.endswith("/snapshot/snapshot-2")
    assert writer.commit(1) == []  # it had landed: a replay
    writer.close()
    assert [(s.id, s.commit_user) for s in table.snapshots()] == [(1, table.snapshot(1).commit_user), (2, "job")]
    assert table.scan().to_arrow().to_pylist() == [{"k": 1, "v": 10}]  # every file it names is there


@pytest.mark.parametrize("options", [{}, {"write-buffer-size": "4 kb", "write-buffer-spillable": "true"}])
def test_a_commit_whose_flush_failed_writes_every_row_when_retried(
        s3: S3Endpoint, proxy: FaultProxy, options: dict[str, str]) -> None:
    """A data file put fails past the client while a writer's commit flushes its buckets: the
    commit raises naming the file, and committing again writes every row, none lost (found by
    the harness: the flush had taken the rows out of the buffer before writing them)."""
    catalog = cl.Catalog(s3.new_warehouse(), storage_options=s3_faults.storage_options(proxy.endpoint_url))
    table = catalog.create_table("db.t", SCHEMA, ["k"], options={**AGGREGATED, "bucket": "4", **options})
    keys = list(range(400))
    plan = TargetedFaults(lambda r: r.method == "PUT" and "/bucket-2/data-" in r.path, Fault.INTERNAL_ERROR, times=2)
    with table.writer(commit_user="job") as writer:
        writer.write(pa.table({"k": keys, "v": [1] * len(keys)}))
        with proxy.faults(plan), pytest.raises(cl.errors.StorageError) as raised:
            writer.commit(1)
        assert raised.value.file is not None and "/bucket-2/data-" in raised.value.file
        assert [s.commit_identifier for s in writer.commit(1)] == [1]
    assert sorted(r["k"] for r in table.scan().to_arrow().to_pylist()) == keys
    assert {r["v"] for r in table.scan().to_arrow().to_pylist()} == {1}


def test_a_stream_over_a_much_rolled_back_table_reads_its_rollback_records_once_and_resumes(
        s3: S3Endpoint, proxy: FaultProxy) -> None:
    """Found by the harness at scale: every stream step read every rollback record, so the
    chance that a step met no store failure shrank with each rollback until the stream could
    not get through. Now a step lists ``rollback/`` and reads only records it has not seen;
    and a step that fails part way leaves the stream where it was."""
    catalog = cl.Catalog(s3.new_warehouse(), storage_options=s3_faults.storage_options(proxy.endpoint_url))
    table = catalog.create_table("db.t", SCHEMA, ["k"], options={"bucket": "2"})
    for i in range(6):
        kept = table.write(pa.table({"k": [i], "v": [i]}))
        table.write(pa.table({"k": [i], "v": [-1]}))
        table.rollback_to(snapshot_id=kept.id)
    stream = table.stream(mode="latest-full", consumer_id="c", max_rows=1)
    assert sorted(r["k"] for b in stream for r in b.data.to_pylist()) == list(range(6))
    stream.commit()
    seen: list[Request] = []
    failing = [True]

    def plan(request: Request) -> Fault | None:
        seen.append(request)
        return Fault.INTERNAL_ERROR if failing[0] and request.method == "GET" and "/bucket-" in request.path else None

    for i in range(3):
        table.write(pa.table({"k": [10 + i, 20 + i], "v": [1, 1]}))
    got: list[int] = []
    with proxy.faults(plan):
        with pytest.raises(cl.errors.StorageError) as raised:
            got += [r["k"] for b in stream for r in b.data.to_pylist()]
        failing[0] = False
        assert raised.value.file is not None and "/bucket-" in raised.value.file
        got += [r["k"] for b in stream for r in b.data.to_pylist()]
        stream.commit()
    assert sorted(got) == [10, 11, 12, 20, 21, 22]  # each once
    assert any(r.method == "GET" and "prefix=" in r.query and "rollback" in r.query for r in seen)  # listed
    assert not [r for r in seen if "/rollback/rollback-" in r.path]  # never read again


def test_a_metadata_file_is_read_with_one_request(s3: S3Endpoint, proxy: FaultProxy) -> None:
    """s3fs 2026 reads a whole file with a HEAD (its size) before the GET, to split big files
    across ranged GETs; changelake's metadata files are small, so it reads each with one GET
    (each request is one more chance to fail)."""
    table = _table(s3, proxy)
    seen: list[Request] = []
    with proxy.faults(lambda r: seen.append(r)):
        assert table.snapshot(1).id == 1
    reads = [r.method for r in seen if r.path.endswith("/snapshot/snapshot-1")]
    assert reads == ["GET"]
