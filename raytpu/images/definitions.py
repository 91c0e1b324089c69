"""The kit's images, one folder per image (``Dockerfile``, ``requirements.lock``, ``versions.toml``: its base and the
versions that matter), read into :data:`IMAGES`; package data, so an installed kit can build them. Standard library."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

HERE = Path(__file__).resolve().parent
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImageDefinition:
    """One image the kit defines: ``name`` (its folder's, the record's key), ``context`` (the folder), ``versions`` that
    matter by package, the ``kinds`` it is the default of, ``base`` by tag and ``base_digest`` (None where no source
    records one), ``python`` (``major.minor``), ``from_base`` (the versions its base brings, each with its source)."""

    name: str
    context: Path
    versions: Mapping[str, str]
    kinds: tuple[str, ...]
    base: str
    base_digest: str | None = None
    python: str = "3.11"
    from_base: Mapping[str, str] = field(default_factory=dict)

    @property
    def ray_version(self) -> str:
        """The Ray it runs: the RayCluster's ``spec.rayVersion`` of every pod running it."""
        return self.versions["ray"]

    @property
    def dockerfile(self) -> Path:
        """Its Dockerfile."""
        return self.context / "Dockerfile"

    @property
    def lock(self) -> Path:
        """Its lock file: the exact pins its Dockerfile installs."""
        return self.context / "requirements.lock"

    @property
    def base_reference(self) -> str:
        """What it builds on: ``base@sha256:...`` when the digest is recorded, else the tag alone."""
        return f"{self.base}@{self.base_digest}" if self.base_digest else self.base

    def base_problems(self) -> list[str]:
        """What keeps its base from being pinned: a missing or malformed digest (the build reports these)."""
        if self.base_digest is None:
            return [f"image {self.name}: base {self.base} is not pinned by digest (no digest of it was found in "
                    f"a source; record one as base_digest in {self.context / 'versions.toml'})"]
        if not DIGEST.match(self.base_digest):
            return [f"image {self.name}: base_digest {self.base_digest!r} is not sha256:<64 hex>"]
        return []


def load(context: Path) -> ImageDefinition:
    """The definition in folder ``context`` (its ``versions.toml``)."""
    record = tomllib.loads((context / "versions.toml").read_text())
    return ImageDefinition(
        name=context.name, context=context, versions=MappingProxyType(dict(record["versions"])),
        kinds=tuple(record["kinds"]), base=record["base"], base_digest=record.get("base_digest") or None,
        python=record["python"], from_base=MappingProxyType(dict(record.get("from_base", {}))))


IMAGES: dict[str, ImageDefinition] = {d.name: d for d in (load(p.parent) for p in sorted(HERE.glob("*/versions.toml")))}
"""Every image, by name."""
