"""A commit caches the manifests and manifest lists it writes (the next commits read them):
what it caches is what reading them back gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import changelake as cl
from changelake.table.read import live_files

SCHEMA = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.float64())])


@pytest.mark.parametrize("options", [{}, {"changelog-producer": "input"}, {"deletion-vectors.enabled": "true"}])
def test_cached_manifests_equal_the_files(tmp_path: Path, options: dict[str, str]) -> None:
    table = cl.Catalog(str(tmp_path)).create_table(
        "db.t", SCHEMA, primary_keys=["dt", "id"], partition_keys=["dt"],
        options={"bucket": "2", "num-sorted-run.compaction-trigger": "2", **options})
    rng = np.random.default_rng(1)
    with table.writer(commit_user="u") as writer:
        for identifier in range(6):
            ids = rng.integers(0, 400, 300)
            writer.write(pa.table({"dt": np.array(["a", "b"])[ids % 2], "id": ids, "v": rng.random(300)},
                                  schema=SCHEMA))
            writer.commit(identifier)
    ctx = table.context
    snapshots = [ctx.snapshot(i) for i in range(1, ctx.latest_snapshot().id + 1)]  # type: ignore[union-attr]
    assert any(s.commit_kind.value == "COMPACT" for s in snapshots)

    def everything() -> list[object]:
        out: list[object] = []
        for s in snapshots:
            lists = [s.base_manifest_list, s.delta_manifest_list, s.changelog_manifest_list]
            for name in filter(None, lists):
                metas = live_files.manifest_list(ctx, name)
                out += [metas, *(live_files.manifest_entries(ctx, m.file_name) for m in metas)]
        return out

    cached = everything()
    live_files.MANIFEST_CACHE.clear()
    assert everything() == cached
