"""The ``changelake`` command: one typer app, one small module per group of commands.

Adding a command is writing a function with typed, documented parameters and registering it
below. Errors the library raises on purpose (and bad input) print one ``error:`` line to
stderr, never a traceback: exit code 1 for a failed operation, 2 for unusable input.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer

from changelake.cli import browse, inspect, maintain, read, tags
from changelake.cli.common import CommandError, UsageError
from changelake.errors import ChangelakeError

_USAGE_ERROR = 2
_FAILED = 1
_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class _App(typer.Typer):
    """The typer app, turning expected errors into one line on stderr and an exit code."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except BrokenPipeError:
            # The reader went away (`| head`): nothing more to say, and nothing to flush.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(_FAILED)
        except UsageError as error:
            _fail(str(error), _USAGE_ERROR)
        except (ChangelakeError, CommandError, OSError) as error:
            _fail(str(error) or type(error).__name__, _FAILED)
        except KeyboardInterrupt:
            _fail("interrupted", _INTERRUPTED)


def _fail(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


app = _App(
    name="changelake",
    help="Look at and maintain changelake (Apache Paimon primary-key) tables: list, show, scan, "
         "read changes, compact, expire, remove orphan files, roll back, tag, inspect the LSM tree. TABLE is a table "
         "directory (path or fsspec URL) or 'database.table' with --warehouse.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command()(browse.ls)
app.command()(browse.show)
app.command()(read.scan)
app.command()(read.changes)
app.command()(maintain.compact)
app.command()(maintain.expire)
app.command("remove-orphans")(maintain.remove_orphans)
app.command()(maintain.rollback)
app.command()(inspect.inspect)
app.add_typer(tags.app, name="tag")
