"""Files written all or nothing, for both packages' outputs.

:func:`atomic_write` fills a hidden temporary file (``.tmp-*``) in the destination
directory, fsyncs it and renames it into place, so a failed or interrupted write (an
exception, Ctrl-C, SIGTERM) never leaves a partial or clobbered file.  A new file gets
the umask's mode; a replaced file keeps its mode.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
from typing import BinaryIO, Callable

from .clitools import first_line, sigterm_exits


def _named(exc: OSError, what: str) -> OSError:
    """``exc`` (same type and errno) with the message ``what (reason)``: it names the
    destination, not the temporary file."""
    err = type(exc)(f"{what} ({exc.strerror or first_line(exc)})")
    err.errno = exc.errno
    return err


def _open_temp(path: str, created: list) -> int:
    """Create a new hidden temporary file beside ``path`` and return its descriptor; its
    name is in ``created`` from just before it exists (so a signal cannot orphan it).  Its
    mode is the umask's (as for any new file), or the mode of the file it will replace."""
    directory, base = os.path.split(os.path.abspath(path))
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = None
    for _ in range(100):
        tmp = os.path.join(directory, f".tmp-{secrets.token_hex(4)}-{base[-100:]}")
        created[:] = [tmp]
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0),
                         0o666)
        except FileExistsError:
            created.clear()                      # somebody else's file: never remove it
            continue
        except OSError as exc:
            created.clear()
            raise _named(exc, f"{path}: cannot write it") from None
        if mode is not None:
            try:
                os.fchmod(fd, mode)
            except BaseException:
                os.close(fd)
                raise
        return fd
    raise OSError(f"{path}: cannot find a free temporary file name in {directory}")


def _fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable, where the OS allows opening a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, write: Callable[[BinaryIO], None]) -> None:
    """Write the file ``path`` all or nothing: ``write(f)`` fills a hidden temporary file
    (``.tmp-*``) in the same directory, which is fsync'ed and renamed over ``path``; the
    directory is fsync'ed after.  A new file gets the umask's mode, a replaced file keeps
    its mode.  On any exception, Ctrl-C or SIGTERM (which raises ``SystemExit(143)``
    meanwhile, when it has its default handler) the temporary file is removed and
    ``path`` is left as it was.  Existing files are replaced: callers check ``--force``."""
    path = os.fspath(path)
    with sigterm_exits():
        created: list = []
        try:
            fd = _open_temp(path, created)
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.replace(created[0], path)
            except OSError as exc:
                raise _named(exc, f"{path}: cannot replace it") from None
        except BaseException:
            for tmp in created:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
            raise
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_json(path, obj) -> None:
    """Write ``obj`` as indented JSON, atomically (:func:`atomic_write`)."""
    text = json.dumps(obj, indent=1)
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))
