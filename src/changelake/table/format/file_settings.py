"""How the data files (or changelog files) of one table are written: the settings every writer
of them takes, decided once from the table's options."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from changelake.option_values import StatsMode
from changelake.table.format.file_format import FileFormat, codec
from changelake.table.format.file_index import IndexSpec
from changelake.table.io.external_paths import ExternalPaths
from changelake.table.io.killpoints import KillPoint


@dataclass(frozen=True)
class FileSettings:
    """How data files (or changelog files, which have the same layout) of one table are written:
    the one place that decides each level's format and compression, for every writer (LSM
    flushes and compactions, changelog files, append tables, postponed rows, overwrites)."""

    schema_id: int
    key_names: tuple[str, ...]
    compression: str
    zstd_level: int
    target_file_size: int
    dictionary: bool = True
    # file.compression.per.level: (level, compression) pairs overriding ``compression``
    compression_per_level: tuple[tuple[int, str], ...] = ()
    prefix: str = "data-"
    # Paimon's data-file.thin-mode: files without the _KEY_ columns, which copy value columns.
    thin: bool = False
    # where the crash test can kill a writer of these files (changelog files have their own)
    kill_point: KillPoint = KillPoint.DATA_FILE
    # Rows come in key order; postpone-bucket files keep their arrival order instead (their
    # min/max key are still the first and last rows', as Paimon's, but the key stats are true).
    ordered: bool = True
    # data-file.external-paths: new files go under these instead of the bucket's directory
    external: ExternalPaths | None = None

    file_format: FileFormat = FileFormat.PARQUET
    # file.format.per.level: (level, format) pairs overriding ``file_format`` there
    format_per_level: tuple[tuple[int, FileFormat], ...] = ()
    # The table's columns and their stats modes (metadata.stats-mode, fields.<name>.stats-mode):
    # the value statistics every file records (none without them).
    value_fields: tuple[pa.Field, ...] = ()
    value_modes: tuple[StatsMode, ...] = ()
    # metadata.stats-mode.per.level: (level, the columns' modes there) pairs overriding ``value_modes``
    value_modes_per_level: tuple[tuple[int, tuple[StatsMode, ...]], ...] = ()
    dense_stats: bool = True  # metadata.stats-dense-store
    # The partition columns: every file holds one partition's rows, so one value of each.
    partition_keys: tuple[str, ...] = ()
    # file-index.*: the index each file gets (none without)
    file_index: IndexSpec | None = None

    def compression_at(self, level: int) -> str:
        """The compression of files at ``level``."""
        return dict(self.compression_per_level).get(level, self.compression)

    def format_at(self, level: int) -> FileFormat:
        """The format of files written at ``level``."""
        return dict(self.format_per_level).get(level, self.file_format)

    def modes_at(self, level: int) -> tuple[StatsMode, ...]:
        """The columns' stats modes in files written at ``level``."""
        return dict(self.value_modes_per_level).get(level, self.value_modes)

    def unwritable(self) -> str | None:
        """Why some level's format cannot be written with that level's compression (None: every
        one can)."""
        levels = sorted({level for level, _ in (*self.format_per_level, *self.compression_per_level)})
        pairs = [("", self.file_format, self.compression)]
        pairs += [(f"level {level}: ", self.format_at(level), self.compression_at(level)) for level in levels]
        for where, file_format, compression in pairs:
            try:
                codec(file_format, compression)
            except ValueError as exc:
                return f"{where}{exc}"
        return None
