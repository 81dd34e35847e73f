"""The README's and docs/'s ```python examples run as written, so what users copy stays true.

Each example runs in a fresh temp directory (its warehouse paths moved there) after the setup
declared for it below: the table and the names (``rows``, ``batch``, ...) its text assumes.
Every example is declared, either with a setup or in ``NOT_STANDALONE`` with the reason, so a
new example fails this test until it is given one. The README's quickstart commands and
examples/*.py are run by ``./dev smoke`` and the Spark tests, not here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from s3_support import S3Endpoint

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the absolute warehouse paths examples use, moved into the test's temp directory
WAREHOUSES = ("/tmp/warehouse", "/data/warehouse")


def _orders(name: str = "db.orders", *, extra_columns: str = "", snapshots: int = 2) -> str:
    """A partitioned primary-key table ``table`` (dt, id, status, name, amount and
    ``extra_columns``, null in ``rows``) in ``catalog``, with ``snapshots`` writes of ``rows``."""
    return f"""
import pyarrow as pa
import pyarrow.compute as pc
import changelake as cl
catalog = cl.Catalog("/data/warehouse")
schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("status", pa.string()), pa.field("name", pa.string()),
                    pa.field("amount", pa.float64()), {extra_columns}])
table = catalog.create_table("{name}", schema, primary_keys=["dt", "id"], partition_keys=["dt"],
                             options={{"bucket": "2"}})
rows = pa.Table.from_pylist([
    {{"dt": "2024-01-01", "id": 1, "status": "open", "name": "ann", "amount": 9.5}},
    {{"dt": "2024-01-01", "id": 7, "status": "new", "name": "bob", "amount": 20.0}},
    {{"dt": "2023-12-31", "id": 2, "status": "new", "name": "cy", "amount": -1.0}}], schema=schema)
for _ in range({snapshots}):
    table.write(rows)
"""


# Key: "<file relative to the repository>#<n>", the n-th ```python block of that file (from 1).
SETUPS: dict[str, str] = {
    "README.md#1": "",
    "README.md#2": """
import threading
import pyarrow as pa
import pyarrow.compute as pc
batch = pa.table({"dt": ["2024-01-02"], "id": [2], "amount": [3.0]})
new_rows = pa.table({"dt": ["2024-01-01"], "id": [5], "amount": [1.0]})
rows = pa.table({"dt": ["2024-01-01"], "id": [1], "amount": [2.0]})
event = threading.Event(); event.set()
""",
    "docs/append-tables.md#1": """
import pyarrow as pa
batch = pa.table({"dt": ["2024-01-01"], "user_id": [3], "event": ["click"]})
""",
    "docs/branches.md#1": _orders("shop.orders"),
    "docs/deletion-vectors.md#1": """
import pyarrow as pa
import changelake as cl
catalog = cl.Catalog("/data/warehouse")
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
rows = pa.table({"id": [1, 2], "v": ["a", "b"]})
""",
    "docs/dynamic-bucket.md#1": """
import pyarrow as pa
import changelake as cl
catalog = cl.Catalog("/data/warehouse")
schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("region", pa.string(), nullable=False),
                    pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
rows = pa.table({"dt": ["2024-01-01"], "region": ["eu"], "id": [1], "v": ["a"]})
""",
    "docs/file-formats.md#1": """
import pyarrow as pa
import changelake as cl
catalog = cl.Catalog("/data/warehouse")
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
""",
    "docs/file-indexes.md#1": """
import pyarrow as pa
import pyarrow.compute as pc
import changelake as cl
catalog = cl.Catalog("/data/warehouse")
schema = pa.schema([("user_id", pa.string()), ("session", pa.string()), ("country", pa.string())])
""",
    "docs/inspect.md#1": """
import pyarrow as pa
import changelake as cl
schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False)])
table = cl.Catalog("/data/warehouse").create_table("db.orders", schema, primary_keys=["dt", "id"],
                                                  partition_keys=["dt"], options={"bucket": "4"})
for first in range(0, 60, 10):
    table.write(pa.table({"dt": ["2024-01-01"] * 10, "id": list(range(first, first + 10))}))
""",
    "docs/inspect.md#2": _orders(snapshots=5),
    "docs/postpone-bucket.md#1": """
