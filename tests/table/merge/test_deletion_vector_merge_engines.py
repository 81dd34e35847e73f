"""Every merge engine on a table with deletion vectors equals a plain-Python model (and a twin
table without them) after every commit of random upserts and deletes: the older rows a
compaction replaces come from the lookup, so partial-update and aggregation see them. first-row
(which never deletes an older row) and the full-compaction producer are refused beside deletion
vectors, as Paimon refuses them."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import changelake as cl
from changelake.errors import OptionError

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.string()), ("n", pa.int64())])
Model = dict[int, tuple[Any, Any]]


def _dedup(model: Model, k: int, kind: str, v: Any, n: Any) -> None:
    if kind == "-D":
        model.pop(k, None)
    else:
        model[k] = (v, n)


def _partial_update(model: Model, k: int, kind: str, v: Any, n: Any) -> None:
    old_v, old_n = model.get(k, (None, None))
    model[k] = (old_v if v is None else v, old_n if n is None else n)


def _aggregation(model: Model, k: int, kind: str, v: Any, n: Any) -> None:
    old_v, old_n = model.get(k, (None, None))
    total = n if old_n is None else old_n + (n or 0)
    model[k] = (old_v if v is None else v, total)


ENGINES: dict[str, tuple[dict[str, str], Callable[[Model, int, str, Any, Any], None], bool]] = {
    # options, the model's fold, whether deletes are drawn
    "deduplicate": ({}, _dedup, True),
    "partial-update": ({"merge-engine": "partial-update"}, _partial_update, False),
    "aggregation": ({"merge-engine": "aggregation", "fields.n.aggregate-function": "sum"}, _aggregation, False),
}


def _random_batch(rng: random.Random, deletes: bool, nulls: bool) -> list[tuple[int, str, Any, Any]]:
    rows = []
    for _ in range(rng.randint(1, 60)):
        k = rng.randrange(200)
        kind = "-D" if deletes and rng.random() < 0.15 else "+I"
        v = None if nulls and rng.random() < 0.3 else f"v{rng.randrange(1000)}"
        n = None if nulls and rng.random() < 0.3 else rng.randrange(100)
        rows.append((k, kind, v, n))
    return rows


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("seed", [1, 2])
def test_random_commits_equal_the_model(tmp_path: Any, engine: str, seed: int) -> None:
    options, fold, deletes = ENGINES[engine]
    base = {"bucket": "2", "target-file-size": "2 kb", "num-sorted-run.compaction-trigger": "3", **options}
    catalog = cl.Catalog(str(tmp_path))
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                                 options={**base, "deletion-vectors.enabled": "true"})
    twin = catalog.create_table("db.twin", SCHEMA, primary_keys=["k"], options=base)
    rng = random.Random(seed)
    model: Model = {}
    nulls = engine in ("partial-update", "aggregation")
    with table.writer(commit_user="dv") as writer, twin.writer(commit_user="plain") as twin_writer:
        for step in range(14):
            batch = _random_batch(rng, deletes, nulls)
            for k, kind, v, n in batch:
                fold(model, k, kind, v, n)
            data = pa.table({"k": [r[0] for r in batch], "v": [r[2] for r in batch], "n": [r[3] for r in batch],
                             "rowkind": [r[1] for r in batch]})
            for w in (writer, twin_writer):
                w.write(data)
                w.commit(step)
            if step == 9:
                table.compact(full=True)
            expected = [{"k": k, "v": v, "n": n} for k, (v, n) in sorted(model.items())]
            got = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["k"])
            assert got == expected, f"step {step}"
            assert got == sorted(twin.scan().to_arrow().to_pylist(), key=lambda r: r["k"])


@pytest.mark.parametrize("options", [{"merge-engine": "first-row"}, {"changelog-producer": "full-compaction"}])
def test_what_paimon_refuses_beside_deletion_vectors_is_refused(tmp_path: Any, options: dict[str, str]) -> None:
    """Paimon's readers open no such table: refused on create and when set, changing nothing."""
    catalog = cl.Catalog(str(tmp_path))
    with pytest.raises(OptionError, match=r"deletion-vectors\.enabled") as refused:
        catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                             options={**options, "deletion-vectors.enabled": "true"})
    assert refused.value.option == "deletion-vectors.enabled"
    assert not (tmp_path / "db.db" / "t" / "schema" / "schema-0").exists()
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options=options)
    with pytest.raises(OptionError, match=r"deletion-vectors\.enabled"):
        table.set_options({"deletion-vectors.enabled": "true"})
    assert sorted(p.name for p in (tmp_path / "db.db" / "t" / "schema").iterdir()) == ["schema-0"]
    table.set_options({"snapshot.num-retained.max": "5"})  # other options are set as before
    dv = catalog.create_table("db.dv", SCHEMA, primary_keys=["k"], options={"deletion-vectors.enabled": "true"})
    with pytest.raises(OptionError, match=r"deletion-vectors\.enabled"):
        dv.set_options(options)
