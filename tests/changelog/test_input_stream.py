"""Producer ``input`` end to end: what changelake writes as changelog is what its change
streams read back, row kinds and per-key input order included, through every resume point."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import changelake as cl

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
COMMITS = [
    ([1, 2, 3], ["a", "b", "c"], ["+I", "+I", "+I"]),
    ([1, 1, 2, 3], ["a", "a2", "b", None], ["-U", "+U", "-D", "-D"]),
    ([4, 4, 1], ["d", "d2", "a3"], ["+I", "+U", "+U"]),
]


def _expected(snapshot_ids: list[int]) -> list[tuple[int, str, int, str | None]]:
    out = []
    for sid, (keys, values, kinds) in zip(snapshot_ids, COMMITS, strict=True):
        # Changelog files hold each key's rows in input order, keys sorted.
        rows = sorted(zip(keys, values, kinds, range(len(keys)), strict=True), key=lambda r: (r[0], r[3]))
        out += [(sid, kind, k, v) for k, v, kind, _ in rows]
    return out


def _got(batches: list[cl.ChangeBatch]) -> list[tuple[int, str, int, str | None]]:
    out = []
    for b in batches:
        for row in b.data.to_pylist():
            out.append((b.snapshot_id, row["rowkind"], row["k"], row["v"]))
    return out


def test_input_changelog_streams_back_exactly(tmp_path: Path) -> None:
    table = cl.Catalog(str(tmp_path)).create_table("db.t", SCHEMA, primary_keys=["k"],
                                                   options={"changelog-producer": "input"})
    appended = []
    with table.writer(commit_user="job") as writer:
        for i, (keys, values, kinds) in enumerate(COMMITS, start=1):
            writer.write(pa.table({"k": keys, "v": values, "rowkind": kinds}, schema=SCHEMA.append(
                pa.field("rowkind", pa.string()))))
            landed = writer.commit(identifier=i)
            appended.append(next(s.id for s in landed if s.commit_kind is cl.CommitKind.APPEND))
    stream = table.stream(mode="from-snapshot", snapshot_id=1, max_rows=2)
    batches = list(stream)
    assert {b.kind for b in batches} == {cl.ChangeKind.CHANGELOG}
    assert _got(batches) == _expected(appended)
    # Resuming from every offset yields exactly the rest.
    for i, batch in enumerate(batches):
        rest = list(table.stream(offset=batch.offset, max_rows=3))
        assert _got(rest) == _got(batches[i + 1:])
    # A batch change read of the last two commits.
    changes = table.changes(appended[0], appended[-1]).to_arrow()
    assert changes.column("rowkind").to_pylist() == [kind for _, kind, _, _ in _expected(appended)[3:]]
