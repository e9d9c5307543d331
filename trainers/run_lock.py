"""One process per run folder: :func:`run_dir_lock`, the ``flock`` a ``toolgym train`` holds on
its ``run_dir`` for the whole run (a second run or a ``--resume`` while it trains is refused,
naming the holder's pid; the kernel drops the lock however the holder ends)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from toolgym.data.atomic import refuse_non_regular

__all__ = ["LOCK_FILE", "RunDirBusy", "run_dir_lock"]

LOCK_FILE = ".toolgym.lock"


class RunDirBusy(ValueError):
    """Another process holds the run folder's lock (a ``ValueError``, so a CLI reports it as bad input)."""


@contextmanager
def run_dir_lock(run_dir: str | Path, command: str = "toolgym train", lock_file: str = LOCK_FILE) -> Iterator[Path]:
    """Hold ``run_dir`` for this process: a second ``toolgym train`` (or a ``--resume`` while the
    first still trains) is a :class:`RunDirBusy` naming the holder's pid, instead of both writing one
    ``metrics.jsonl`` and one set of checkpoints.

    ``fcntl.flock`` on ``run_dir/.toolgym.lock``: the kernel drops the lock when its holder exits,
    however it ends (SIGKILL included), so a killed run never leaves the folder stuck. A folder this
    call created is removed again if the block leaves nothing else in it (a start that failed).
    ``lock_file`` names another lock in the same folder, for a holder around the trainer (a lane of
    ``benchmarks.credit_schemes`` claiming a run it then trains under the trainer's own lock)."""
    import fcntl

    run_dir = Path(run_dir)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / lock_file
    refuse_non_regular(path, "lock file")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunDirBusy(f"{run_dir} is in use by another {command} (pid {holder}, holding {path}): wait for it "
                             "to finish or stop it, or choose another run_dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield path
        finally:
            if created and {p.name for p in run_dir.iterdir()} == {lock_file}:
                path.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    run_dir.rmdir()
    finally:
        os.close(fd)  # releases the lock
