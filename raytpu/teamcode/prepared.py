"""A workload's own code read once per command: its folder walked once (the files that ship, their zip), checked, its
``requirements`` locked once, and the config path every error about it names, in one value (:class:`TeamCode`) that
``validate``, ``submit`` (both sides), ``local serve`` and ``images build``/``list`` hand to whatever needs it.

Loading a config reads no folder and runs no uv (:func:`raytpu.config.load`): the workloads stack never needs a
team's code. The image's pins come from the caller (:func:`raytpu.images.team.base_lock`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raytpu.core.common import errors
from raytpu.teamcode import bundle, checks, requirements

if TYPE_CHECKING:
    from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec


@dataclass(frozen=True)
class TeamCode:
    """One workload's team code as every consumer takes it; a workload without ``code`` has only its ``field``."""

    field: str
    """The workload's config path (``workloads[2]``): errors about its code name fields under it."""
    folder: Path | None = None
    files: tuple[tuple[str, Path], ...] = ()
    """``(name in the zip, file)`` of every file shipped, from the one walk
    (:func:`raytpu.teamcode.bundle.code_files`)."""
    left_out: tuple[str, ...] = ()
    zip: bundle.Bundle | None = None
    """The folder's content-addressed zip, made from :attr:`files` (None: not asked for, or no ``code``)."""
    lock: requirements.Lock | None = None
    """The lock of its ``requirements`` (None: none, or not asked for)."""

    def at(self, name: str) -> str:
        """The config path of the workload's field ``name`` (``workloads[2].code``)."""
        return errors.join_path(self.field, name)


def field_of(spec: ClusterSpec, name: str) -> str:
    """``workloads[i]``: where ``spec``'s config names workload ``name``."""
    index = next(i for i, work in enumerate(spec.workloads) if work.name == name)
    return f"workloads[{index}]"


def read(spec: ClusterSpec, work: WorkloadSpec, image: requirements.ImageLock, *, ship: bool = True) -> TeamCode:
    """``work``'s code folder walked once and checked (:func:`raytpu.teamcode.checks.folder_problems`), zipped when
    ``ship``; InvalidInput(s) naming ``workloads[i].<field>`` for every problem, as ``validate`` reports them."""
    code = TeamCode(field_of(spec, work.name))
    if work.code is None:
        return code
    folder = Path(work.code)
    files, left_out = bundle.code_files(code.at("code"), folder)
    errors.raise_found(checks.folder_problems(code.field, folder, work, image))
    return dataclasses.replace(code, folder=folder, files=tuple(files), left_out=tuple(left_out),
                               zip=bundle.zipped(files, left_out, work.name) if ship else None)


def locked(code: TeamCode, work: WorkloadSpec, image: requirements.ImageLock) -> TeamCode:
    """``code`` with the lock of ``work``'s requirements against ``image`` (from the cache when kept: the kept lock
    keeps a team image's name from ``images build`` to ``submit``)."""
    if work.requirements is None or code.folder is None or work.image is not None:
        return code
    lock = requirements.resolve(code.at("requirements"), code.folder, work.requirements, image=image)
    return dataclasses.replace(code, lock=lock)


def prepare(spec: ClusterSpec, work: WorkloadSpec, image: requirements.ImageLock, *, lock: bool = True,
            ship: bool = True) -> TeamCode:
    """:func:`read`, then (``lock``) :func:`locked`: what one run of ``work`` takes."""
    code = read(spec, work, image, ship=ship)
    return locked(code, work, image) if lock else code


def prepare_all(spec: ClusterSpec, image: requirements.ImageLock, *, lock: bool, ship: bool = False
                ) -> dict[str, TeamCode]:
    """Every workload's :class:`TeamCode` by name: every folder's problems reported together, then (``lock``) every
    lock's (:func:`lock_all`)."""
    found: list[errors.InvalidInput] = []
    codes: dict[str, TeamCode] = {}
    for work in spec.workloads:
        try:
            codes[work.name] = read(spec, work, image, ship=ship)
        except (errors.InvalidInput, errors.InvalidInputs) as exc:
            found += errors.problems_of(exc)
    errors.raise_found(found)
    return lock_all(spec, codes, image) if lock else codes


def lock_all(spec: ClusterSpec, codes: Mapping[str, TeamCode], image: requirements.ImageLock) -> dict[str, TeamCode]:
    """``codes`` (read with every folder fine) with their locks, every lock's problem reported together."""
    found: list[errors.InvalidInput] = []
    done: dict[str, TeamCode] = {}
    for work in spec.workloads:
        try:
            done[work.name] = locked(codes[work.name], work, image)
        except errors.InvalidInput as exc:
            found.append(exc)
    errors.raise_found(found)
    return done
