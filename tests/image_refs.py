"""A FIXTURE record of built images (what ``raytpu images build`` writes to ``raytpu.images.json``): one digest
reference per kit image, in a registry that does not exist, with a digest that is the sha256 of the image's name.
Not a real build: it lets the tests emit manifests whose every pod names an image by digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from raytpu.images import IMAGES, resolver
from raytpu.images.record import RECORD_NAME

FIXTURE_REFS: dict[str, str] = {
    name: f"us-docker.pkg.dev/fixture-project/raytpu-fixture/{name}@sha256:{hashlib.sha256(name.encode()).hexdigest()}"
    for name in IMAGES}

FIXTURE_IMAGES = resolver(FIXTURE_REFS, stack="fixture-cluster")
"""What the manifest builders take as ``images``: the fixture record, resolved per workload."""


def refs_in(registry: str | None) -> dict[str, str]:
    """The fixture refs, moved into ``registry`` (a stack's ``registry`` output: ``images build`` pushes there)."""
    if registry is None:
        return dict(FIXTURE_REFS)
    return {name: f"{registry}/{ref.rsplit('/', 1)[1]}" for name, ref in FIXTURE_REFS.items()}


def write_record(directory: Path, registry: str | None = None) -> Path:
    """Writes the fixture record into ``directory`` (beside a config there) in the format ``raytpu images build``
    writes (:mod:`raytpu.images.record`), its images in ``registry`` (default the fixture's); returns its path."""
    path = directory / RECORD_NAME
    images = {name: {"ref": ref, "build": f"projects/fixture-project/locations/us/builds/fixture-{name}",
                     "versions": dict(IMAGES[name].versions)} for name, ref in refs_in(registry).items()}
    path.write_text(json.dumps({"images": images}, indent=2) + "\n")
    return path
