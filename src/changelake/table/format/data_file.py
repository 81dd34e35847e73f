"""Writing and reading the data files of a bucket (Parquet, ORC or Avro: ``file_format``), with
their manifest metadata."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from changelake.errors import CorruptMetadataError, StorageError
from changelake.table.format import avro_file, binary_row, deletion_vector, kv, orc_file, parquet_file, value_stats
from changelake.table.format.file_format import FileFormat, FormatWriter, codec
from changelake.table.format.file_format import of_path as file_format_of
from changelake.table.format.file_index import IndexCollector, index_file_name
from changelake.table.format.file_settings import FileSettings
from changelake.table.format.manifest import DataFileMeta, FileSource, SimpleStats
from changelake.table.io import killpoints
from changelake.table.io.fileio import FileIO
from changelake.table.io.killpoints import KillPoint

EMPTY_STATS = SimpleStats(
    binary_row.serialize(binary_row.to_bytes([], []), 0),
    binary_row.serialize(binary_row.to_bytes([], []), 0),
    (),
)


def key_row(table: pa.Table, names: Sequence[str], index: int) -> bytes:
    """The serialized key BinaryRow of row ``index`` of a key-value table."""
    return binary_row.serialize(binary_row.encode_row([table.column(kv.key_column(k))[index] for k in names]),
                                len(names))


def file_name(prefix: str, file_format: FileFormat) -> str:
    return f"{prefix}{uuid.uuid4()}-0.{file_format.value}"


class _OpenFile:
    """A data file being written straight to its place in the bucket, in the format of its
    level, with the metadata gathered so far. A data file's name is unique and it becomes part
    of the table only through a committed snapshot, so it needs no temporary name: a crash
    leaves at most an orphan (removed by ``remove_orphan_files``)."""

    def __init__(self, file_io: FileIO, place: tuple[str, str | None], schema: pa.Schema, settings: FileSettings,
                 level: int, *, keep: bool = False, first_sequence: int | None = None) -> None:
        file_format = settings.format_at(level)
        self.name = file_name(settings.prefix, file_format)
        directory, external_dir = place  # the file's directory, and its URI when external
        self.path = f"{directory}/{self.name}"
        self.external_path = None if external_dir is None else f"{external_dir}/{self.name}"
        # Rows arrive in the full key-value layout (the metadata needs the keys); a thin file
        # stores them without the _KEY_ columns.
        self.dropped = [kv.key_column(k) for k in settings.key_names] if settings.thin else []
        key_types = [schema.field(kv.key_column(k)).type for k in settings.key_names]
        schema = pa.schema([f for f in schema if f.name not in self.dropped], metadata=schema.metadata)
        compression = settings.compression_at(level)
        self.target = file_io.open_output(self.path)
        self.writer: FormatWriter
        try:
            if file_format is FileFormat.ORC:
                self.writer = orc_file.OrcWriter(self.target, schema, compression=codec(file_format, compression),
                                                 target_size=settings.target_file_size)
            elif file_format is FileFormat.AVRO:
                self.writer = avro_file.AvroWriter(self.target, schema, codec=codec(file_format, compression),
                                                   zstd_level=settings.zstd_level)
            else:
                self.writer = parquet_file.ParquetWriter(self.target, schema, compression=compression,
                                                         zstd_level=settings.zstd_level, dictionary=settings.dictionary)
        except BaseException:
            self.target.close()
            file_io.discard([self.path])
            raise
        self.rows = 0
        self.deletes = 0
        self.first: pa.Table | None = None  # the first and the last row written
        self.last: pa.Table | None = None
        # Rows are in key order, so the first key column's bounds are the first and last rows'
        # (not for floats, whose order and equality differ between Arrow and Paimon); the
        # other key columns' bounds are reduced from every chunk's, in Arrow.
        self.bounded = [i for i, k in enumerate(settings.key_names)
                        if i > 0 or not settings.ordered or pa.types.is_floating(key_types[i])]
        self.key_bounds: list[list[pa.StructScalar]] = [[] for _ in self.bounded]
        self.seq_min: int | None = None
        self.seq_max: int | None = None
        # Rows of an append table (no _SEQUENCE_NUMBER column) are numbered in write order from here.
        self.next_sequence = first_sequence
        self.keep = keep
        self.pieces: list[pa.Table] = []  # with ``keep``: what was written, for ``on_file``
        self.value_stats = value_stats.Collector(settings.value_fields, settings.modes_at(level),
                                                 given=settings.key_names, constant=settings.partition_keys,
                                                 dense=settings.dense_stats)
        self.index = None if settings.file_index is None else IndexCollector(settings.file_index)
        self.index_path: str | None = None  # the index file, once written

    def add(self, chunk: pa.Table, key_names: Sequence[str]) -> None:
        # Bookkeeping is per chunk and whole-column; BinaryRows are encoded once, at close
        # (a level-0 flush writes a small file per bucket, so per-file overhead counts).
        self.writer.write(chunk.drop_columns(self.dropped))
        if self.keep:
            self.pieces.append(chunk)
        if self.first is None:
            self.first = chunk.slice(0, 1)
        self.last = chunk.slice(chunk.num_rows - 1, 1)
        self.rows += chunk.num_rows
        self.value_stats.add(chunk)
        if self.index is not None:
            self.index.add(chunk)
        if self.next_sequence is not None:  # an append table's rows: all inserts, numbered in order
            low = self.next_sequence
            self.next_sequence = low + chunk.num_rows
            high = self.next_sequence - 1
        else:
            # Viewed chunk by chunk: a chunked column's to_numpy copies it (an allocation per file).
            for kinds in chunk.column(kv.VALUE_KIND).chunks:
                view = kinds.to_numpy()
                self.deletes += int(np.count_nonzero((view == kv.UPDATE_BEFORE) | (view == kv.DELETE)))
            bounds = pc.min_max(chunk.column(kv.SEQUENCE))
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
        self.seq_min = low if self.seq_min is None else min(self.seq_min, low)
        self.seq_max = high if self.seq_max is None else max(self.seq_max, high)
        for bounds, index in zip(self.key_bounds, self.bounded, strict=True):
            bounds.append(pc.min_max(chunk.column(kv.key_column(key_names[index]))))

    def _key_rows(self, settings: FileSettings
                  ) -> tuple[bytes, bytes, SimpleStats, dict[str, tuple[pa.Scalar, pa.Scalar]]]:
        """The first and last keys as BinaryRows, the min and max of every key column (no
        nulls: keys are primary-key columns), and those bounds by key name (the value columns
        of the same names have the same bounds)."""
        assert self.first is not None and self.last is not None
        arity = len(settings.key_names)
        if not arity:  # an append table's files have no key: empty key rows and statistics
            return EMPTY_STATS.min_values, EMPTY_STATS.max_values, EMPTY_STATS, {}
        names = [kv.key_column(k) for k in settings.key_names]
        firsts = [self.first.column(n)[0] for n in names]
        lasts = [self.last.column(n)[0] for n in names]
        first = binary_row.serialize(binary_row.encode_row(firsts), arity)
        last = binary_row.serialize(binary_row.encode_row(lasts), arity)
        lows, highs = list(firsts), list(lasts)
        for bounds, index in zip(self.key_bounds, self.bounded, strict=True):
            if len(bounds) == 1:
                lows[index], highs[index] = bounds[0]["min"], bounds[0]["max"]
            else:
                key_type = firsts[index].type
                lows[index] = pc.min(pa.array([b["min"] for b in bounds], key_type))
                highs[index] = pc.max(pa.array([b["max"] for b in bounds], key_type))
        by_name = {k: (low, high) for k, low, high in zip(settings.key_names, lows, highs, strict=True)}
        if not self.bounded:
            return first, last, SimpleStats(first, last, (0,) * arity), by_name
        low, high = (binary_row.serialize(binary_row.encode_row(row), arity) for row in (lows, highs))
        return first, last, SimpleStats(low, high, (0,) * arity), by_name

    def close(self, file_io: FileIO, settings: FileSettings, level: int, file_source: FileSource) -> DataFileMeta:
        # The crash test's point: the rows are on disk, the footer is not (a partial file).
        killpoints.reached(settings.kill_point, before_kill=self.writer.flush)
        size = self.writer.close()
        self.target.close()
        min_key, max_key, key_stats, key_bounds = self._key_rows(settings)
        values, value_columns = self.value_stats.stats(EMPTY_STATS, key_bounds)
        embedded, extra = self._write_index(file_io, settings)
        return DataFileMeta(
            file_name=self.name,
            file_size=size,
            row_count=self.rows,
            min_key=min_key,
            max_key=max_key,
            key_stats=key_stats,
            value_stats=values,
            min_sequence_number=self.seq_min or 0,
            max_sequence_number=self.seq_max or 0,
            schema_id=settings.schema_id,
            level=level,
            creation_time_ms=int(time.time() * 1000),
            delete_row_count=self.deletes,
            file_source=file_source,
            value_stats_cols=value_columns,
            external_path=self.external_path,
            extra_files=extra,
            embedded_index=embedded,
        )

    def _write_index(self, file_io: FileIO, settings: FileSettings) -> tuple[bytes | None, tuple[str, ...]]:
        """The file's index: embedded in its manifest entry up to the threshold, else written
        beside it (where the crash test can kill the writer halfway) and named as an extra file."""
        if self.index is None or settings.file_index is None:
            return None, ()
        data = self.index.serialized()
        if len(data) <= settings.file_index.in_manifest_threshold:
            return data, ()
        name = index_file_name(self.name)
        self.index_path = index_file_name(self.path)
        file_io.write_bytes(self.index_path, data, kill_point=KillPoint.FILE_INDEX)
        return None, (name,)

    def abandon(self, file_io: FileIO) -> None:
        """Remove the file after a failure while writing it (it may be closed already)."""
        with contextlib.suppress(Exception):
            self.writer.abandon()
        with contextlib.suppress(Exception):
            self.target.close()
        file_io.discard([self.path] if self.index_path is None else [self.path, self.index_path])


def write(
    file_io: FileIO,
    bucket_dir: str,
    chunks: Iterable[pa.Table],
    settings: FileSettings,
    level: int,
    file_source: FileSource = FileSource.APPEND,
    on_file: Callable[[DataFileMeta, pa.Table], None] | None = None,
    *,
    first_sequence: int | None = None,
) -> list[DataFileMeta]:
    """Write key-ordered chunks of key-value rows as data files in ``level``'s format, rolling
    to a new file once one reaches ``target-file-size``; returns each file's manifest metadata
    (the same whatever the format: gathered from the rows written). ``on_file`` is
    called with each file written and its rows (as given, zero-copy). An append table's rows
    (its columns only, in write order) are numbered from ``first_sequence``. With
    ``settings.external`` the files go under its external paths, each recording its URI
    (``external_path``)."""
    written: list[DataFileMeta] = []
    paths: list[str] = []
    current: _OpenFile | None = None
    external = settings.external

    def close(current: _OpenFile) -> None:
        meta = current.close(file_io, settings, level, file_source)
        written.append(meta)
        paths.append(current.path)
        if current.index_path is not None:
            paths.append(current.index_path)
        if on_file is not None:
            on_file(meta, pa.concat_tables(current.pieces))

    try:
        for chunk in chunks:
            # The file size is known after each row group, so row groups are kept well under the
            # target (in-memory size overstates the compressed size): files roll close to it.
            per_row = max(1, chunk.nbytes // max(1, chunk.num_rows))
            piece_rows = min(parquet_file.ROW_GROUP_ROWS, max(1024, settings.target_file_size // per_row))
            for start in range(0, chunk.num_rows, piece_rows):
                piece = chunk.slice(start, piece_rows)
                if current is None:
                    following = first_sequence if not written or first_sequence is None else \
                        written[-1].max_sequence_number + 1
                    place = (bucket_dir, None) if external is None else external.place(bucket_dir)
                    current = _OpenFile(file_io, place, piece.schema, settings, level, keep=on_file is not None,
                                        first_sequence=following)
                current.add(piece, settings.key_names)
                if current.writer.tell() >= settings.target_file_size:
                    close(current)
                    current = None
        if current is not None:
            close(current)
            current = None
    except BaseException:
        if current is not None:
            current.abandon(file_io)
        # the files closed before the failure: the caller never learns of them
        file_io.discard(paths)
        raise
    return written


def read(
    file_io: FileIO,
    path: str,
    schema: pa.Schema,
    columns: Sequence[str] | None = None,
    rows: tuple[int, int] | None = None,
    renames: Mapping[str, str | None] | None = None,
    *,
    deleted: BitMap | None = None,
    kinds_for_retractions: bool = False,
    dictionaries: bool = False,
) -> pa.Table:
    """Rows of a data file in ``schema``'s types (a subset of columns when given), in the full
    key-value layout whatever the file's: a thin file (Paimon's ``data-file.thin-mode``, which
    pypaimon-rust always writes) has no ``_KEY_<k>`` columns, and ``_KEY_<k>`` is read as its
    value column ``<k>`` (the same array under the key's name). The file's format is told by
    its extension. ``rows`` = (start, stop) reads only those rows, decoding only the Parquet row
    groups that hold them (an ORC file's stripes up to them; an Avro file whole). ``renames``
    maps columns the file stores under another name (a file of an older schema) to that name,
    or to None for a column the file lacks, read as all nulls. ``deleted`` (a deletion vector; not with ``rows``)
    leaves out the rows at the positions it holds. With ``kinds_for_retractions`` (the caller
    reads ``_VALUE_KIND`` only to drop -U/-D rows) it is left out where a Parquet file's
    statistics show it holds none. With ``dictionaries``, the string and binary columns of a
    Parquet file that stores them as dictionary indices only come back as dictionary arrays
    (of their type's values; the caller decodes them): filtered first, then decoded, the
    values of rows left out are never copied, and decoding a dictionary array costs less
    than Parquet's decoding of the same pages into plain strings."""
    if deleted is not None and rows is not None:
        raise ValueError("a data file is read either whole minus its deleted rows or by row range")
    file_format = file_format_of(path)
    names = list(schema.names if columns is None else columns)
    with opened(file_io, path) as source:
        if file_format is not FileFormat.PARQUET:
            table, stored, (absent, present) = _read_other(source, path, file_format, names, renames, rows)
            keep = deletion_vector.keep_mask(deleted, table.num_rows)
            table = table if keep is None else table.filter(keep)
            return _conform(table, schema, columns, names, present, stored, absent)
        found = parquet_file.footer(source, path, file_io.protocol)
        if kinds_for_retractions and columns is not None:
            columns = parquet_file.kinds_if_retracting(found, columns)
            names = list(columns)
        absent, present, as_stored = _absent_and_present(names, renames)
        stored = _stored_columns(as_stored, found.names, path)
        # A thin file's <k> is read once, for both <k> and _KEY_<k>.
        read_columns = None if columns is None and stored == names else list(dict.fromkeys(stored))
        keep = deletion_vector.keep_mask(deleted, found.metadata.num_rows)
        # String columns whose values are all dictionary indices are read as dictionaries and
        # filtered before they are decoded (by _conform's cast, unless ``dictionaries``), so the
        # strings of deleted rows are never copied.
        encoded = parquet_file.dictionary_only_columns(found, read_columns) if keep is not None or dictionaries else []
        parquet = parquet_file.opened(source, path, metadata=found.metadata, read_dictionary=encoded or None)
        if keep is not None:
            table = parquet.read(columns=read_columns).filter(keep)
        else:
            table = parquet.read(columns=read_columns) if rows is None else \
                parquet_file.read_rows(parquet, read_columns, rows)
    kept = {n for n, s in zip(present, stored, strict=True) if s in encoded} if dictionaries else set()
    return _conform(table, schema, columns, names, present, stored, absent, kept)


def _read_other(source: pa.NativeFile, path: str, file_format: FileFormat, names: list[str],
                renames: Mapping[str, str | None] | None, rows: tuple[int, int] | None
                ) -> tuple[pa.Table, list[str], tuple[list[str], list[str]]]:
    """:func:`read` of an ORC or Avro file, up to the deletion vector: the file columns that
    ``names`` are read from (``stored``), and the ``names`` the file lacks and has."""
    absent, present, as_stored = _absent_and_present(names, renames)
    if file_format is FileFormat.ORC:
        orc = orc_file.opened(source, path)
        stored = _stored_columns(as_stored, orc_file.column_names(orc), path)
        table = orc_file.read(orc, list(dict.fromkeys(stored)), rows, path)
    else:
        # Avro has no index: the file is decoded whole (files of one level are small)
        whole = avro_file.read(source.read(), path)
        stored = _stored_columns(as_stored, whole.column_names, path)
        table = whole.select(list(dict.fromkeys(stored)))
        if rows is not None:
            table = table.slice(rows[0], rows[1] - rows[0])
    return table, stored, (absent, present)


def _absent_and_present(names: Sequence[str], renames: Mapping[str, str | None] | None
                        ) -> tuple[list[str], list[str], list[str]]:
    """The ``names`` a file of an older schema lacks (read as nulls), the others, and the
    others under the names the file stores them by."""
    renamed = renames or {}
    absent = [n for n in names if n in renamed and renamed[n] is None]
    present = [n for n in names if n not in absent]
    return absent, present, [renamed.get(n) or n for n in present]


@contextlib.contextmanager
def opened(file_io: FileIO, path: str) -> Iterator[pa.NativeFile]:
    """A data file opened for reading; a missing or unreadable one is corrupt metadata (a
    store that fails to answer raises StorageError)."""
    try:
        with file_io.arrow_fs.open_input_file(path) as source:
            yield source
    except FileNotFoundError:
        raise CorruptMetadataError("data file is missing", file=path) from None
    except StorageError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise CorruptMetadataError(f"data file is unreadable: {exc}", file=path) from None


def read_batches(
    file_io: FileIO,
    path: str,
    schema: pa.Schema,
    columns: Sequence[str],
    batch_rows: int,
    renames: Mapping[str, str | None] | None = None,
    *,
    kinds_for_retractions: bool = False,
) -> Iterator[pa.Table]:
    """The rows of a data file as :func:`read` reads them, ``batch_rows`` at a time in file
    order, so a big file is never in memory whole."""
    file_format = file_format_of(path)
    if file_format is FileFormat.AVRO:
        whole = read(file_io, path, schema, columns, renames=renames)
        yield from (whole.slice(start, batch_rows) for start in range(0, whole.num_rows, batch_rows))
        return
    with opened(file_io, path) as source:
        if file_format is FileFormat.ORC:
            orc = orc_file.opened(source, path)
            names = list(columns)
            absent, present, as_stored = _absent_and_present(names, renames)
            stored = _stored_columns(as_stored, orc_file.column_names(orc), path)
            for stripe in orc_file.stripes(orc, list(dict.fromkeys(stored)), path):
                for start in range(0, stripe.num_rows, batch_rows):
                    piece = pa.Table.from_batches([stripe.slice(start, batch_rows)])
                    yield _conform(piece, schema, columns, names, present, stored, absent)
            return
        found = parquet_file.footer(source, path, file_io.protocol)
        parquet = parquet_file.opened(source, path, metadata=found.metadata)
        names = parquet_file.kinds_if_retracting(found, columns) if kinds_for_retractions else list(columns)
        columns = names
        absent, present, as_stored = _absent_and_present(names, renames)
        stored = _stored_columns(as_stored, found.names, path)
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=list(dict.fromkeys(stored))):
            yield _conform(pa.Table.from_batches([batch]), schema, columns, names, present, stored, absent)


def _conform(table: pa.Table, schema: pa.Schema, columns: Sequence[str] | None, names: list[str],
             present: list[str], stored: list[str], absent: list[str],
             encoded: Collection[str] = frozenset()) -> pa.Table:
    """Rows read from the ``stored`` file columns as the ``names`` columns in ``schema``'s
    types (``absent`` ones all nulls); the ``encoded`` ones stay dictionary arrays of them."""
    if stored != names:
        arrays = dict(zip(present, (table.column(c) for c in stored), strict=True))
        arrays.update({n: pa.nulls(table.num_rows, schema.field(n).type) for n in absent})
        table = pa.Table.from_arrays([arrays[n] for n in names], names=names)
    wanted = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    if encoded:
        wanted = pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in encoded else f
                            for f in wanted])
    if table.schema.equals(wanted):
        return table
    return table.select(wanted.names).cast(wanted)


def decoded_column(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A column :func:`read` returned, dictionary arrays (``dictionaries``) decoded."""
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def decoded(rows: pa.Table) -> pa.Table:
    """Rows :func:`read` returned with their dictionary arrays (``dictionaries``) decoded."""
    for index, field in enumerate(rows.schema):
        if pa.types.is_dictionary(field.type):
            rows = rows.set_column(index, field.with_type(field.type.value_type), decoded_column(rows.column(index)))
    return rows


def _stored_columns(names: Sequence[str], present: Sequence[str], path: str) -> list[str]:
    """The file column each of ``names`` is read from: itself, or for a ``_KEY_<k>`` the file
    lacks (a thin file), the value column ``<k>``. Files are told apart by their own columns,
    not by the table option, since one bucket may hold files of both layouts (the option can
    change, and other writers choose for themselves)."""
    have = set(present)
    stored = []
    for name in names:
        value = name.removeprefix(kv.KEY_PREFIX)
        if name in have or value == name:
            stored.append(name)
        elif value in have:
            stored.append(value)
        else:
            raise CorruptMetadataError(f"data file has neither {name} nor {value}", file=path, column=name)
    return stored
