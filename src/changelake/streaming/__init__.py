"""PySpark Structured Streaming integration (the only subpackage that imports pyspark)."""

from changelake.streaming.source import register

__all__ = ["register"]
