"""The folders a command writes (``TMPDIR``, ``HOME``, ``XDG_CACHE_HOME``, an output path), checked before work: a
missing ``TMPDIR`` stops CDK Terrain's node runtime with a JavaScript traceback; an unwritable ``HOME`` hung synth.
Each is one ``error:`` line (exit 2). Writability is probed with a file (as root ``os.access`` says yes even under
``/proc``)."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

_SHOWN = 120


def _probe(folder: Path) -> str | None:
    """Why no file can be made in ``folder`` (None: one was made and removed)."""
    probe = folder / f".raytpu-probe-{secrets.token_hex(6)}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        return exc.strerror or str(exc)
    with contextlib.suppress(OSError):
        probe.unlink()
    return None


def folder_problem(path: str) -> str | None:
    """Why ``path`` is not an existing folder this process can write (None when it is)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be looked up ({exc.strerror})"
    if not stat.S_ISDIR(mode):
        return "is not a folder"
    why = _probe(Path(path))
    return None if why is None else f"cannot be written ({why})"


MADE_IF_MISSING = frozenset({"XDG_CACHE_HOME"})
"""Variables naming a folder that its users make when it is missing (XDG base directories: the kit's lock cache, uv,
matplotlib, vLLM, Hugging Face): a missing one is fine, a file there or no folder to make it in is not."""


def _made_problem(path: str) -> str | None:
    """Why ``path`` is not a folder this process can write or make (None when it is)."""
    if os.path.lexists(path):
        return folder_problem(path)
    nearest = Path(os.path.abspath(path))
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    why = folder_problem(str(nearest))
    return None if why is None else f"cannot be made: {errors.excerpt(str(nearest), _SHOWN, tail=True)} {why}"


def environment_problems(*names: str) -> list[InvalidInput]:
    """``TMPDIR`` / ``HOME`` / ``XDG_CACHE_HOME`` (of ``names``) set to a folder that does not exist (but
    :data:`MADE_IF_MISSING`'s may) or cannot be written; with ``TMPDIR`` unset, the temporary folder Python would pick
    must be usable too."""
    valid = {"TMPDIR": "a folder you can write, or TMPDIR unset", "HOME": "a home folder you can write",
             "XDG_CACHE_HOME": "a folder you can write (made if missing), or XDG_CACHE_HOME unset (~/.cache)"}
    found = []
    for name in names:
        value = os.environ.get(name)
        if value:
            if why := (_made_problem if name in MADE_IF_MISSING else folder_problem)(value):
                found.append(InvalidInput(name, f"{errors.excerpt(value, _SHOWN, tail=True)} {why}",
                                          valid.get(name, "a folder you can write")))
        elif name == "TMPDIR":
            try:
                tempfile.gettempdir()
            except FileNotFoundError as exc:
                found.append(InvalidInput(name, f"is unset and no temporary folder can be written ({exc})",
                                          "TMPDIR=a folder you can write"))
    return found


def check_environment(*names: str) -> None:
    """Raises :func:`environment_problems` (InvalidInput, exit 2)."""
    errors.raise_found(environment_problems(*names))


def output_file_problems(field: str, path: str) -> list[InvalidInput]:
    """An output file ``path`` (``field``) that cannot be written: not a regular file where one exists (/dev/full, a
    FIFO), or no file can be made in its folder or the nearest existing one above (the writer makes the missing
    ones)."""
    shown = errors.excerpt(path, _SHOWN, tail=True)
    target = Path(os.path.abspath(path))
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
        return [InvalidInput(field, f"{shown} is {kind}", "a file path in a folder you can write")]
    return _nearest_folder_problems(field, shown, target.parent, "a file path in a folder you can write")


def _nearest_folder_problems(field: str, shown: str, folder: Path, valid: str) -> list[InvalidInput]:
    """No file can be made in ``folder``, or where missing, the nearest folder above it."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if why := folder_problem(str(folder)):
        return [InvalidInput(field, f"{shown} cannot be written: {errors.excerpt(str(folder), _SHOWN, tail=True)} "
                             f"{why}", valid)]
    return []


def output_folder_problems(field: str, path: str) -> list[InvalidInput]:
    """An output folder ``path`` (``field``) that is not a folder, or where no file can be made."""
    shown = errors.excerpt(path, _SHOWN, tail=True)
    folder = Path(os.path.abspath(path))
    if folder.exists() and not folder.is_dir():
        return [InvalidInput(field, f"{shown} is not a folder", "a folder you can write (made if missing)")]
    return _nearest_folder_problems(field, shown, folder, "a folder you can write (made if missing)")
