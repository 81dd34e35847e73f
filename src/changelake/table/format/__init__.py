"""The bytes on disk: BinaryRow, bucket hash, types, schema, key/value layout, snapshots,
manifests and data files, exactly as Apache Paimon has them."""
