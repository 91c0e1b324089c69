"""Where the kit's packages lie in the checkout: ``raytpu/``, and the top-level folders that pyproject's
``package-dir`` maps into it (``stacks/`` installs as ``raytpu.stacks``), read from pyproject.toml itself."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
MAPPED: dict[str, str] = {folder: package for package, folder in SETUPTOOLS["package-dir"].items()}
"""Top-level folder -> the package it installs as (``{"stacks": "raytpu.stacks", ...}``)."""


def module_name(path: Path) -> str:
    """The dotted name ``path`` (a ``.py`` file or a package folder of the checkout) imports as, installed."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in MAPPED:
        parts[:1] = MAPPED[parts[0]].split(".")
    return ".".join(parts)


def git_files(*args: str) -> list[str]:
    """``git ls-files -z ARGS`` of the checkout; skips the test where git cannot list it (an unpacked archive)."""
    listed = subprocess.run(["git", "ls-files", "-z", *args], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode:
        pytest.skip(f"needs git to tell a fresh clone's files from local ones: {listed.stderr.decode().strip()}")
    return [name for name in listed.stdout.decode().split("\0") if name]


def checkout_copy(target: Path) -> Path:
    """The checkout's files as a clone holds them (tracked, or new and not ignored; a link copied as a link)."""
    for name in git_files("-co", "--exclude-standard"):
        source, copy = ROOT / name, target / name
        if source.is_file() or source.is_symlink():  # a deleted file, not yet committed, is not there
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy, follow_symlinks=False)
    return target
