"""File IO over fsspec (atomic create-if-absent) and the directory layout of a table."""
