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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raytpu.core.common import errors
from raytpu.core.core_zip import deterministic_zip
from raytpu.teamcode import credentials, ignore

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
    sizes: tuple[tuple[str, int], ...] = ()
    """Every file shipped and its size in bytes, as ``submit --dry-run`` lists them."""

    def listing(self, limit: int = 50) -> list[str]:
        """The first ``limit`` files shipped with their sizes, then how many more (``--dry-run`` prints it)."""
        lines = [f"  {size:>12,}  {name}" for name, size in self.sizes[:limit]]
        if len(self.sizes) > limit:
            lines.append(f"  ... and {len(self.sizes) - limit:,} more files")
        if self.excluded:
            shown = ", ".join(self.excluded[:20])
            lines.append(f"  left out: {shown}" + (f" and {len(self.excluded) - 20} more" if len(self.excluded) > 20
                                                   else ""))
        return lines


def excluded(rel: str, is_dir: bool) -> bool:
    """Whether the path ``rel`` (relative to the code folder) is left out of the zip by the kit's own rules (the
    folder's ignore files aside): caches, virtualenvs, bytecode and files named like credentials."""
    name = rel.rsplit("/", 1)[-1]
    if credentials.secret_name(rel, is_dir):
        return True
    if is_dir:
        return name in EXCLUDED_DIRS
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXCLUDED_FILES)


OPT_IN = "a line !<path> in the code folder's .raytpuignore (ships that file as it is)"
"""The one explicit way to ship a file the kit would leave out or refuse as a secret: a ``.raytpuignore`` negation
naming it (a ``.gitignore`` negation does not count: it says what git tracks, not what the team ships)."""


