"""The output folder of ``raytpu synth --out DIR``: checked before anything slow, replaced only as a whole.

DIR must be something nobody minds losing: a new path (in a writable folder that exists or can be made), an empty
folder, or a previous synth output (only ``stacks/``, ``manifest.json``, the marker ``.raytpu-synth``; with the marker
or a cdktf manifest). Anything else is refused before CDK Terrain loads, nothing written. The new output is written
beside DIR (a rename swaps it in), the old one put back if the swap fails; ``os.mkdir`` follows the umask."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from raytpu.core.common.errors import InvalidInput, RuntimeFailure, excerpt

FIELD = "--out"
MARKER = ".raytpu-synth"
"""The file every synth output carries: it marks the folder as one the next synth may replace."""
MARKER_TEXT = ("written by raytpu synth; the next `raytpu synth --out` replaces this folder (keeping terraform's "
               "providers and lock in stacks/*/)\n")
SYNTH_ENTRIES = frozenset({"stacks", "manifest.json", MARKER})
"""What a synth writes at the top of its output folder.
Source: cdktn 0.24.0 ``Manifest.FILE_NAME``, ``Manifest.STACKS_FOLDER`` (tests/test_synth_out.py compares)."""
VALID = (f"a path that does not exist yet in a writable folder, an empty folder, or a previous synth output "
         f"(a folder holding only stacks/, manifest.json and {MARKER})")
TERRAFORM_KEPT = (".terraform", ".terraform.lock.hcl")
"""What ``cdktf deploy`` leaves in ``stacks/<id>/`` that a synth carries over, as ``cdktf synth`` does. Source:
@cdktf/cli-core 0.21.0 terraform-cli (``stacks/<id>`` is terraform's working directory)."""
_SHOWN = 200
_MANIFEST_MAX = 1 << 20


def _excerpt(path: str) -> str:
    """``path`` for a message: its last ``_SHOWN`` characters (the name is at the end), its length said when cut."""
    return excerpt(path, _SHOWN, tail=True)


def _refuse(path: str, problem: str) -> InvalidInput:
    return InvalidInput(FIELD, f"{_excerpt(path)} {problem}", VALID)


def _is_cdktf_manifest(path: Path) -> bool:
    """A cdktf ``manifest.json`` (a JSON object with ``stacks``), read no further than 1 MiB."""
    if path.is_symlink() or not path.is_file():  # not a link, a FIFO (a read would block) or a device
        return False
    try:
        with path.open("rb") as f:
            data = json.loads(f.read(_MANIFEST_MAX))  # cut at the limit: not JSON, so not a manifest
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("stacks"), dict)


def is_previous_output(path: Path, entries: list[str]) -> bool:
    """Whether a folder holding ``entries`` is a synth output (only a synth's entries, and the marker or a
    cdktf manifest beside ``stacks/``)."""
    if not entries or not set(entries) <= SYNTH_ENTRIES:
        return False
    if (path / MARKER).is_file() and not (path / MARKER).is_symlink():
        return True
    return (path / "stacks").is_dir() and _is_cdktf_manifest(path / "manifest.json")


def _writable_folder(folder: Path, shown: str) -> None:
    """Refuses unless a folder can be made in ``folder`` (tried: ``os.access`` says yes to root even on /proc)."""
    probe = folder / f".raytpu-synth-probe-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe)
        os.rmdir(probe)
    except OSError as exc:
        raise _refuse(shown, f"cannot be written: no folder can be made in {_excerpt(str(folder))} "
                             f"({exc.strerror or exc})") from exc


def _stat(path: Path, out: str, follow: bool) -> os.stat_result | None:
    """``path``'s status, None when it does not exist; a path that cannot be looked up is refused."""
    try:
        return os.stat(path, follow_symlinks=follow)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a name too long, a loop of links, a folder that cannot be searched
        raise _refuse(out, f"cannot be looked up ({exc.strerror or exc})") from exc


