"""Value statistics of data files, as Paimon's ``SimpleStatsCollector`` keeps them: per column
the null count and, by the column's stats mode (``metadata.stats-mode``, overridden by
``fields.<name>.stats-mode``), its min and max (``full``), those with strings truncated
(``truncate(N)``), the null count only (``counts``) or nothing (``none``).

Gathered per written chunk with whole-array Arrow kernels and combined when the file closes.
The layout is Paimon's ``SimpleStatsConverter``'s. When every column has statistics: a
BinaryRow of every table column in schema order with ``_VALUE_STATS_COLS`` null (Java Paimon
0.9 has no such field and reads its stats as every column; Paimon 1.x and pypaimon read null
as every column). Columns without bounds hold nulls (a null count of null: unknown). When some
column's mode is ``none``, ``metadata.stats-dense-store`` (Paimon's default, true) records only
the others, named in ``_VALUE_STATS_COLS`` (none at all: an empty list); false records every
column, the ``none`` ones null, as all engines since Java Paimon 0.9.0 read.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from changelake.errors import OptionError
from changelake.option_values import StatsKind, StatsMode, parse_stats_mode
from changelake.options import TableOptions
from changelake.table.format import binary_row
from changelake.table.format.manifest import SimpleStats

FIELD_SUFFIX = "stats-mode"


def field_option(name: str) -> str:
    """The key of column ``name``'s own stats mode."""
    return f"fields.{name}.{FIELD_SUFFIX}"


def column_modes(options: TableOptions, names: Sequence[str], default: StatsMode | None = None
                 ) -> tuple[StatsMode, ...]:
    """Each column's mode: its ``fields.<name>.stats-mode``, else ``default`` (a level's or the
    changelog files' mode), else ``metadata.stats-mode``; OptionError naming the option for a
    bad value."""
    modes = []
    for name in names:
        key = field_option(name)
        text = options.raw.get(key)
        if text is None:
            modes.append(default or options.metadata_stats_mode)
            continue
        try:
            modes.append(parse_stats_mode(text))
        except ValueError as exc:
            raise OptionError(f"has invalid value {text!r}: {exc}", table=options.table, option=key) from None
    return tuple(modes)


