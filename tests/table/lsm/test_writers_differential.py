"""Two long-lived writers committing many times, in turns and with other writers committing in
between (one-shot writes, full compactions), leaves a table with deletion vectors (whose writer keeps its vectors
between commits and must reread them after another's) equal to a twin table without them
that got the same operations, for each merge engine, with merges forced into tiny chunks or
not; random histories."""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import changelake as cl
from changelake.table.lsm import compactor
from changelake.table.merge import chunked

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64()),
                    pa.field("w", pa.string())])
WRITE_SCHEMA = SCHEMA.append(pa.field("rowkind", pa.string()))
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENGINES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "deduplicate": ({}, ("+I", "+U", "-U", "-D")),
    "partial-update": ({"merge-engine": "partial-update"}, ("+I", "+U")),
    "aggregation": ({"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
                     "fields.w.aggregate-function": "max"}, ("+I", "+U")),
}


def rows_strategy(kinds: tuple[str, ...]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(st.fixed_dictionaries({
        "k": st.integers(0, 7),
        "v": st.one_of(st.none(), st.integers(-3, 3)),
        "w": st.sampled_from([None, "a", "z" * 30]),
        "rowkind": st.sampled_from(kinds),
    }), min_size=1, max_size=8)  # fmt: skip


@st.composite
def histories(draw: st.DrawFn) -> tuple[dict[str, str], list[tuple[str, Any]]]:
    engine = draw(st.sampled_from(list(ENGINES)))
    options, kinds = ENGINES[engine]
    options = {"bucket": draw(st.sampled_from(["1", "2"])), **options,
               "num-sorted-run.compaction-trigger": draw(st.sampled_from(["2", "4"]))}
    if draw(st.booleans()):
        options["target-file-size"] = "1 kb"
    if draw(st.booleans()):
        options["changelog-producer"] = "lookup"
    step = st.one_of(*(rows_strategy(kinds).map(lambda r, who=who: (who, r)) for who in ("mine", "theirs", "other")),
                     st.just(("full", None)))
    return options, draw(st.lists(step, min_size=1, max_size=8))


def read(table: cl.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in table.scan().to_arrow().to_pylist())


def check(options: dict[str, str], steps: list[tuple[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as warehouse:
        catalog = cl.Catalog(warehouse)
        vectors = catalog.create_table("db.dv", SCHEMA, primary_keys=["k"],
                                       options={**options, "deletion-vectors.enabled": "true"})
        twin = catalog.create_table("db.twin", SCHEMA, primary_keys=["k"], options=options)
        with vectors.writer(commit_user="a") as mine, twin.writer(commit_user="a") as twin_mine, \
                vectors.writer(commit_user="b") as theirs, twin.writer(commit_user="b") as twin_theirs:
            writers = {"mine": (mine, twin_mine), "theirs": (theirs, twin_theirs)}
            for i, (kind, rows) in enumerate(steps):
                for at, table in enumerate((vectors, twin)):
                    if kind in writers:
                        writer = writers[kind][at]
                        writer.write(pa.Table.from_pylist(rows, schema=WRITE_SCHEMA))
                        writer.commit(i)
                    elif kind == "other":
                        table.write(pa.Table.from_pylist(rows, schema=WRITE_SCHEMA))
                    else:
                        table.compact(full=True)
                assert read(vectors) == read(twin), (i, kind)


@SETTINGS
@given(history=histories())
def test_a_writer_with_vectors_between_other_commits_matches_its_twin(
        history: tuple[dict[str, str], list[tuple[str, Any]]]) -> None:
    check(*history)


@SETTINGS
@given(history=histories())
def test_the_same_in_tiny_chunks(history: tuple[dict[str, str], list[tuple[str, Any]]]) -> None:
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(compactor, "CHUNKED_COMPACTION_BYTES", 0)
        patched.setattr(chunked, "CHUNKED_MERGE_BYTES", 0)
        patched.setattr(chunked, "BATCH_ROWS", 2)
        check(*history)
