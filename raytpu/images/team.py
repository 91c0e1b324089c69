"""A team's image per lock (``workloads[].requirements``): the kit's job image, by the digest it was built at, plus
the lock's extras, built once through the same Cloud Build path as the kit's images and named by the lock's hash
(``team-<lock digest>``), so no host of a slice installs anything at start (docs/DESIGN.md, "A team's libraries").

Its build context is a folder the kit writes under its cache (a Dockerfile and the lock), deterministic per lock.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from raytpu.images.definitions import IMAGES, ImageDefinition
from raytpu.teamcode.requirements import Lock, cache_dir, cache_refused, resolve

if TYPE_CHECKING:
    from raytpu.core.specs.spec import ClusterSpec

PREFIX = "team-"
NAME = re.compile(r"^team-[0-9a-f]{16}$")
"""A team image's name in ``raytpu.images.json``: ``team-`` and the lock's digest (:attr:`Lock.digest`)."""
BASE_IMAGE = "job"
"""The kit's image a team's lock is resolved against and layered on."""

DOCKERFILE = """\
# A team's libraries on the kit's job image, pinned by digest (raytpu.images.team): the lock's packages the image
# lacks, exact pins, no dependency resolution at build time (the kit resolved them against the image's own lock).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

COPY lock-extras.txt /tmp/raytpu-team/lock-extras.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/raytpu-team/lock-extras.txt
"""


def name_of(lock: Lock) -> str:
    return f"{PREFIX}{lock.digest}"


def definition(lock: Lock, job_ref: str, *, root: Path | None = None) -> ImageDefinition:
    """The image of ``lock`` built FROM ``job_ref`` (``REGISTRY/job@sha256:...``, the kit's job image as recorded):
    its context written under ``root`` (default the lock cache's ``images/``)."""
    job = IMAGES[BASE_IMAGE]
    name = name_of(lock)
    context = (root or cache_dir().parent / "images") / name
    try:
        context.mkdir(parents=True, exist_ok=True)
        for file, text in {"Dockerfile": DOCKERFILE, "lock-extras.txt": lock.extras_text()}.items():
            if not (context / file).is_file() or (context / file).read_text() != text:
                (context / file).write_text(text)
    except OSError as exc:  # the lock read from a cache that is read-only now: one error line, as the lock's own
        raise cache_refused(context, exc) from exc
    digest = job_ref.partition("@")[2]
    return ImageDefinition(name=name, context=context, versions=MappingProxyType({**job.versions, **lock.extras}),
                           kinds=job.kinds, base=job_ref, base_digest=digest, python=job.python)


def _locked(spec: ClusterSpec) -> list[tuple[str, str, str]]:
    """(field, code folder, requirements file) of each workload that runs the image of its lock (a spec rule
    requires ``code`` beside ``requirements``)."""
    return [(f"workloads[{i}].requirements", w.code, w.requirements) for i, w in enumerate(spec.workloads)
            if w.requirements is not None and w.code is not None and w.image is None]


def config_locks(spec: ClusterSpec) -> dict[str, Lock]:
    """``{team-<hash>: lock}`` of the config's workloads with ``requirements`` (the names ``images build IMAGE``
    may give)."""
    return {name_of(lock): lock for lock in (resolve(field, Path(code), req) for field, code, req in _locked(spec))}


def config_definitions(spec: ClusterSpec, config: str, stack: str) -> dict[str, ImageDefinition]:
    """The image of each workload's requirements lock, FROM the job image as recorded; InvalidInput when that is
    not built (``images build`` builds it first)."""
    from raytpu.core.common import errors
    from raytpu.images import record

    wanted = _locked(spec)
    if not wanted:
        return {}
    job_ref = record.load_refs(config).get(BASE_IMAGE)
    if job_ref is None:
        raise errors.missing(f"image {BASE_IMAGE}", "to layer the workloads' requirements on",
                             f"`raytpu images build --stack {stack}` (it builds the job image first)")
    found = {}
    for field, code, req in wanted:
        lock = resolve(field, Path(code), req)
        found[name_of(lock)] = definition(lock, job_ref)
    return found
