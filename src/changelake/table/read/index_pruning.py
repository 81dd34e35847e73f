"""Skipping data files by their file indexes (Paimon's ``FileIndexPredicate``): a file whose
bloom filter or bitmap index of a column proves that an ``=`` or ``IN`` filter on it matches
no row is not read.

The filter is a pyarrow expression; its tree is read from Arrow's own serialization of it (an
IPC file whose schema metadata lists, in order, ``call``/``end`` pairs around each call's
arguments, ``field_ref`` names and ``literal``/``options`` column numbers). Only ``and``,
``or``, ``if_else`` (either branch), ``equal`` of a column and a literal, ``is_in`` of a
column and boolean literals are interpreted; any other part may match. Index columns are
matched to the filter's by field id, as value statistics are (a column renamed since the file
was written keeps its index; one whose type changed has none).

Whether a file may be skipped is the planner's call (see ``planner.plan``), as for value
statistics, and ``file-index.read.enabled`` = false turns this off.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from changelake.errors import CorruptMetadataError
from changelake.table.context import TableContext
from changelake.table.executor import map_all
from changelake.table.format import data_file, file_index
from changelake.table.format.manifest import ManifestEntry


@dataclass(frozen=True)
class Column:
    name: str


@dataclass(frozen=True)
class Literal:
    value: pa.Scalar


@dataclass(frozen=True)
class Call:
    function: str
    arguments: tuple[Node, ...]
    options: pa.StructScalar | None


Node = Column | Literal | Call | None  # None: a part not understood


class _ArrowSchema(ctypes.Structure):
    """The C data interface's ``struct ArrowSchema`` (its stable ABI)."""

    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
                ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """A schema's metadata in order, repeated keys kept (``Schema.metadata`` is a dict, which
    keeps one value per key): read through the C data interface, whose metadata is an int32
    count, then each key and value as an int32 length and bytes."""
    capsule = schema.__arrow_c_schema__()  # released when the capsule goes
    exported = _ArrowSchema.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not exported.metadata:
        return []
    at = exported.metadata
    count = ctypes.c_int32.from_address(at).value
    at += 4
    pairs = []
    for _ in range(count):
        texts = []
        for _ in range(2):
            length = ctypes.c_int32.from_address(at).value
            texts.append(ctypes.string_at(at + 4, length).decode())
            at += 4 + length
        pairs.append((texts[0], texts[1]))
    return pairs


def parse(expression: pc.Expression) -> Node:
    """The tree of ``expression`` (None where it cannot be read)."""
    try:
        serialized = expression.__reduce__()[1][0]
        table = ipc.open_file(serialized).read_all()
        pairs = iter(_metadata_pairs(table.schema))
        return _node(next(pairs), pairs, table)
    except (pa.ArrowException, StopIteration, ValueError, IndexError, TypeError):
        return None


def _node(head: tuple[str, str], rest: Iterator[tuple[str, str]], table: pa.Table) -> Node:
    kind, value = head
    if kind == "literal":
        return Literal(table.column(int(value))[0])
    if kind == "field_ref":
        return Column(value)
    if kind != "call":
        raise ValueError(f"unexpected {kind}")
    arguments: list[Node] = []
    options = None
    for item in rest:
        if item == ("end", value):
            return Call(value, tuple(arguments), options)
        if item[0] == "options":
            options = table.column(int(item[1]))[0]
        elif item[0] == "nested_field_ref":  # a nested column: not one an index covers
            for _ in range(int(item[1])):
                next(rest)
            arguments.append(None)
        else:
            arguments.append(_node(item, rest, table))
    raise ValueError(f"call {value} without end")


def holds_nan(node: Node) -> bool:
    """Whether the tree has a NaN literal (value sets of ``IN`` aside)."""
    if isinstance(node, Literal):
        return pa.types.is_floating(node.value.type) and node.value.is_valid and math.isnan(node.value.as_py())
    return isinstance(node, Call) and any(holds_nan(a) for a in node.arguments)


def point_columns(node: Node) -> set[str]:
    """The columns ``=`` or ``IN`` terms of the tree constrain."""
    if not isinstance(node, Call):
        return set()
    found = set().union(*(point_columns(a) for a in node.arguments)) if node.arguments else set()
    term = _term(node)
    return found | {term[0]} if term is not None else found


