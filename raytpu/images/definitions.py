"""STAND-IN (branch h-images-build) for the image definitions the h-images-defs branch owns: the same interface,
two tiny build contexts. At merge the lead keeps that branch's version of this file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent


@dataclass(frozen=True)
class ImageDefinition:
    """One image: its name, its build-context folder (``Dockerfile`` and lock), its recorded versions, the kinds
    that run it."""

    name: str
    context: Path
    versions: Mapping[str, str]
    kinds: tuple[str, ...]


IMAGES: dict[str, ImageDefinition] = {
    "job": ImageDefinition("job", HERE / "job", {"ray": "2.60.0"}, ("smoke", "train")),
    "serve": ImageDefinition("serve", HERE / "serve", {"ray": "2.60.0"}, ("serve",)),
}
