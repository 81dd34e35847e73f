"""Changelog producers and streaming scanners (built on :mod:`changelake.table`)."""
