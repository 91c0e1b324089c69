"""The code folder as Ray takes a ``working_dir``: a content-addressed zip, the same bytes on every machine.

Ray never fetches a cached remote ``working_dir`` URI again, so a changed folder gets a new name
(``<workload>-<sha256 of the zip>.zip``); it unpacks a remote zip without its single top-level folder, so every entry
sits under one (:data:`ZIP_TOP`). Source: Ray 2.60 ``ray._private.runtime_env.packaging.download_and_unpack_package``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from raytpu.core.common import errors
from raytpu.core.core_zip import deterministic_zip

MAX_CODE_BYTES = 100 * 1024 * 1024
"""The largest code folder the kit ships (files kept, before zipping): code, not data or weights (those go to the
bucket, ``dataset``/``model_source``). Ray's own bound on an uploaded ``working_dir`` is 512 MiB
(Ray 2.60 ``ray._private.runtime_env.packaging.GCS_STORAGE_MAX_SIZE``)."""
MAX_CODE_FILES = 20_000

EXCLUDED_DIRS = (".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
                 ".pytest_cache", ".ruff_cache", "node_modules", ".ipynb_checkpoints", ".raytpu")
"""Folders never shipped: version control, caches, virtualenvs (also any folder holding ``pyvenv.cfg``)."""
EXCLUDED_FILES = ("*.pyc", "*.pyo", ".DS_Store", ".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*",
                  "id_ecdsa*", "id_ed25519*", ".netrc", ".npmrc", ".pypirc", "*credentials*.json",
                  "*service-account*.json", ".git-credentials")
"""Files never shipped: bytecode, and secrets that must not land in a bucket every Ray pod reads (dotenv files,
private keys, credential files)."""

ZIP_TOP = "code"


@dataclass(frozen=True)
class Bundle:
    """A code folder's zip: its bytes and the object name they get (``<workload>-<sha256>.zip``)."""

    data: bytes
    object_name: str
    files: int
    excluded: tuple[str, ...]


def excluded(rel: str, is_dir: bool) -> bool:
    """Whether the path ``rel`` (relative to the code folder) is left out of the zip."""
    name = rel.rsplit("/", 1)[-1]
    if is_dir:
        return name in EXCLUDED_DIRS
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXCLUDED_FILES)


def code_files(field: str, folder: str | os.PathLike[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """``(name in the zip, file)`` of every file shipped, sorted, and the paths left out; InvalidInput naming
    ``field`` for a folder that is missing, not a folder, holds a link leading out of it or anything but files and
    folders, or is over :data:`MAX_CODE_BYTES` / :data:`MAX_CODE_FILES`."""
    root = Path(folder)
    if not root.exists():
        raise errors.invalid_value(field, str(folder), "does not exist", "a folder of the team's code, relative to "
                                   "the config file")
    if not root.is_dir():
        raise errors.invalid_value(field, str(folder), "is not a folder", "a folder of the team's code")
    real_root = root.resolve()
    files: list[tuple[str, Path]] = []
    left_out: list[str] = []
    total = 0
    seen: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        if here.resolve() in seen:  # a link back to a folder already walked: its files ship once
            dirnames[:] = []
            continue
        seen.add(here.resolve())
        if (here / "pyvenv.cfg").exists() and here != root:
            left_out.append(here.relative_to(root).as_posix() + "/")
            dirnames[:] = []
            continue
        for name in sorted(dirnames):
            rel = (here / name).relative_to(root).as_posix()
            _inside(field, here / name, real_root, rel)
            if excluded(rel, True):
                left_out.append(rel + "/")
                dirnames.remove(name)
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            if excluded(rel, False):
                left_out.append(rel)
                continue
            _inside(field, path, real_root, rel)
            status = path.stat()
            if not stat.S_ISREG(status.st_mode):
                raise errors.invalid_value(field, rel, "is not a regular file (a FIFO, socket or device)",
                                           "a folder of regular files and folders")
            total += status.st_size
            files.append((rel, path))
            if total > MAX_CODE_BYTES or len(files) > MAX_CODE_FILES:
                raise errors.invalid_value(field, str(folder), f"holds over {MAX_CODE_BYTES // 2**20} MiB or "
                                           f"{MAX_CODE_FILES:,} files to ship", "code only, at most "
                                           f"{MAX_CODE_BYTES // 2**20} MiB: data and weights belong in the bucket "
                                           "(dataset, model_source)")
    return sorted(files), sorted(left_out)


def _inside(field: str, path: Path, real_root: Path, rel: str) -> None:
    """A link must stay inside the folder: what ships is what the folder holds."""
    if path.is_symlink() and not path.resolve().is_relative_to(real_root):
        raise errors.invalid_value(field, rel, f"is a link leading out of the folder (to {path.resolve()})",
                                   "files and links inside the code folder only")


def bundle(field: str, folder: str | os.PathLike[str], workload: str) -> Bundle:
    """The code folder's zip, deterministically (sorted entries, fixed timestamps and modes, stored), named by the
    SHA-256 of its bytes."""
    files, left_out = code_files(field, folder)
    data = deterministic_zip([(f"{ZIP_TOP}/{name}", path, bool(path.stat().st_mode & 0o111)) for name, path in files])
    return Bundle(data, f"{workload}-{hashlib.sha256(data).hexdigest()}.zip", len(files), tuple(left_out))