def check(out: str) -> None:
    """Refuses ``out`` (InvalidInput naming ``--out``) unless a synth may replace it; writes nothing."""
    path = Path(os.path.abspath(out))
    if path == path.parent:
        raise _refuse(out, "is the root folder")
    found = _stat(path, out, follow=False)
    if found is not None:
        if stat.S_ISLNK(found.st_mode):
            raise _refuse(out, "is a symbolic link (a synth replaces its output folder as a whole)")
        if not stat.S_ISDIR(found.st_mode):
            kind = "is a file, not a folder" if stat.S_ISREG(found.st_mode) else "is not a folder"
            raise _refuse(out, f"{kind} (a synth replaces it by a folder)")
        try:
            entries = sorted(os.listdir(path))
        except OSError as exc:
            raise _refuse(out, f"cannot be read ({exc.strerror or exc})") from exc
        if entries and not is_previous_output(path, entries):
            listed = ", ".join(repr(e[:40]) for e in entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise _refuse(out, f"is a folder that is not a synth output (it holds {listed}: a synth would "
                               f"delete them)")
    ancestor = path.parent
    while (found := _stat(ancestor, out, follow=True)) is None and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if found is None or not stat.S_ISDIR(found.st_mode):
        raise _refuse(out, f"cannot be made: {_excerpt(str(ancestor))} is not a folder")
    _writable_folder(ancestor, out)


def _sibling(out: Path, tag: str) -> Path:
    """A new, empty folder beside ``out`` (same parent: a rename swaps it in), made with the umask's mode."""
    for _ in range(100):
        candidate = out.parent / f".{out.name}.{tag}-{secrets.token_hex(4)}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no free name beside {out}")


def _make_parents(out: Path, made: list[Path]) -> None:
    """Creates the missing folders above ``out``, each put first in ``made`` (removed again on failure)."""
    missing: list[Path] = []
    parent = out.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        os.mkdir(folder)
        made.insert(0, folder)


def write_marker(outdir: str | Path) -> None:
    """Marks ``outdir`` as a synth output (:data:`MARKER`)."""
    (Path(outdir) / MARKER).write_text(MARKER_TEXT, encoding="utf-8")


def _carry_terraform_files(old: Path, new: Path) -> None:
    """Moves :data:`TERRAFORM_KEPT` of every stack still synthesized from the old output into the new one (best
    effort: without them, terraform only needs ``init`` again)."""
    for stack in sorted((new / "stacks").glob("*/")):
        for name in TERRAFORM_KEPT:
            kept = old / "stacks" / stack.name / name
            with contextlib.suppress(OSError):
                if (kept.exists() or kept.is_symlink()) and not (stack / name).exists():
                    os.replace(kept, stack / name)


@contextlib.contextmanager
def replacing(out: str | Path) -> Iterator[Path]:
    """Yields a new folder beside ``out`` to write into; on a clean exit it is marked and swapped in (the old output
    moved aside, put back if the swap fails, then deleted). On any failure, KeyboardInterrupt too, ``out`` stays as it
    was."""
    out = Path(os.path.abspath(out))
    made: list[Path] = []
    tmp: Path | None = None
    try:
        _make_parents(out, made)
        tmp = _sibling(out, "new")
        yield tmp
        write_marker(tmp)
        if out.exists() or out.is_symlink():
            old = _sibling(out, "old")
            os.replace(out, old)  # onto an empty folder. Source: POSIX rename(2), "newpath ... an empty directory"
            try:
                os.replace(tmp, out)
            except BaseException:
                os.replace(old, out)
                raise
            tmp = None
            _carry_terraform_files(old, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
            tmp = None
        made = []
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


FULL_DISK_WORDS = re.compile(r"\b(ENOSPC|EDQUOT|EROFS)\b|No space left on device|Disk quota exceeded|Read-only file "
                             r"system")
"""How a refused write reads in an error of node's (``ENOSPC: no space left on device, write``) or of Python's."""


def full_disk(exc: BaseException) -> bool:
    """Whether ``exc`` is a write the file system refused: an OSError of those errnos, or an error naming one."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
    return FULL_DISK_WORDS.search(str(exc)) is not None


def unwritten(out: str, exc: BaseException) -> RuntimeFailure:
    """A synth whose output could not be written (a full file system): one line (exit 1) naming ``--out``; the
    folder is as it was (:func:`replacing`)."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else excerpt(str(exc), 120)
    return RuntimeFailure(f"{FIELD}: {_excerpt(out)} could not be written ({why}); it is as it was",
                          "free space on that file system (or another --out), then `raytpu synth` again")
