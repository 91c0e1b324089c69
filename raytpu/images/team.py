"""A team's image per lock (``workloads[].requirements``): the kit's job image, by the digest it was built at, plus
the lock's extras, built once through the same Cloud Build path as the kit's images and named by the lock's hash
(``team-<lock digest>``), so no host of a slice installs anything at start (docs/DESIGN.md, "A team's libraries").

Its build context is a folder the kit writes under its cache (a Dockerfile and the lock), deterministic per lock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from raytpu.images.definitions import IMAGES, ImageDefinition
from raytpu.teamcode import prepared
from raytpu.teamcode.prepared import TeamCode
from raytpu.teamcode.requirements import ImageLock, Lock, cache_dir, cache_refused

if TYPE_CHECKING:
    from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec

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


def base_lock() -> ImageLock:
    """Every pin of the job image, as :mod:`raytpu.teamcode` takes them: a team's lock is resolved against them."""
    path = IMAGES[BASE_IMAGE].lock
    return ImageLock(path, path.read_text(), f"{path.name} of raytpu/images/{BASE_IMAGE}")


def prepare(spec: ClusterSpec, work: WorkloadSpec, *, lock: bool = True, ship: bool = True) -> TeamCode:
    """``work``'s team code read once against the job image's pins (:func:`raytpu.teamcode.prepared.prepare`)."""
    return prepared.prepare(spec, work, base_lock(), lock=lock, ship=ship)


def prepare_all(spec: ClusterSpec, *, lock: bool, ship: bool = False) -> dict[str, TeamCode]:
    """Every workload's team code, by name (:func:`raytpu.teamcode.prepared.prepare_all`)."""
    return prepared.prepare_all(spec, base_lock(), lock=lock, ship=ship)


def lock_all(spec: ClusterSpec, codes: Mapping[str, TeamCode]) -> dict[str, TeamCode]:
    """``codes`` with their locks (:func:`raytpu.teamcode.prepared.lock_all`)."""
    return prepared.lock_all(spec, codes, base_lock())


def image_name(code: TeamCode) -> str | None:
    """The image of ``code``'s lock (None: no lock)."""
    return None if code.lock is None else name_of(code.lock)


def config_locks(codes: Iterable[TeamCode]) -> dict[str, Lock]:
    """``{team-<hash>: lock}`` of the workloads' prepared code (the names ``images build IMAGE`` may give)."""
    return {name_of(code.lock): code.lock for code in codes if code.lock is not None}


def config_definitions(locks: Mapping[str, Lock], config: str, stack: str) -> dict[str, ImageDefinition]:
    """The image of each requirements lock, FROM the job image as recorded; InvalidInput when that is not built
    (``images build`` builds it first)."""
    from raytpu.core.common import errors
    from raytpu.images import record

    if not locks:
        return {}
    job_ref = record.load_refs(config).get(BASE_IMAGE)
    if job_ref is None:
        raise errors.missing(f"image {BASE_IMAGE}", "to layer the workloads' requirements on",
                             f"`raytpu images build --stack {stack}` (it builds the job image first)")
    return {name: definition(lock, job_ref) for name, lock in locks.items()}
