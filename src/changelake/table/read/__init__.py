"""Reads: the live files of a snapshot, the split planner and the split reader."""
