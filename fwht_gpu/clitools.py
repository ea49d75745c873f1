"""Shared command-line plumbing for ``fwht`` and ``pagh-mm``: one-line errors with the
documented exit codes (2 usage, 1 data), ``--debug`` tracebacks, warnings as one line,
SIGTERM that cleans up like Ctrl-C, outputs checked before any computation, and
progress lines on stderr (live on a terminal, periodic otherwise)."""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zipfile
from typing import Callable, Iterable, Iterator

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


class _OneLineUsageError(click.ClickException):
    """A usage error shown as one ``Error: ...`` line (exit code 2)."""
    exit_code = 2

    def __init__(self, exc: click.UsageError) -> None:
        super().__init__(exc.format_message())
        self.ctx = exc.ctx

    def show(self, file=None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {first_line(Exception(self.format_message()))}{hint}", err=True)


class Commands(click.Group):
    """The CLIs' command group: a usage error (bad option or value, missing file, an existing
    output) prints one ``Error: ...`` line naming the command's ``--help`` and exits 2,
    instead of click's usage block; running the group without a command still prints its
    help."""

    @staticmethod
    def _one_line(exc: click.UsageError):
        if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
            return exc
        return _OneLineUsageError(exc)

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:
            raise self._one_line(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise self._one_line(exc) from None


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


#: ``--progress`` modes: see :func:`progress_option`.
PROGRESS_MODES = ("auto", "always", "never")


def format_duration(seconds: float) -> str:
    """A duration for people: ``4.2 s``, ``3 min 05 s``, ``1 h 02 min``."""
    seconds = max(0.0, float(seconds))
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    whole = int(round(seconds))
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """``progress(stage, done, total)`` callback showing progress on a stream (stderr).

    ``mode`` (``quiet=True`` means ``"never"``): ``"never"`` prints nothing; ``"auto"``
    and ``"always"`` draw one ``\\r``-rewritten line on a terminal (at most ``REDRAW_PER_S``
    redraws a second, plus each stage's first and last), and print plain lines when the
    stream is not a terminal: each stage's first call, its completion, and in between at
    most one line per ``interval`` seconds (default ``INTERVALS[mode]``: 10 s for
    ``"auto"``, 2 s for ``"always"``).  A line shows the stage, done/total, the percentage,
    the time since the stage started and an estimate of the time left ("eta ?" until
    ``ETA_AFTER_S`` seconds or ``ETA_AFTER_FRACTION`` of the work have passed since the
    stage's first call).  A new stage name, a new total or ``done`` going backwards starts
    a new run of the stage; a run is timed from the previous event (construction,
    :meth:`message`, or the previous call).  ``stream`` and whether it is a terminal are
    looked up at each call (``None``: ``sys.stderr``)."""

    LABELS = {"inner": "inner dimension", "tiles": "entries scanned", "bytes": "read"}
    #: Stages whose counts are bytes (shown as sizes: "1.50 GiB/8.00 GiB").
    BYTES = frozenset({"bytes"})
    INTERVALS = {"auto": 10.0, "always": 2.0}
    REDRAW_PER_S = 10
    ETA_AFTER_S = 1.0
    ETA_AFTER_FRACTION = 0.05

    def __init__(self, quiet: bool = False, mode: str = "auto", stream=None,
                 clock: Callable[[], float] = time.monotonic, interval: float | None = None):
        if mode not in PROGRESS_MODES:
            raise ValueError(f"progress mode must be one of {', '.join(PROGRESS_MODES)}, "
                             f"not {mode!r}")
        self.mode = "never" if quiet else mode
        self.on = self.mode != "never"
        self._stream = stream
        self.clock = clock
        self.interval = self.INTERVALS.get(self.mode, 0.0) if interval is None else interval
        self._mark = clock()        # time of the previous event: when a new run starts
        self._run: tuple | None = None  # (stage, total, start, first time, first done)
        self._last: tuple | None = None  # (done, total) of the previous call
        self._shown = float("-inf")     # when a line was last written for the run
        self._width = 0                  # length of the pending \r line (0: none)

    @property
    def stream(self):
        return sys.stderr if self._stream is None else self._stream

    def _tty(self, stream) -> bool:
        try:
            return bool(stream.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def _end_line(self, stream) -> None:
        if self._width:
            stream.write("\n")
            self._width = 0

    def message(self, text: str) -> None:
        """Print ``text`` as one line now (unless the mode is ``"never"``), after ending a
        pending terminal line; the next stage is timed from here."""
        self._mark = self.clock()
        if not self.on:
            return
        stream = self.stream
        self._end_line(stream)
        stream.write(f"{text}\n")
        stream.flush()

    def restart(self) -> None:
        """Time the next stage from now: work since the previous event (reading inputs, a
        warm-up) is not its elapsed time."""
        self._mark = self.clock()

    def close(self) -> None:
        """End a pending terminal line (e.g. before an error message)."""
        if self.on and self._width:
            stream = self.stream
            self._end_line(stream)
            stream.flush()

    def line(self, stage: str, done: int, total: int, elapsed: float,
             eta: float | None) -> str:
        """The text shown for one call (no line ending)."""
        label = self.LABELS.get(stage, stage)
        finished = done >= total
        pct = 100 if finished else 100 * max(done, 0) // total
        if stage in self.BYTES:
            from .memory import gib
            count = f"{gib(done)}/{gib(total)}"
        else:
            count = f"{done}/{total}"
        text = f"{label}: {count} ({pct}%), {format_duration(elapsed)} elapsed"
        if not finished:
            text += ", eta " + ("?" if eta is None else format_duration(eta))
        return text

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        last, self._last = self._last, (done, total)
        run = self._run
        finished = done >= total
        if run is not None and run[0] == stage and run[1] == total and last is not None:
            if last[0] >= last[1]:                     # the previous call finished the run
                if (done, total) == last:
                    self._mark = now
                    return                            # a repeated final call: shown already
                run = None
            elif done < last[0]:
                run = None
        else:
            run = None
        new = run is None
        if new:
            run = self._run = (stage, total, self._mark, now, done)
        self._mark = now
        if not self.on:
            return
        _, _, start, t0, d0 = run
        eta = None
        if not finished and done > d0 and (now - t0 >= self.ETA_AFTER_S
                                            or done - d0 >= self.ETA_AFTER_FRACTION * total):
            eta = (total - done) * (now - t0) / (done - d0)
        stream = self.stream
        tty = self._tty(stream)
        gap = 1.0 / self.REDRAW_PER_S if tty else self.interval
        if not (new or finished or now - self._shown >= gap):
            return
        self._shown = now
        text = self.line(stage, done, total, now - start, eta)
        if tty:
            if new:
                self._end_line(stream)           # an unfinished run of another stage
            stream.write(f"\r{text}{' ' * (self._width - len(text))}")
            self._width = len(text)
            if finished:
                self._end_line(stream)
        else:
            self._end_line(stream)
            stream.write(f"{text}\n")
        stream.flush()


def progress_option(fn):
    """``--progress [auto|always|never]`` (default auto), passed as ``progress``."""
    return click.option(
        "--progress", "progress", type=click.Choice(PROGRESS_MODES), default="auto",
        show_default=True,
        help="Progress on stderr. auto: a live line with the time elapsed and left when "
             "stderr is a terminal, otherwise a line when a stage starts, every 10 s and "
             "when it ends; always: the same, with a line every 2 s when stderr is not a "
             "terminal; never: none (as --quiet).")(fn)
