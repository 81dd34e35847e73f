"""Writing data files: written in place, the manifest metadata gathered while writing, and no
file left behind by a write that fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from changelake.option_values import parse_stats_mode
from changelake.table.format import binary_row, data_file, kv
from changelake.table.format.file_settings import FileSettings
from changelake.table.io.fileio import FileIO

SCHEMA = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.float64(), nullable=False),
                    pa.field("v", pa.string())])
KEYS = ("a", "b")


def _settings(target_file_size: int) -> FileSettings:
    return FileSettings(schema_id=0, key_names=KEYS, compression="zstd", zstd_level=1,
                        target_file_size=target_file_size)


def _rows(n: int) -> pa.Table:
    """Rows in (a, b) order: ``a`` ascending, ``b`` zigzagging within each ``a`` (so a file's
    ``b`` bounds are not its first and last rows'), -0.0 and 0.0 among them."""
    a = [i // 4 for i in range(n)]
    b = [[3.5, -0.0, 0.0, 9.25][i % 4] - (i // 4) for i in range(n)]
    order = sorted(range(n), key=lambda i: (a[i], b[i]))
    a, b = [a[i] for i in order], [b[i] for i in order]
    return pa.table({"_KEY_a": a, "_KEY_b": b, kv.SEQUENCE: list(range(100, 100 + n)),
                     kv.VALUE_KIND: [kv.DELETE if i % 5 == 0 else kv.INSERT for i in range(n)],
                     "a": a, "b": b, "v": [f"v{i}" for i in range(n)]}, schema=kv.file_schema(SCHEMA, KEYS))


def _decoded(row: bytes) -> tuple[object, ...]:
    return binary_row.from_bytes(binary_row.deserialize(row)[1], [pa.int64(), pa.float64()])


@pytest.mark.parametrize("target_file_size", [1, 1 << 30])
def test_metadata_matches_the_rows_of_each_file(tmp_path: Path, target_file_size: int) -> None:
    rows = _rows(6000)
    file_io, root = FileIO.for_url(str(tmp_path))
    chunks = [rows.slice(0, 2500), rows.slice(2500, 3500)]
    metas = data_file.write(file_io, f"{root}/bucket-0", chunks, _settings(target_file_size), level=0)
    # a tiny target rolls after every 1024-row piece of each chunk: 3 of 2,500 rows, 4 of 3,500
    assert len(metas) == (1 if target_file_size > 1 else 7)
    seen = 0
    for meta in metas:
        path = f"{root}/bucket-0/{meta.file_name}"
        assert os.path.getsize(path) == meta.file_size
        stored = pq.read_table(path)
        assert stored.equals(rows.slice(seen, meta.row_count))
        seen += meta.row_count
        assert _decoded(meta.min_key) == (stored["a"][0].as_py(), stored["b"][0].as_py())
        assert _decoded(meta.max_key) == (stored["a"][-1].as_py(), stored["b"][-1].as_py())
        bounds = [pc.min_max(stored[k]) for k in KEYS]
        assert _decoded(meta.key_stats.min_values) == tuple(m["min"].as_py() for m in bounds)
        assert _decoded(meta.key_stats.max_values) == tuple(m["max"].as_py() for m in bounds)
        assert meta.key_stats.null_counts == (0, 0)
        assert (meta.min_sequence_number, meta.max_sequence_number) == (
            pc.min(stored[kv.SEQUENCE]).as_py(), pc.max(stored[kv.SEQUENCE]).as_py())
        assert meta.delete_row_count == pc.sum(pc.equal(stored[kv.VALUE_KIND], kv.DELETE)).as_py()
        # the row kinds' statistics tell a merge-free read whether to decode them
        footer = pq.ParquetFile(path).metadata
        for group in range(footer.num_row_groups):
            columns = [footer.row_group(group).column(i) for i in range(footer.num_columns)]
            kinds = next(c for c in columns if c.path_in_schema == kv.VALUE_KIND)
            assert kinds.is_stats_set and (kinds.statistics.min, kinds.statistics.max) == (kv.INSERT, kv.DELETE)
    assert seen == rows.num_rows


def test_a_failed_write_leaves_no_file(tmp_path: Path) -> None:
    rows = _rows(3000)
    file_io, root = FileIO.for_url(str(tmp_path))

    def chunks() -> Iterator[pa.Table]:
        yield rows.slice(0, 2000)
        raise RuntimeError("the input failed")

    with pytest.raises(RuntimeError, match="the input failed"):
        data_file.write(file_io, f"{root}/bucket-0", chunks(), _settings(1 << 30), level=0)
    assert os.listdir(f"{root}/bucket-0") == []


@pytest.mark.parametrize("partition", ["2024-01-01", None])
@pytest.mark.parametrize("target_file_size", [1, 1 << 30])
def test_value_stats_match_the_rows_of_each_file(tmp_path: Path, partition: str | None,
                                                  target_file_size: int) -> None:
    # The key columns' bounds come from the key statistics and the partition column's from its
    # one value, not from the rows: still every column's min, max and null count of the file.
    schema = SCHEMA.append(pa.field("p", pa.string()))
    rows = _rows(6000)
    rows = rows.append_column("p", pa.array([partition] * rows.num_rows, pa.string()))
    modes = (parse_stats_mode("full"),) * len(schema)
    settings = FileSettings(schema_id=0, key_names=KEYS, compression="zstd", zstd_level=1,
                            target_file_size=target_file_size, value_fields=tuple(schema), value_modes=modes,
                            partition_keys=("p",))
    file_io, root = FileIO.for_url(str(tmp_path))
    metas = data_file.write(file_io, f"{root}/bucket-0", [rows.slice(0, 2500), rows.slice(2500)], settings, level=0)
    types = [f.type for f in schema]
    for meta in metas:
        stored = pq.read_table(f"{root}/bucket-0/{meta.file_name}")
        bounds = [pc.min_max(stored[f.name]) for f in schema]
        stats = meta.value_stats
        assert binary_row.from_bytes(binary_row.deserialize(stats.min_values)[1], types) == tuple(
            b["min"].as_py() for b in bounds)
        assert binary_row.from_bytes(binary_row.deserialize(stats.max_values)[1], types) == tuple(
            b["max"].as_py() for b in bounds)
        assert stats.null_counts == tuple(stored[f.name].null_count for f in schema)
