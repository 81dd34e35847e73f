"""Merge engines: how the rows of one key merge (deduplicate, first-row, partial-update,
aggregation), with the whole-column sort/merge kernel they share."""