def _term(node: Call) -> tuple[str, pa.Array] | None:
    """A column and the values an ``=`` or ``IN`` term admits (None: another kind of term)."""
    if node.function == "equal" and len(node.arguments) == 2:
        left, right = node.arguments
        if isinstance(left, Literal) and isinstance(right, Column):
            left, right = right, left
        if isinstance(left, Column) and isinstance(right, Literal) and right.value.is_valid:
            return left.name, pa.array([right.value.as_py()], right.value.type)
    if node.function == "is_in" and len(node.arguments) == 1 and isinstance(node.arguments[0], Column) \
            and node.options is not None:
        values = node.options["value_set"].values
        if values is not None and values.null_count == 0:  # a null in the set may match null rows
            return node.arguments[0].name, values
    return None


# The indexes of a file by current column name: each index's kind and body, and the column's type.
Indexes = Mapping[str, tuple[pa.DataType, Mapping[str, bytes | None]]]


def may_match(node: Node, indexes: Indexes) -> bool:
    """Whether rows of a file with these ``indexes`` may satisfy the tree."""
    if isinstance(node, Literal) and pa.types.is_boolean(node.value.type):
        return node.value.as_py() is True  # false and null keep no row
    if not isinstance(node, Call):
        return True
    if node.function == "if_else" and len(node.arguments) == 3:  # a row is kept by the branch it takes
        return may_match(node.arguments[1], indexes) or may_match(node.arguments[2], indexes)
    if node.function in ("and", "and_kleene"):
        return all(may_match(a, indexes) for a in node.arguments)
    if node.function in ("or", "or_kleene"):
        return any(may_match(a, indexes) for a in node.arguments)
    term = _term(node)
    if term is None or term[0] not in indexes:
        return True
    column, values = term
    t, kinds = indexes[column]
    try:
        values = values.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return True  # a value of another type: compared after a cast, which the index cannot follow
    if pa.types.is_floating(t):
        # a filter's 0.0 matches -0.0 and the other way round, which indexes keep apart (by bits)
        zeros = values.filter(pc.equal(values, 0))
        values = pa.concat_arrays([values, pc.negate(zeros)])
    return all(file_index.may_contain(kind, body, values) for kind, body in kinds.items())


def _stored(ctx: TableContext, entry: ManifestEntry, wanted: set[str]) -> dict[str, dict[str, bytes | None]]:
    """The indexes of an entry's file (column -> kind -> body), by the file's column names:
    embedded ones whole; of an index file, the head and the bodies of the ``wanted`` columns
    only (one ranged read each)."""
    meta = entry.file
    if meta.embedded_index is not None:
        return file_index.parse(meta.embedded_index)
    names = file_index.index_files(meta.extra_files)
    if not names:
        return {}
    # extra files lie beside their data file
    path = f"{ctx.entry_path(entry).rsplit('/', 1)[0]}/{names[0]}"
    with data_file.opened(ctx.file_io, path) as source:
        def read(offset: int, length: int) -> bytes:
            data: bytes = source.read_at(length, offset)
            if len(data) != length:
                raise CorruptMetadataError("file index is truncated", file=path)
            return data

        return {column: {kind: None if where is None else read(*where) for kind, where in kinds.items()}
                for column, kinds in file_index.layout(read).items() if column in wanted}


def _file_indexes(ctx: TableContext, entry: ManifestEntry, wanted: set[str]) -> Indexes:
    """The indexes of an entry's file over the ``wanted`` (current) columns."""
    meta = entry.file
    schema = ctx.schema if meta.schema_id == ctx.schema.id else ctx.schemas.get(meta.schema_id)
    then = {f.name: f for f in schema.fields}
    now = {f.id: f for f in ctx.schema.fields}
    # the file's names of the wanted columns (a column renamed since keeps its index)
    names = {f.name: now[f.id] for f in then.values() if f.id in now and now[f.id].name in wanted}
    found = {}
    for column, kinds in _stored(ctx, entry, set(names)).items():
        if column not in names:
            continue
        t = then[column].arrow_field().type
        if names[column].arrow_field().type == t:
            found[names[column].name] = (t, kinds)
    return found


def unmatched(ctx: TableContext, entries: Sequence[ManifestEntry], expression: pc.Expression | None,
              passed: Callable[[ManifestEntry], bool] = lambda _: False) -> set[str]:
    """The files (by name) whose indexes prove the filter matches none of their rows, among
    ``entries`` not ``passed`` over (already skipped otherwise)."""
    if expression is None or not ctx.options.file_index_read_enabled:
        return set()
    tree = parse(expression)
    wanted = point_columns(tree)
    if not wanted:
        return set()
    candidates = [e for e in entries if not passed(e) and (e.file.embedded_index is not None or e.file.extra_files)]
    # index files are read in parallel (each a read or two of storage)
    found = map_all(lambda e: _file_indexes(ctx, e, wanted), candidates)
    return {e.file.file_name for e, indexes in zip(candidates, found, strict=True) if not may_match(tree, indexes)}