def check_field_modes(options: TableOptions, names: Sequence[str], keys: Collection[str] | None = None) -> None:
    """OptionError for a ``fields.<name>.stats-mode`` (of ``keys``, the options set: None for
    all) with a bad value or naming no column of ``names``."""
    column_modes(options, names)
    suffix = f".{FIELD_SUFFIX}"
    for key in sorted(options.raw if keys is None else keys):
        if key in options.raw and key.startswith("fields.") and key.endswith(suffix):
            name = key.removeprefix("fields.").removesuffix(suffix)
            if name not in names:
                hint = difflib.get_close_matches(name, names, n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
                raise OptionError(f"column {name!r} is not in the table{suggestion}", table=options.table, option=key)


def has_bounds(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` gets a min and max: ordered scalars, as Paimon's Parquet
    statistics give them (binary and nested columns get null counts only). Not a microsecond
    TIME: its BinaryRow slot holds milliseconds, so a max would be cut below the values."""
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                or pa.types.is_decimal(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_date32(t) or pa.types.is_time32(t) or pa.types.is_timestamp(t))


def truncated_max(value: str, length: int) -> str | None:
    """An upper bound of ``value`` at most ``length`` code points long, as Paimon's
    ``Truncate.truncateMax``: the prefix with its last code point that can be incremented
    incremented (surrogates skipped, as UTF-8 cannot hold them); None when none can be."""
    if len(value) <= length:
        return value
    points = [ord(c) for c in value[:length]]
    for i in range(length - 1, -1, -1):
        following = points[i] + 1
        if 0xD800 <= following <= 0xDFFF:
            following = 0xE000
        if following <= 0x10FFFF:
            return "".join(map(chr, points[:i])) + chr(following)
    return None


@dataclass(frozen=True)
class _Plan:
    """What a collector gathers of each column, worked out once for a table's files (every
    data file written has a collector: a flush writes a small file per bucket)."""

    silent: bool  # no column has statistics
    recorded: tuple[int, ...]  # the columns recorded: with the dense layout only those with statistics
    bounded: tuple[bool, ...]  # whether the column gets a min and max
    constant: tuple[int, ...]  # bounded columns holding one value per file
    gathered: tuple[int, ...]  # bounded columns whose bounds are reduced from the rows
    # a column without bounds: a null of its type (nested columns have no slot value of their
    # own: a null of any type is theirs)
    absent: tuple[pa.Scalar, ...]


@functools.lru_cache(maxsize=256)
def _plan(fields: tuple[pa.Field, ...], modes: tuple[StatsMode, ...], given: tuple[str, ...],
          constant: tuple[str, ...], *, dense: bool) -> _Plan:
    bounded = tuple(m.bounded and has_bounds(f.type) for f, m in zip(fields, modes, strict=True))
    reduced = [i for i, f in enumerate(fields) if bounded[i] and f.name not in given]
    return _Plan(
        silent=all(m.kind is StatsKind.NONE for m in modes),
        recorded=tuple(i for i, m in enumerate(modes) if not dense or m.kind is not StatsKind.NONE),
        bounded=bounded,
        constant=tuple(i for i in reduced if fields[i].name in constant),
        gathered=tuple(i for i in reduced if fields[i].name not in constant),
        absent=tuple(pa.scalar(None, pa.binary() if pa.types.is_nested(f.type) else f.type) for f in fields),
    )


def _truncated(low: pa.Scalar, high: pa.Scalar, length: int, t: pa.DataType) -> tuple[pa.Scalar, pa.Scalar]:
    """String bounds cut to ``length`` code points, the max rounded up; a max that cannot be
    rounded up leaves both bounds out, as Paimon's collector does. Bounds as short are kept as
    they are (a scalar made from Python costs more than the rest of a file's statistics)."""
    low_text, high_text = low.as_py(), high.as_py()
    if len(low_text) <= length and len(high_text) <= length:
        return low, high
    rounded = truncated_max(high_text, length)
    return pa.scalar(None if rounded is None else low_text[:length], t), pa.scalar(rounded, t)


class Collector:
    """Value statistics of the rows of one file, gathered chunk by chunk. The bounds of the
    ``given`` columns are not gathered: the caller knows them (a data file's key columns,
    whose bounds its key statistics hold) and hands them to :meth:`stats`. The ``constant``
    columns hold one value in every row of a file (the partition's): their first row's."""

    def __init__(self, fields: Sequence[pa.Field], modes: Sequence[StatsMode], *, given: Collection[str] = (),
                 constant: Collection[str] = (), dense: bool = True) -> None:
        self.fields = tuple(fields)
        self.modes = tuple(modes)
        plan = _plan(self.fields, self.modes, tuple(given), tuple(constant), dense=dense)
        self.silent, self.recorded, self.bounded = plan.silent, plan.recorded, plan.bounded
        self.constant, self.gathered, self.absent = plan.constant, plan.gathered, plan.absent
        self.nulls = [0] * len(self.fields)
        self.bounds: list[list[pa.StructScalar]] = [[] for _ in self.fields]
        self.first: dict[int, pa.Scalar] = {}  # of the constant columns
        self.unordered: set[int] = set()  # gathered columns holding NaN: no bounds

    def add(self, chunk: pa.Table) -> None:
        if self.silent:
            return
        for i, field in enumerate(self.fields):
            self.nulls[i] += chunk.column(field.name).null_count
        if not self.first and chunk.num_rows:
            self.first = {i: chunk.column(self.fields[i].name)[0] for i in self.constant}
        for i in self.gathered:
            if i in self.unordered:
                continue
            column = chunk.column(self.fields[i].name)
            if column.null_count == len(column):
                continue
            if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
                # min and max skip NaN, which compares to nothing, so bounds would hide the
                # NaN rows from a filter they match (!=, NOT, is_nan): none, as Parquet's
                # writers give none for a column holding NaN
                self.unordered.add(i)
                self.bounds[i] = []
                continue
            self.bounds[i].append(pc.min_max(column))

    def stats(self, empty: SimpleStats, given: Mapping[str, tuple[pa.Scalar, pa.Scalar]] | None = None
              ) -> tuple[SimpleStats, tuple[str, ...] | None]:
        """The statistics and their ``_VALUE_STATS_COLS`` (``empty`` and no columns when the
        dense layout records none); ``given``: the (min, max) of the columns the collector was
        told it is given."""
        if not self.recorded:
            return empty, ()
        lows, highs = list(self.absent), list(self.absent)
        for i, (field, mode) in enumerate(zip(self.fields, self.modes, strict=True)):
            bounds = self._bounds(i) if given is None or field.name not in given else given[field.name]
            if not self.bounded[i] or bounds is None:
                continue
            low, high = bounds
            if mode.kind is StatsKind.TRUNCATE and isinstance(low, pa.StringScalar | pa.LargeStringScalar):
                low, high = _truncated(low, high, mode.length, field.type)
            lows[i], highs[i] = low, high
        counts = [None if m.kind is StatsKind.NONE else n for m, n in zip(self.modes, self.nulls, strict=True)]
        kept = self.recorded
        arity = len(kept)
        stats = SimpleStats(binary_row.serialize(binary_row.encode_row([lows[i] for i in kept]), arity),
                            binary_row.serialize(binary_row.encode_row([highs[i] for i in kept]), arity),
                            tuple(counts[i] for i in kept))
        return stats, None if arity == len(self.fields) else tuple(self.fields[i].name for i in kept)

    def _bounds(self, i: int) -> tuple[pa.Scalar, pa.Scalar] | None:
        if i in self.first:
            value = self.first[i]
            return (value, value) if value.is_valid and value.as_py() == value.as_py() else None  # not NaN
        bounds = self.bounds[i]
        if not bounds:
            return None
        if len(bounds) == 1:  # a file written in one chunk (most): its bounds as they are
            return bounds[0]["min"], bounds[0]["max"]
        t = self.fields[i].type
        return pc.min(pa.array([b["min"] for b in bounds], t)), pc.max(pa.array([b["max"] for b in bounds], t))
