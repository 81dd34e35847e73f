"""The ``changelake`` command line (typer + rich) over the public API."""
