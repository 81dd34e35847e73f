"""The options of a table's data files and manifests (names, places, formats, compression,
statistics), declared as the rest of :class:`~changelake.options.TableOptions` (which takes them
as a base), kept here so that module stays small."""

from __future__ import annotations

from dataclasses import dataclass

from changelake import option_values as values
from changelake.option_spec import OptionEffect, declare
from changelake.option_values import ExternalPathStrategy, FileFormat

# options changelake validates and keeps for the other Paimon engines without acting on them
_STORED = OptionEffect.STORES


@dataclass(frozen=True)
class FileOptions:
    """Data-file and manifest options, parsed with Paimon's defaults."""

    data_file_prefix: str = declare("data-file.prefix", values.text_value, "data-", "File name prefix of data files.")
    data_file_thin_mode: bool = declare(
        "data-file.thin-mode",
        values.parse_bool,
        "false",
        "Data files without the `_KEY_` columns (keys read from values).",
    )
    data_file_path_directory: str | None = declare(
        "data-file.path-directory", values.text_value, None,
        "Directory (relative to the table) holding the partition and bucket directories of data files.",
    )
    data_file_external_paths: tuple[str, ...] = declare(
        "data-file.external-paths", values.uris, "",
        "Comma-separated URIs (`file:///mnt/fast,s3://bucket/t`) new data files are written under, "
        "each at `<uri>/<partition>/bucket-<n>/`, when `data-file.external-paths.strategy` is not `none`.",
        supports=lambda v: all(values.uri_scheme(u) for u in v),
        unsupported="each external path must be a URI with a scheme (file:///data/t, s3://bucket/t)",
    )
    data_file_external_paths_strategy: ExternalPathStrategy = declare(
        "data-file.external-paths.strategy", values.member(ExternalPathStrategy), "none",
        "Which external path a new data file goes to: `none` (the table's own directories), "
        "`round-robin` (a bucket's files in turn, from a random one), `specific-fs` (round-robin over those of "
        "the scheme `data-file.external-paths.specific-fs`).",
        supports=lambda v: v in (ExternalPathStrategy.NONE, ExternalPathStrategy.ROUND_ROBIN,
                                 ExternalPathStrategy.SPECIFIC_FS),
        unsupported="changelake writes with none, round-robin or specific-fs",
    )
    data_file_external_paths_specific_fs: str | None = declare(
        "data-file.external-paths.specific-fs", values.text_value, None,
        "With `data-file.external-paths.strategy` `specific-fs`: the scheme (`s3`, `file`) of the "
        "external paths used.",
    )
    changelog_file_prefix: str = declare(
        "changelog-file.prefix", values.text_value, "changelog-", "File name prefix of changelog files."
    )
    # formats and compression
    file_format: FileFormat = declare(
        "file.format",
        values.member(FileFormat),
        "parquet",
        "Data file format: `parquet`, `orc` or `avro` (each file is read by its extension).",
    )
    file_compression: str = declare(
        "file.compression",
        values.compression,
        "zstd",
        "Compression of data files.",
    )
    file_compression_per_level: tuple[tuple[int, str], ...] = declare(
        "file.compression.per.level",
        values.per_level(values.compression),
        "",
        "Compression of data files by LSM level, overriding `file.compression` there "
        "(`0:lz4,1:zstd`): cheaper level-0 files, which compaction soon rewrites.",
    )
    file_format_per_level: tuple[tuple[int, FileFormat], ...] = declare(
        "file.format.per.level",
        values.per_level(values.member(FileFormat)),
        "",
        "Data file format by LSM level, overriding `file.format` there (`0:avro,5:parquet`).",
    )
    changelog_file_format: FileFormat | None = declare(
        "changelog-file.format",
        values.member(FileFormat),
        None,
        "Format of changelog files (none: `file.format`).",
    )
    changelog_file_compression: str | None = declare(
        "changelog-file.compression",
        values.compression,
        None,
        "Compression of changelog files (none: `file.compression`).",
    )
    zstd_level: int = declare("file.compression.zstd-level", values.int_value, "1", "zstd level of data files.")
    target_file_size: int = declare(
        "target-file-size", values.parse_memory_size, "128 mb", "Data files roll over at this size."
    )
    parquet_dictionary: bool = declare(
        "parquet.enable.dictionary", values.parse_bool, "true",
        "Dictionary-encode the columns where it pays, as Paimon's Parquet writer: string and binary columns, and "
        "integer and date columns whose range of values makes a dictionary and its indices smaller than plain "
        "values (false: none)."
    )
    parquet_block_size: int = declare(
        "parquet.block.size", values.parse_memory_size, "128 mb", "Parquet row group size.", effect=_STORED)
    page_size: int = declare("page-size", values.parse_memory_size, "64 kb", "Memory page size.", effect=_STORED)
    metadata_stats_mode: values.StatsMode = declare(
        "metadata.stats-mode", values.parse_stats_mode, "truncate(16)",
        "Value statistics each data file records in its manifest entry: `none`, `counts` (null counts), "
        "`truncate(N)` (min/max with strings cut to N characters, the max rounded up) or `full`; "
        "`fields.<name>.stats-mode` sets one column's. Reads skip files by them where no merge is needed "
        "(docs/performance.md).")
    file_index_bloom_filter_columns: tuple[str, ...] = declare(
        "file-index.bloom-filter.columns", values.names, "",
        "Columns each data file gets a bloom filter of (Paimon's file index; "
        "`file-index.bloom-filter.<column>.fpp` (0.1) and `.items` (1000000) size it). Reads skip files "
        "whose filter rules out an `=` or `IN` filter on the column (docs/file-indexes.md).")
    file_index_bitmap_columns: tuple[str, ...] = declare(
        "file-index.bitmap.columns", values.names, "",
        "Columns each data file gets a bitmap index of (the rows of each distinct value; for "
        "low-cardinality columns). Reads skip files without an `=` or `IN` filter's values.")
    file_index_in_manifest_threshold: int = declare(
        "file-index.in-manifest-threshold", values.parse_memory_size, "500 b",
        "A data file's index up to this size is embedded in its manifest entry; a larger one is written "
        "beside the data file as `<data file>.index`.")
    metadata_stats_mode_per_level: tuple[tuple[int, values.StatsMode], ...] = declare(
        "metadata.stats-mode.per.level", values.per_level(values.parse_stats_mode), "",
        "`metadata.stats-mode` by LSM level of primary-key tables (`0:none,5:full`); a column's "
        "`fields.<name>.stats-mode` still wins.")
    changelog_file_stats_mode: values.StatsMode | None = declare(
        "changelog-file.stats-mode", values.parse_stats_mode, None,
        "Value statistics of changelog files (none: as data files at their level); a column's "
        "`fields.<name>.stats-mode` still wins.")
    metadata_stats_dense_store: bool = declare(
        "metadata.stats-dense-store", values.parse_bool, "true",
        "Record only the columns with statistics (named in `_VALUE_STATS_COLS`) when some column's mode is "
        "`none`, as Paimon 1.x does; Java Paimon 0.9.0 readers need `false` there (every column, unknown ones "
        "null).")
    file_index_read_enabled: bool = declare(
        "file-index.read.enabled", values.parse_bool, "true",
        "Skip data files by their file indexes on read.")
    # manifests
    manifest_format: str = declare(
        "manifest.format", values.choice("avro", "orc"), "avro",
        "Manifest file format. Manifests are read by their content whatever it says; changelake writes "
        "Avro manifests and refuses to commit to a table whose option is `orc` (Java Paimon reads them by it).")
    manifest_compression: str = declare(
        "manifest.compression",
        values.choice("zstd", "snappy", "deflate", "null", "none"),
        "zstd",
        "Compression of manifests and manifest lists.",
    )
    manifest_target_file_size: int = declare(
        "manifest.target-file-size", values.parse_memory_size, "8 mb", "Manifests are merged up to this size."
    )
    manifest_merge_min_count: int = declare(
        "manifest.merge-min-count", values.positive_int, "30", "Small manifests merged once this many pile up."
    )
    manifest_full_compaction_size: int = declare(
        "manifest.full-compaction-threshold-size",
        values.parse_memory_size,
        "16 mb",
        "Small or delete-carrying manifests of this total size trigger a full manifest rewrite.",
    )
    write_manifest_cache: int = declare(
        "write-manifest-cache", values.parse_memory_size, "0 b", "Manifest cache of writers.", effect=_STORED)
