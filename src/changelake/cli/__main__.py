"""``python -m changelake.cli``: the ``changelake`` command."""

from changelake.cli.main import app

app()
