"""The LSM tree of a bucket: levels, the universal-compaction pick and the compactor."""
