"""Reading the Avro data files other engines write: Java Paimon's and pypaimon's postpone-bucket
writers write ``bucket-postpone/`` files in Avro (Paimon's ``PostponeBucketFileStoreWrite`` sets
``file.format = avro`` whenever the schema converts to Avro).

Rows are decoded by fastavro, record by record, and handed to Arrow column by column: such files
are a writer's small batches waiting for compaction, read once by it (and by change streams of
tables without a changelog producer), never by batch scans.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pyarrow as pa

from changelake.errors import CorruptMetadataError


def is_avro(path: str) -> bool:
    """Whether the data file at ``path`` is an Avro file (Paimon tells formats by extension)."""
    return path.endswith(".avro")


def decode(data: bytes, path: str) -> pa.Table:
    """Every column of the Avro data file ``data`` (read from ``path``), in the types Arrow
    infers from its values (the caller casts them to the table's)."""
    try:
        reader = fastavro.reader(io.BytesIO(data))
        schema: Any = reader.writer_schema
        records: list[Any] = list(reader)
    except Exception as exc:  # fastavro raises many types for garbage input
        raise CorruptMetadataError(f"data file is not Avro: {exc}", file=path) from None
    names = [field["name"] for field in schema["fields"]]
    return pa.table({name: pa.array([record[name] for record in records]) for name in names})

