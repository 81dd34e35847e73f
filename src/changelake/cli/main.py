"""The ``changelake`` command: one typer app, one small module per group of commands.

Adding a command is writing a function with typed, documented parameters and registering it
below. Errors print one ``error:`` line to stderr, never a traceback: exit code 1 for a failed
operation, 2 for unusable input (the library's errors, click's usage errors and bad input the
commands find alike). An error nobody expected prints its type and message on that line too;
``CHANGELAKE_TRACEBACK=1`` lets it through with its traceback, for a bug report.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn, Protocol, cast

import typer

from changelake.cli import branches, browse, edit, inspect, maintain, read, tags
from changelake.cli.common import CommandError, UsageError
from changelake.errors import ChangelakeError

_USAGE_ERROR = 2
_FAILED = 1
_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
_TRACEBACK_VARIABLE = "CHANGELAKE_TRACEBACK"
# The usage error of typer's click (its own copy in newer typers, click itself in older ones)
# and the base of its errors, found through typer's public BadParameter.
_CLICK_USAGE_ERROR = cast(type[Exception], next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"))
_CLICK_ERROR = cast(type[Exception], next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"))


class _ClickError(Protocol):
    """What the errors of typer's click have."""

    exit_code: int

    def format_message(self) -> str: ...


class _App(typer.Typer):
    """The typer app, turning every error into one line on stderr and an exit code."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            # Not standalone, so click's usage errors come here to be printed as one line
            # (standalone, typer draws them as a box of several lines). Ctrl-C comes back as
            # exit code 130 (newer typers) or Abort (older ones).
            code = super().__call__(*args, **kwargs, standalone_mode=False)
        except BrokenPipeError:
            # The reader went away (`| head`): nothing more to say, and nothing to flush.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(_FAILED)
        except _CLICK_USAGE_ERROR as error:
            if type(error).__name__ == "NoArgsIsHelpError":
                sys.exit(_USAGE_ERROR)  # typer has printed the help
            context = getattr(error, "ctx", None)
            where = f" (see '{context.command_path} --help')" if context is not None else ""
            _fail(cast(_ClickError, error).format_message() + where, _USAGE_ERROR)
        except _CLICK_ERROR as error:
            _fail(cast(_ClickError, error).format_message(), cast(_ClickError, error).exit_code)
        except typer.Abort:
            _fail("interrupted", _INTERRUPTED)
        except UsageError as error:
            _fail(str(error), _USAGE_ERROR)
        except (ChangelakeError, CommandError, OSError) as error:
            _fail(str(error) or type(error).__name__, _FAILED)
        except Exception as error:
            if os.environ.get(_TRACEBACK_VARIABLE):
                raise
            _fail(f"{type(error).__name__}: {error}", _FAILED)
        sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> NoReturn:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    print(f"error: {'; '.join(lines)}", file=sys.stderr)
    sys.exit(code)


app = _App(
    name="changelake",
    help="Look at and maintain changelake (Apache Paimon primary-key) tables: list, show, scan, "
         "read changes, compact, rescale, expire, remove orphan files, roll back, tag, inspect the LSM tree, "
         "delete rows, truncate, drop or expire partitions. "
         "TABLE is a table directory (path or fsspec URL) or 'database.table' with --warehouse.",
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
app.command()(maintain.rescale)
app.command()(maintain.expire)
app.command("remove-orphans")(maintain.remove_orphans)
app.command()(maintain.rollback)
app.command()(inspect.inspect)
app.command()(edit.delete)
app.command()(edit.truncate)
app.command("drop-partition")(edit.drop_partition)
app.command("expire-partitions")(edit.expire_partitions)
app.add_typer(tags.app, name="tag")
app.add_typer(branches.app, name="branch")
