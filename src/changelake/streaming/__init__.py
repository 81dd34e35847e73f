"""PySpark Structured Streaming integration (the only subpackage that imports pyspark)."""
