"""Table maintenance that deletes files: orphan cleanup and rollback."""