import pyarrow as pa
import changelake as cl
catalog = cl.Catalog("/data/warehouse")
schema = pa.schema([pa.field("dt", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
rows = pa.table({"dt": ["2024-01-01"] * 2, "id": [1, 2], "v": ["a", "b"]})
more_rows = pa.table({"dt": ["2024-01-01"], "id": [3], "v": ["c"]})
""",
    "docs/schema-evolution.md#1": """
import pyarrow as pa
import changelake as cl
schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("legacy", pa.string()),
                    pa.field("amount", pa.float64()), pa.field("qty", pa.int32())])
table = cl.Catalog("/data/warehouse").create_table("db.orders", schema, primary_keys=["id"])
""",
    "docs/table-operations.md#1": _orders(extra_columns='pa.field("note", pa.string())'),
    "docs/table-operations.md#2": _orders(),
    "docs/table-operations.md#3": _orders() + "new_rows = rows.filter(pc.field('dt') == '2024-01-01')\n",
    "docs/table-operations.md#4": _orders(extra_columns='pa.field("qty", pa.int64()), pa.field("updated", pa.string())')
    + """
source = pa.table({"dt": ["2024-01-01", "2024-01-01"], "id": [1, 9], "qty": [2, 3], "op": ["U", "I"]})
""",
}

# What the examples' comments say their calls return, checked after the example has run.
CHECKS: dict[str, str] = {
    "README.md#1": """
assert table.scan().to_arrow().to_pylist() == [{"id": 1, "status": "paid"}]
changes = table.changes(0, table.latest_snapshot().id).to_arrow()
assert list(zip(changes["rowkind"].to_pylist(), changes["id"].to_pylist())) == [
    ("+I", 1), ("+I", 2), ("-U", 1), ("+U", 1), ("-D", 2)]
""",
    "docs/append-tables.md#1": """
assert logs.scan().to_arrow().num_rows == 2 and clicks.scan().to_arrow().num_rows == 1
with clicks.writer("ingest-job") as writer:
    writer.write(batch)
    assert writer.commit(42) == []
""",
    "docs/branches.md#1": "assert table.list_branches() == []",
    "docs/postpone-bucket.md#1": """
assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
assert [s.commit_kind.value for s in table.snapshots()] == ["APPEND", "COMPACT", "APPEND"]
""",
}

# Examples on S3, run against moto's server: the placeholders they show, replaced.
ON_S3: dict[str, str] = {
    "docs/storage.md#1": """
import pyarrow as pa
schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
""",
}

# Examples that need a SparkSession (or Kafka, or a store this test has not): the calls they
# make are run by the Spark tests named.
NOT_STANDALONE: dict[str, str] = {
    "README.md#3": "Spark, Kafka: tests/streaming/test_sink.py, test_source.py, test_cdc.py, test_spark_operations.py",
    "docs/branches.md#2": "Spark: tests/streaming/test_branch_source.py",
    "docs/cdc.md#1": "Spark, Kafka: tests/streaming/test_cdc.py",
    "docs/cdc.md#2": "Spark, Kafka: tests/streaming/test_cdc_sync.py",
    "docs/spark.md#1": "Spark streaming: tests/streaming/test_sink.py",
    "docs/spark.md#2": "Spark's writers and SQL: tests/streaming/test_spark_writers.py",
    "docs/spark.md#3": "Spark: tests/streaming/test_spark_maintenance.py",
    "docs/spark.md#4": "Spark: tests/streaming/test_source.py",
    "docs/storage.md#2": "Spark on S3: tests/streaming/test_storage_options.py",
    "docs/storage.md#3": "a sketch: acquire/release stand for a DynamoDB client; gs:// needs gcsfs",
    "docs/table-operations.md#5": "Spark: tests/streaming/test_spark_operations.py",
    "docs/table-operations.md#6": "a Spark streaming query: tests/streaming/test_spark_operations.py",
}


def _examples() -> dict[str, str]:
    found = {}
    for doc in DOCS:
        blocks = re.findall(r"^```python\n(.*?)^```", doc.read_text(), flags=re.S | re.M)
        for n, block in enumerate(blocks, 1):
            found[f"{doc.relative_to(ROOT)}#{n}"] = block
    return found


EXAMPLES = _examples()


def test_every_example_is_declared() -> None:
    declared = [*SETUPS, *ON_S3, *NOT_STANDALONE]
    assert len(declared) == len(set(declared)), "an example is declared twice"
    undeclared = sorted(set(EXAMPLES) - set(declared))
    assert not undeclared, f"give these examples a setup in SETUPS, or a reason in NOT_STANDALONE: {undeclared}"
    stale = sorted(set(declared) - set(EXAMPLES))
    assert not stale, f"declared examples that no longer exist: {stale}"
    assert set(CHECKS) <= set(SETUPS)


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_every_example_parses(key: str) -> None:
    """Those that cannot run here too: what users copy must at least be Python."""
    compile(EXAMPLES[key], key, "exec")


def _run(key: str, code: str) -> dict[str, Any]:
    scope: dict[str, Any] = {"__name__": "__doc_example__"}
    exec(compile(code, f"{key} (with its setup)", "exec"), scope)
    return scope


@pytest.mark.parametrize("key", sorted(SETUPS))
def test_example_runs(key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = SETUPS[key] + EXAMPLES[key] + CHECKS.get(key, "")
    for warehouse in WAREHOUSES:
        code = code.replace(f'"{warehouse}', f'"{tmp_path}/{warehouse.rsplit("/", 1)[1]}')
    _run(key, code)


@pytest.mark.parametrize("key", sorted(ON_S3))
def test_s3_example_runs(key: str, s3: S3Endpoint) -> None:
    warehouse = s3.new_warehouse()
    code = (ON_S3[key] + EXAMPLES[key]).replace('"key": "...", "secret": "..."',
                                                '"key": "testing", "secret": "testing"')
    code = code.replace("http://minio:9000", s3.endpoint_url).replace("s3://lake/warehouse", warehouse)
    scope = _run(key, code)
    assert scope["table"].location == scope["same"].location == f"{warehouse}/db.db/orders"
