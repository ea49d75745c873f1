"""Shared command-line plumbing for ``fwht`` and ``pagh-mm``: one-line errors with the
documented exit codes (2 usage, 1 data), ``--debug`` tracebacks, and progress on a TTY."""
from __future__ import annotations

import functools
import sys

import click

#: Exceptions that mean "the data cannot be used": exit code 1, one line.
DATA_ERRORS = (ValueError, TypeError, OverflowError, ArithmeticError, MemoryError, OSError)


def guarded(fn):
    """Run a command body; turn data errors into one line on stderr and exit code 1
    (usage errors raised as click.UsageError/BadParameter keep click's exit code 2).
    The command must take a ``debug`` flag; with it, tracebacks are shown."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except FileExistsError as exc:
            if debug:
                raise
            raise click.UsageError(str(exc)) from None
        except DATA_ERRORS as exc:
            if debug:
                raise
            if getattr(exc, "usage_error", False):      # e.g. an unknown file format
                raise click.UsageError(str(exc)) from None
            click.echo(f"Error: {str(exc).splitlines()[0]}", err=True)
            sys.exit(1)
    return wrapper


def debug_option(fn):
    return click.option("--debug", is_flag=True, help="Show tracebacks on errors.")(fn)


class Progress:
    """``progress(stage, done, total)`` callback drawing one line on stderr when it is a TTY."""

    LABELS = {"inner": "inner dimension", "tiles": "row tiles"}

    def __init__(self, quiet: bool):
        self.on = not quiet and sys.stderr.isatty()
        self.last = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.on:
            return
        label = self.LABELS.get(stage, stage)
        sys.stderr.write(f"\r{label}: {done}/{total} ({100 * done // max(total, 1)}%)")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()
