"""Data files outside the table's directory: Paimon's ``data-file.external-paths``.

A table with external paths (and a strategy other than ``none``) writes each new data or
changelog file under one of them, at the bucket's path relative to the table
(``<external>/[<data-file.path-directory>/]<partition>/bucket-<n>/<name>``, Paimon's
``relativeBucketPath``), and its manifest entry records the full URI in ``_EXTERNAL_PATH``;
readers open a file at that URI when it is set. Paimon requires every external path to be a
URI with a scheme; changelake writes through the table's own filesystem, so the paths it
writes to must be on it (a local table writes to ``file:`` paths, an S3 table to ``s3:``
ones).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from changelake.errors import OptionError, StorageError
from changelake.option_values import ExternalPathStrategy, uri_scheme
from changelake.options import TableOptions
from changelake.table.io.fileio import FileIO

PATHS_OPTION = "data-file.external-paths"
STRATEGY_OPTION = "data-file.external-paths.strategy"
SPECIFIC_FS_OPTION = "data-file.external-paths.specific-fs"


@dataclass(frozen=True)
class ExternalPaths:
    """The external paths a table's new data files go to: each as the URI a manifest records
    and as a path of the table's filesystem, and the table's root (bucket directories are
    placed under an external path at their path relative to it)."""

    uris: tuple[str, ...]
    paths: tuple[str, ...]
    table_root: str
    # the external path of each bucket's next file (by bucket directory), in this process
    following: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def place(self, bucket_dir: str) -> tuple[str, str]:
        """The directory of the next file of the bucket ``bucket_dir``, as (path, URI): a
        bucket's files go under the external paths in turn, from a random one, as each of
        Paimon's bucket writers places them (``RoundRobinExternalPathProvider``), so that
        writers spread their files."""
        index = self.following.get(bucket_dir)
        if index is None:
            index = random.randrange(len(self.uris))
        self.following[bucket_dir] = (index + 1) % len(self.uris)
        relative = bucket_dir[len(self.table_root) + 1:]
        return f"{self.paths[index]}/{relative}", f"{self.uris[index]}/{relative}"


def _java_uri(uri: str) -> str:
    """The URI as Paimon's ``Path`` prints it (``file:/data/t`` for ``file:///data/t``), which
    is what Paimon and pypaimon record in manifests."""
    scheme = uri_scheme(uri)
    if scheme is not None and uri[len(scheme) + 1:].startswith("///"):
        return f"{uri[:len(scheme) + 1]}{uri[len(scheme) + 3:]}"
    return uri


def on_filesystem(file_io: FileIO, uri: str) -> bool:
    """Whether ``uri`` names a file of ``file_io``'s filesystem (its scheme is one of its
    protocols; a bare path is a local one)."""
    protocols = (file_io.fs.protocol,) if isinstance(file_io.fs.protocol, str) else tuple(file_io.fs.protocol)
    return (uri_scheme(uri) or "file") in protocols


def resolve(file_io: FileIO, uri: str) -> str:
    """A data file's recorded external path as a path of the table's filesystem; StorageError
    naming the file when it is on another filesystem (changelake reads a table's files through
    the table's filesystem only)."""
    if not on_filesystem(file_io, uri):
        raise StorageError(f"the data file is on another filesystem ({uri_scheme(uri)}) than the table's "
                           f"({file_io.protocol}); changelake reads a table's files through its own filesystem",
                           file=uri)
    path: str = file_io.fs._strip_protocol(uri)
    return path


def of_table(file_io: FileIO, table_root: str, options: TableOptions, table: str) -> ExternalPaths | None:
    """The external paths new data files of the table go to (None: its own directories), each
    made if missing; OptionError naming the option for a strategy changelake cannot write with,
    ``specific-fs`` without its scheme or with no path of it, a path without a scheme (Paimon
    requires one) or on another filesystem than the table's, or one that cannot be made or
    written to. Nothing is written before this passes."""
    strategy = options.data_file_external_paths_strategy
    configured = options.data_file_external_paths
    if strategy is ExternalPathStrategy.NONE or not configured:
        return None
    if strategy not in (ExternalPathStrategy.ROUND_ROBIN, ExternalPathStrategy.SPECIFIC_FS):
        raise OptionError(f"changelake writes with none, round-robin or specific-fs, not {strategy.value!r}",
                          table=table, option=STRATEGY_OPTION)
    for uri in configured:
        if uri_scheme(uri) is None:
            raise OptionError(f"{uri!r} has no scheme: Paimon requires a URI (file:///data/t, s3://bucket/t)",
                              table=table, option=PATHS_OPTION)
    chosen = configured
    if strategy is ExternalPathStrategy.SPECIFIC_FS:
        wanted = options.data_file_external_paths_specific_fs
        if not wanted:
            raise OptionError(f"must be set when {STRATEGY_OPTION} is specific-fs", table=table,
                              option=SPECIFIC_FS_OPTION)
        chosen = tuple(uri for uri in configured if uri_scheme(uri) == wanted.strip().lower())
        if not chosen:
            raise OptionError(f"none of {list(configured)} is of the scheme {wanted!r} that {SPECIFIC_FS_OPTION} "
                              "names", table=table, option=PATHS_OPTION)
    uris = tuple(_java_uri(uri) for uri in chosen)
    for uri in uris:
        if not on_filesystem(file_io, uri):
            raise OptionError(f"{uri!r} is on another filesystem than the table's ({file_io.protocol}): changelake "
                              "writes a table's data files through the table's filesystem", table=table,
                              option=PATHS_OPTION)
    paths = tuple(resolve(file_io, uri) for uri in uris)
    for uri, path in zip(uris, paths, strict=True):
        try:
            file_io.makedirs(path)
        except (StorageError, OSError) as exc:
            raise OptionError(f"{uri!r} cannot be made: {exc}", table=table, option=PATHS_OPTION) from None
        if file_io.is_local and not os.access(path, os.W_OK | os.X_OK):
            raise OptionError(f"{uri!r} is not writable", table=table, option=PATHS_OPTION)
    return ExternalPaths(uris, paths, table_root)


def listed_roots(file_io: FileIO, options: TableOptions) -> list[str]:
    """Every configured external path on the table's filesystem, as a path of it, whatever the
    strategy (files written under one stay there when the strategy changes): where orphan
    cleanup looks for data files besides the table's own directories."""
    return [resolve(file_io, _java_uri(uri)) for uri in options.data_file_external_paths
            if uri_scheme(uri) is not None and on_filesystem(file_io, uri)]
