"""ORC data files, written and read whole-table or a stripe at a time by ``pyarrow.orc``.

Paimon's ORC layout (``OrcTypeUtil``): the Arrow types map to ORC's as pyarrow maps them
(TIMESTAMP to ``timestamp``, TIMESTAMP_LTZ to ``timestamp with local time zone``, DECIMAL,
DATE, ARRAY, MAP, ROW alike), but for the types ORC lacks: ``TIME`` is stored as an ``int``
of milliseconds of the day and ``BINARY(n)`` as ``binary``, as Paimon stores them. Reading
casts a file's columns back to the table's types, so files of any ORC writer read alike.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.orc as orc

from changelake.errors import CorruptMetadataError, StorageError

# What the writer buffers before it writes a stripe; files roll once a stripe takes them past
# the target size, so a stripe is kept a fraction of it (Paimon's orc.stripe.size is 64 MB).
_MAX_STRIPE_BYTES = 64 * 1024 * 1024
_MIN_STRIPE_BYTES = 1024 * 1024


def stored_type(data_type: pa.DataType) -> pa.DataType:
    """The type a column of ``data_type`` is handed to the ORC writer as."""
    if pa.types.is_time32(data_type) or pa.types.is_time64(data_type):
        return pa.int32()
    if pa.types.is_fixed_size_binary(data_type):
        return pa.binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(stored_type(f.type)) for f in data_type])
    if pa.types.is_map(data_type):
        item = data_type.item_field
        return pa.map_(stored_type(data_type.key_type), item.with_type(stored_type(item.type)))
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return pa.list_(data_type.value_field.with_type(stored_type(data_type.value_type)))
    return data_type


def _to_stored(array: pa.Array, target: pa.DataType) -> pa.Array:
    if array.type == target:
        return array
    if pa.types.is_time32(array.type) or pa.types.is_time64(array.type):
        return array.cast(pa.time32("ms")).cast(pa.int32())
    return array.cast(target)


class OrcWriter:
    """An ORC data file being written to ``target``."""

    def __init__(self, target: pa.NativeFile, schema: pa.Schema, *, compression: str, target_size: int) -> None:
        self.target = target
        self.schema = pa.schema([f.with_type(stored_type(f.type)) for f in schema])
        stripe = max(_MIN_STRIPE_BYTES, min(_MAX_STRIPE_BYTES, target_size // 2))
        self.writer = orc.ORCWriter(target, compression=compression, stripe_size=stripe)

    def write(self, table: pa.Table) -> None:
        if not table.schema.equals(self.schema):
            table = pa.Table.from_arrays(
                [pa.chunked_array([_to_stored(c, f.type) for c in column.chunks], f.type)
                 for column, f in zip(table.columns, self.schema, strict=True)], schema=self.schema)
        self.writer.write(table)

    def tell(self) -> int:
        return int(self.target.tell())

    def flush(self) -> None:
        self.target.flush()

    def close(self) -> int:
        self.writer.close()
        return int(self.target.tell())

    def abandon(self) -> None:
        self.writer.close()


def opened(source: pa.NativeFile, path: str) -> orc.ORCFile:
    """``source`` read as ORC; content that is not is CorruptMetadataError naming the file."""
    try:
        return orc.ORCFile(source)
    except StorageError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file is not ORC: {exc}", file=path) from None


def _hidden_nulls_filled(array: pa.Array) -> pa.Array:
    """A ROW column with the fields of its null rows set to a value the field holds elsewhere
    (ORC has no NOT NULL: a field is null where its row is, which a NOT NULL field of the
    table's type cannot take; the value is never seen, its row being null)."""
    if not pa.types.is_struct(array.type) or not array.null_count:
        return array
    assert isinstance(array, pa.StructArray)
    valid = array.is_valid()
    children = []
    for index in range(array.type.num_fields):
        child = _hidden_nulls_filled(array.field(index))
        if child.null_count and child.null_count < len(child):
            some = child.filter(child.is_valid())[0]
            child = pc.if_else(pc.or_(valid, child.is_valid()), child, some)
        children.append(child)
    return pa.StructArray.from_arrays(children, fields=list(array.type), mask=pc.invert(valid))


def _filled(table: pa.Table) -> pa.Table:
    if not any(pa.types.is_struct(t) for t in table.schema.types):
        return table
    return pa.Table.from_arrays([pa.chunked_array([_hidden_nulls_filled(c) for c in column.chunks], column.type)
                                 for column in table.columns], names=table.column_names)


def read(file: orc.ORCFile, columns: list[str] | None, rows: tuple[int, int] | None, path: str) -> pa.Table:
    """The ``columns`` (None: all) of an ORC file, rows [start, stop) only when ``rows`` is
    given (the stripes up to ``stop`` are decoded)."""
    try:
        if rows is None:
            return _filled(file.read(columns=columns))
        start, stop = rows
        pieces, position = [], 0
        for batch in stripes(file, columns, path):
            if position >= stop:
                break
            if position + batch.num_rows > start:
                pieces.append(batch.slice(max(0, start - position), stop - max(start, position)))
            position += batch.num_rows
        if not pieces:
            empty = file.schema.empty_table()
            return empty if columns is None else empty.select(columns)
        return _filled(pa.Table.from_batches(pieces))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"ORC data file is unreadable: {exc}", file=path) from None


def stripes(file: orc.ORCFile, columns: Sequence[str] | None, path: str) -> Iterator[pa.RecordBatch]:
    """The stripes of an ORC file, one batch each, in file order."""
    try:
        for index in range(file.nstripes):
            stripe = file.read_stripe(index, columns=None if columns is None else list(columns))
            yield _filled(pa.Table.from_batches([stripe])).to_batches()[0] if stripe.num_rows else stripe
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"ORC data file is unreadable: {exc}", file=path) from None


def column_names(file: orc.ORCFile) -> list[str]:
    """The top-level columns of an ORC file."""
    return list(file.schema.names)
