"""The write path: input conforming, bucketing, the sort buffer with spill, the table writer."""