def code_files(field: str, folder: str | os.PathLike[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """``(name in the zip, file)`` of every file shipped, sorted, and the paths left out; InvalidInput naming
    ``field`` for a folder that is missing, not a folder, holds a link leading out of it, a dangling link, a link
    loop, anything but files and folders, a file that looks like a secret (:mod:`raytpu.teamcode.credentials`) the
    team did not opt in (:data:`OPT_IN`), or is over :data:`MAX_CODE_BYTES` / :data:`MAX_CODE_FILES`.

    What is left out: the kit's rules (:func:`excluded`), then the project's ``.gitignore`` files (above the folder up
    to the git work tree's top, and inside it), then ``.raytpuignore`` files (gitignore syntax, :mod:`ignore`),
    whose last matching line decides over everything else."""
    root = Path(folder)
    if not root.exists():
        raise errors.invalid_value(field, str(folder), "does not exist", "a folder of the team's code, relative to "
                                   "the config file")
    if not root.is_dir():
        raise errors.invalid_value(field, str(folder), "is not a folder", "a folder of the team's code")
    walk = _Walk(field, root)
    walk.folder(root, "", ignore.project_rules(root), [])
    return sorted(walk.files), sorted(walk.left_out)


class _Walk:
    """One walk of a code folder (links followed, each real folder once)."""

    def __init__(self, field: str, root: Path) -> None:
        self.field, self.root, self.real_root = field, root, root.resolve()
        self.files: list[tuple[str, Path]] = []
        self.left_out: list[str] = []
        self.total = 0
        self.seen: set[Path] = set()

    def folder(self, here: Path, rel: str, git_rules: list[ignore.Rule], own_rules: list[ignore.Rule]) -> None:
        real = here.resolve()
        if real in self.seen:  # a link back to a folder already walked: its files ship once
            return
        self.seen.add(real)
        git_rules = git_rules + ignore.read_rules(here, rel, ".gitignore")
        own_rules = own_rules + ignore.read_rules(here, rel, ".raytpuignore")
        try:
            names = sorted(os.listdir(here))
        except OSError as exc:
            raise errors.invalid_value(self.field, rel or str(self.root), f"cannot be read ({exc.strerror or exc})",
                                       "a folder the kit can read") from exc
        for name in names:
            path = here / name
            child = f"{rel}/{name}" if rel else name
            target = self._target(path, child)
            is_dir = target.is_dir()
            if not self._ships(child, target if target is not path else None, is_dir, git_rules, own_rules):
                self.left_out.append(child + ("/" if is_dir else ""))
                continue
            if is_dir:
                if (path / "pyvenv.cfg").exists():
                    self.left_out.append(child + "/")
                    continue
                self.folder(path, child, git_rules, own_rules)
            else:
                self.file(path, child, target, ignore.decision(own_rules, child, False))

    def _target(self, path: Path, rel: str) -> Path:
        """Where ``path`` leads: itself, or a link's target inside the folder (else InvalidInput)."""
        if not path.is_symlink():
            return path
        try:
            target = path.resolve(strict=True)
        except FileNotFoundError as exc:
            raise errors.invalid_value(self.field, rel, f"is a link to nothing (to {os.readlink(path)})",
                                       "links to files or folders that exist inside the code folder") from exc
        except (RuntimeError, OSError) as exc:  # a loop: RuntimeError to Python 3.12, OSError(ELOOP) after
            raise errors.invalid_value(self.field, rel, "is a link loop (it leads back to itself)",
                                       "links to files or folders that exist inside the code folder") from exc
        if not target.is_relative_to(self.real_root):
            raise errors.invalid_value(self.field, rel, f"is a link leading out of the folder (to {target})",
                                       "files and links inside the code folder only")
        return target

    def _ships(self, rel: str, link_target: Path | None, is_dir: bool, git_rules: list[ignore.Rule],
               own_rules: list[ignore.Rule]) -> bool:
        own = ignore.decision(own_rules, rel, is_dir)
        if own is not None:
            return own.negated
        git = ignore.decision(git_rules, rel, is_dir)
        if git is not None and not git.negated:
            return False
        if excluded(rel, is_dir):
            return False
        if link_target is None:
            return True
        return not credentials.secret_name(link_target.relative_to(self.real_root).as_posix(), is_dir)  # to .env

    def file(self, path: Path, rel: str, target: Path, own: ignore.Rule | None) -> None:
        try:
            status = path.stat()
            if not stat.S_ISREG(status.st_mode):
                raise errors.invalid_value(self.field, rel, "is not a regular file (a FIFO, socket or device)",
                                           "a folder of regular files and folders")
            secret = None if own is not None and own.negated else credentials.secret_content(path)
        except OSError as exc:
            raise errors.invalid_value(self.field, rel, f"cannot be read ({exc.strerror or exc})",
                                       "files the kit can read") from exc
        if secret is not None:
            raise errors.invalid_value(self.field, rel, f"looks like a secret ({secret}) and would ship in the code "
                                       "zip every pod of the project reads", "leave it out (a line naming it in "
                                       f".raytpuignore or .gitignore), or to ship it anyway {OPT_IN}")
        self.total += status.st_size
        self.files.append((rel, path))
        if self.total > MAX_CODE_BYTES or len(self.files) > MAX_CODE_FILES:
            raise errors.invalid_value(self.field, str(self.root), f"holds over {MAX_CODE_BYTES // 2**20} MiB or "
                                       f"{MAX_CODE_FILES:,} files to ship", "code only, at most "
                                       f"{MAX_CODE_BYTES // 2**20} MiB: data and weights belong in the bucket "
                                       "(dataset, model_source)")


def bundle(field: str, folder: str | os.PathLike[str], workload: str) -> Bundle:
    """The code folder's zip (:func:`zipped` of one :func:`code_files` walk)."""
    files, left_out = code_files(field, folder)
    return zipped(files, left_out, workload)


def zipped(files: Sequence[tuple[str, Path]], left_out: Sequence[str], workload: str) -> Bundle:
    """The zip of a walk's ``files``, deterministically (sorted entries, fixed timestamps and modes, stored), named by
    the SHA-256 of its bytes."""
    data = deterministic_zip([(f"{ZIP_TOP}/{name}", path, bool(path.stat().st_mode & 0o111)) for name, path in files])
    return Bundle(data, f"{workload}-{hashlib.sha256(data).hexdigest()}.zip", len(files), tuple(left_out),
                  tuple((name, path.stat().st_size) for name, path in files))
