"""One owner per run directory: ``local up``, ``demo``, ``local preempt`` and ``local down`` hold an exclusive ``flock``
on ``<run dir>/owner.lock`` while they run. The kernel drops it when its holder exits, however; the holder's command and
PID in the file name it to a second command, and let ``down`` end a holder (a drill) before stopping. Source: flock(2)
(released when the last descriptor of the open file description closes). Standard library, psutil."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from raytpu.core.common.errors import RaytpuError, RuntimeFailure, folder_valid, full_disk, invalid_value
from raytpu.local.slice.state import Progress, unwritable

LOCK_FILE = "owner.lock"
TAKE_OVER_WAIT_S = 60.0
"""How long ``down`` waits for a signalled holder to let go (a drill tears its cluster down in seconds)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a run directory: its command line (``raytpu local preempt``) and PID."""

    command: str
    pid: int

    def __str__(self) -> str:
        return f"`{self.command}` (pid {self.pid})" if self.pid else "another raytpu command"


def _read_holder(fd: int) -> Holder:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return Holder(str(data["command"])[:200], int(data["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Holder("", 0)  # the holder has not written itself yet


def _holder_of(lock_path: Path) -> Holder:
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return Holder("", 0)
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)


def _holds(holder: Holder, lock_path: Path) -> bool:
    """``holder.pid`` is a live process with the lock file open: the PID is the holder's, not a reused one."""
    try:
        return any(Path(f.path) == lock_path for f in psutil.Process(holder.pid).open_files())
    except (psutil.Error, ValueError):
        return False


def _try_lock(lock_path: Path) -> int | None:
    """An fd holding the lock on ``lock_path`` (the file it names now, not one unlinked under us), or None."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.stat(lock_path).st_ino:  # its holder unlinked it as we opened it
            raise FileNotFoundError(lock_path)
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd


def _take_over(lock_path: Path, where: Path, say: Progress) -> int:
    """Ends the holder (SIGTERM: a raytpu command then exits 130 after its own cleanup) and waits for the lock."""
    holder = _holder_of(lock_path)
    if _holds(holder, lock_path):
        say(f"{holder} holds {where}: ending it first")
        with contextlib.suppress(ProcessLookupError):
            os.kill(holder.pid, signal.SIGTERM)
    deadline = time.monotonic() + TAKE_OVER_WAIT_S
    while (got := _try_lock(lock_path)) is None:
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"local: {holder} still holds {where} {TAKE_OVER_WAIT_S:g}s after it was asked "
                                 "to end", f"end it (kill {holder.pid}), then `raytpu local down` again")
        time.sleep(0.2)
    return got


def _refusal(where: Path, exc: OSError, command: str) -> RaytpuError:
    """The run folder refused ``command``'s lock or holder record: a file system that is full, over quota or
    read-only is RuntimeFailure (exit 1: docs/guides/commands.md), a folder this user may not write (or a file where
    a folder belongs) InvalidInput naming ``--dir`` (exit 2); each says what to do (:func:`folder_valid`)."""
    if full_disk(exc):
        return unwritable(where, exc, command)
    return invalid_value("--dir", str(where), f"cannot hold the run directory's lock ({exc.strerror or exc})",
                         folder_valid(exc))


@contextlib.contextmanager
def hold(where: Path, command: str, *, take_over: bool = False, progress: Progress | None = None) -> Iterator[None]:
    """Holds ``where`` (created if missing) for ``command`` while the block runs. InvalidInput (exit 2, naming ``--dir``
    and the holder) when another command holds it; ``take_over`` (``down``) ends that holder first, RuntimeFailure when
    it does not end within :data:`TAKE_OVER_WAIT_S`. A folder that cannot take the lock or its holder's record is one
    error line (:func:`_refusal`), nothing left behind; only ``down`` goes on when the record alone does not fit (a full
    disk: stopping the cluster writes nothing, and frees space)."""
    lock_path = where / LOCK_FILE
    made = [p for p in (where, *where.parents) if not p.exists()]  # removed again if the command leaves them empty
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd = _try_lock(lock_path)
    except OSError as exc:
        _remove_empty(made)
        raise _refusal(where, exc, command) from exc
    if fd is None and take_over:
        fd = _take_over(lock_path, where, progress or (lambda _line: None))
    if fd is None:
        raise invalid_value("--dir", str(where), f"is in use by {_holder_of(lock_path)}",
                            "another run directory, or wait for that command to end (`raytpu local down` ends it "
                            "and its cluster)")
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"command": command, "pid": os.getpid()}).encode(), 0)
        except OSError as exc:  # ENOSPC, EDQUOT: the flock holds without its record
            if not (take_over and full_disk(exc)):
                raise _refusal(where, exc, command) from exc
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # a half record would read as "another raytpu command" anyway: none at all
        yield
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()  # while still held: a command that opened it now sees a new inode (_try_lock)
        os.close(fd)
        _remove_empty(made)


def _remove_empty(made: list[Path]) -> None:
    """Removes the folders a command made, deepest first, where it left them empty: a refused or failed command
    leaves no folder behind."""
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()
