"""Shared command-line plumbing for ``fwht`` and ``pagh-mm``: one-line errors with the
documented exit codes (2 usage, 1 data), ``--debug`` tracebacks, warnings as one line,
SIGTERM that cleans up like Ctrl-C, outputs checked before any computation, and
progress on a TTY."""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import tempfile
import threading
import traceback
import warnings
import zipfile
from typing import Iterable, Iterator

import click

#: Exceptions that mean "the data cannot be used": exit code 1, one line.
DATA_ERRORS = (ValueError, TypeError, LookupError, OverflowError, ArithmeticError, MemoryError,
               OSError, EOFError, zipfile.BadZipFile)
#: Exit status after SIGTERM (128 + the signal number, as a shell reports it).
SIGTERM_EXIT = 128 + signal.SIGTERM


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """While active, SIGTERM raises ``SystemExit(143)`` in the main thread, so ``finally``
    blocks and cleanup run as they do for Ctrl-C.  Does nothing outside the main thread or
    when SIGTERM already has a handler other than the default; the previous handler is
    restored on exit.  Further SIGTERMs while the first one unwinds are ignored."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"Warning: {first_line(Warning(str(message)))}", err=True)


def guarded(fn):
    """Run a command body with SIGTERM exiting cleanly (exit code 143, temporary files
    removed), warnings printed as one ``Warning: ...`` line, and errors as one
    ``Error: ...`` line: data errors exit 1, ``FileExistsError`` and errors marked
    ``usage_error`` exit 2 (as click's usage errors do).  The command must take a ``debug``
    flag; with it, tracebacks are shown."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug", False)
        try:
            with sigterm_exits(), warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except FileExistsError as exc:
            if debug:
                raise
            raise click.UsageError(first_line(exc)) from None
        except DATA_ERRORS as exc:
            if debug and isinstance(exc, EOFError):     # click would turn it into "Aborted!"
                traceback.print_exc()
                sys.exit(1)
            if debug:
                raise
            if getattr(exc, "usage_error", False):      # e.g. an unknown file format
                raise click.UsageError(first_line(exc)) from None
            click.echo(f"Error: {first_line(exc)}", err=True)
            sys.exit(1)
    return wrapper


def debug_option(fn):
    return click.option("--debug", is_flag=True, help="Show tracebacks on errors.")(fn)


def force_option(fn):
    return click.option("--force", is_flag=True, help="Overwrite existing output files.")(fn)


def check_outputs(paths: Iterable, *, force: bool, make_dirs: bool = False) -> None:
    """Check, before any computation, that every file in ``paths`` can be written; raise
    ``click.UsageError`` (exit code 2) naming the file and the fix otherwise.

    A path must not be a directory, must not exist unless ``force``, and its directory must
    exist (with ``make_dirs``: its nearest existing ancestor, where it will be created) and
    accept a new file: a hidden temporary file is created and removed there."""
    probed = set()
    for path in paths:
        path = os.fspath(path)
        if os.path.isdir(path):
            raise click.UsageError(f"{path} is a directory; give the name of a file to write")
        if os.path.lexists(path) and not force:
            raise click.UsageError(f"{path} exists; pass --force to overwrite it")
        directory = os.path.dirname(os.path.abspath(path))
        if make_dirs:
            while not os.path.exists(directory) and os.path.dirname(directory) != directory:
                directory = os.path.dirname(directory)
        if not os.path.exists(directory):
            raise click.UsageError(f"{path}: the directory {directory} does not exist; create it "
                                   "or write elsewhere")
        if not os.path.isdir(directory):
            raise click.UsageError(f"{path}: {directory} is not a directory")
        if directory in probed:
            continue
        try:
            with tempfile.TemporaryFile(dir=directory, prefix=".tmp-probe-"):
                pass
        except OSError as exc:
            raise click.UsageError(f"{path}: cannot write in {directory} "
                                   f"({exc.strerror or first_line(exc)}); write elsewhere") from None
        probed.add(directory)


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
