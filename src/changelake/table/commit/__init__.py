"""Commits: commit messages, conflict checks, manifest compaction, the committer."""
