"""The storage engine: Paimon's on-disk format, writes, commits and merge-on-read."""
