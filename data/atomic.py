"""Atomic output files: readers (and a resumed run) see the old file or the new one, never half.

:func:`atomic_open` writes to a temporary file in the destination's folder, flushes and fsyncs
it, and ``os.replace`` s it over the destination only when everything was written. A failed
write (a full disk, a kill, an exception) removes the temporary file and leaves the destination
as it was; a full disk is one ``OSError`` line naming the file and saying "no space left".
A destination that holds anything but a regular file (a device node, a FIFO, a symbolic link)
is refused, never replaced, checked again right before the rename. JSON files go through
:func:`write_json` and come back through :func:`read_json`, which names a damaged file.
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def refuse_non_regular(path: str | Path, what: str = "output", *, follow_symlinks: bool = False) -> None:
    """``ValueError`` when ``path`` exists and is not a regular file (see the module docstring)."""
    from toolgym.data.readers import non_regular_kind

    kind = non_regular_kind(path, follow_symlinks=follow_symlinks)
    if kind is not None:
        raise ValueError(f"{what} {path}: is a {kind}, not a regular file; give a regular file path")


def no_space_error(path: str | Path, what: str = "file", kept: str = "the previous one (if any) is kept") -> OSError:
    """The one-line ``OSError`` (``errno.ENOSPC``) of a full disk while writing ``path``."""
    exc = OSError(f"no space left on device while writing {what} {path}; nothing was replaced ({kept}): "
                  "free some space and run again")
    exc.errno = errno.ENOSPC
    return exc


def is_no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """``with atomic_open(path) as f: f.write(...)``: ``path`` is replaced only when the block ends
    without an exception (``mode`` ``"w"`` or ``"wb"``)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', got {mode!r}")
    path = Path(path)
    refuse_non_regular(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode(path))  # mkstemp makes 0600; the output gets what open() would give
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        refuse_non_regular(path)  # again: the rename must never replace what appeared meanwhile
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if is_no_space(exc):
            raise no_space_error(path) from None
        raise


def _file_mode(path: Path) -> int:
    """The replaced file's permissions, or those a new file gets under the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`atomic_open`)."""
    with atomic_open(path, "w") as f:
        f.write(text)


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def read_json(path: str | Path) -> Any:
    """Parse a JSON file (a run's ``state.json``, ``eval.json``...); a damaged one is a ``ValueError``
    naming the file and the position, and anything but a regular file is refused."""
    path = Path(path)
    refuse_non_regular(path, "file", follow_symlinks=True)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         "a run killed while writing it leaves it truncated: fix or delete it") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not valid JSON ({type(exc).__name__})") from None
