"""Where the kit's packages lie in the checkout: ``raytpu/``, and the top-level folders that pyproject's
``package-dir`` maps into it (``stacks/`` installs as ``raytpu.stacks``), read from pyproject.toml itself."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
