"""JAX's persistent compilation cache for every JAX program the kit runs: one folder per image and slice shape.

A folder of the kit's bucket, handed to a job as env vars JAX reads as its flags' defaults
(docs/FACTS.md#compile-cache-details).
Source: JAX 0.10.2 ``jax._src.config`` (``*_state(name=...)`` defaults from ``os.getenv(name.upper())``).
Standard library only: the workloads import it inside the Ray job.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput

DEFAULT_FOLDER = "compile-cache"
"""The cache's folder in the kit's bucket unless a workload's ``compile_cache`` names another."""
OFF = "off"
"""``compile_cache: off``: the workload's programs compile from scratch every start."""

DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
"""Source: JAX 0.10.2 ``jax._src.config.compilation_cache_dir`` (``jax_compilation_cache_dir``)."""
MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
"""Default 1 s would skip every small step. Source: JAX 0.10.2 ``persistent_cache_min_compile_time_secs``."""
MIN_SIZE_ENV = "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"
"""-1: no size floor, no filesystem override. Source: JAX 0.10.2 ``persistent_cache_min_entry_size_bytes``."""
FOLDER_ENV = "RAYTPU_COMPILE_CACHE"
"""The same folder, for a team's own code (beside the other ``RAYTPU_*`` variables)."""
ENV_NAMES = (DIR_ENV, MIN_TIME_ENV, MIN_SIZE_ENV, FOLDER_ENV)

_FOLDER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$")
_UNSAFE = re.compile(r"[^a-z0-9._-]+")
_WRITABLE = ("a folder in the kit's bucket, which the pods write through its GCS FUSE mount (e.g. compile-cache "
             "or teams/ml/jax-cache); or off")


KIT_FOLDERS = {"raytpu": "the kit's core zip (raytpu/raytpu-<version>.zip) and image build contexts",
               "code": "the teams' code zips", "checkpoints": "every run's checkpoints",
               "xla-cache/vllm": "vLLM's XLA cache"}
"""The folders of the kit's bucket the kit or its workloads write (raytpu.core.common.names ``core_zip_object``,
``code_zip_object``, ``run_storage``; raytpu.images.build ``CONTEXT_PREFIX``; raytpu.core.specs.runtime.xla_cache
``PREFIX``). A compile cache's folder gets a lifecycle rule deleting its objects 30 days after they are written,
matched by prefix (modules/bucket.py ``_lifecycle_rules``, ``matches_prefix``; stacks/cluster.py
``_cache_prefixes``), so a cache may not be, hold or sit inside one of them."""


def overlap(cache: str, folder: str) -> bool:
    """Whether the bucket folders ``cache`` and ``folder`` are one, or one holds the other (a lifecycle rule with
    prefix ``cache/`` deletes every object under it).
    Source: https://cloud.google.com/storage/docs/lifecycle#matchesprefix-suffix"""
    a, b = cache.strip("/"), folder.strip("/")
    return a == b or b.startswith(a + "/") or a.startswith(b + "/")


def kit_folder_problems(field: str, value: str) -> list[InvalidInput]:
    """A cache folder clear of :data:`KIT_FOLDERS`."""
    for folder, what in KIT_FOLDERS.items():
        if overlap(value, folder):
            return [errors.invalid_value(field, value, f"is, holds or sits inside {folder}/ ({what}), and the bucket "
                                         "deletes a cache's objects 30 days after they are written",
                                         f"a folder of its own, e.g. {DEFAULT_FOLDER} or teams/ml/jax-cache; or off")]
    return []


def folder_problems(field: str, value: object) -> list[InvalidInput]:
    """A cache location the pods can write: a relative folder of the kit's bucket, clear of the folders the kit
    writes (:data:`KIT_FOLDERS`), or ``off`` (docs/FACTS.md#compile-cache-details).
    Source: JAX 0.10.2 ``jax._src.lru_cache.LRUCache`` (``gs://`` needs ``etils[epath]``)."""
    if value == OFF:
        return []
    if not isinstance(value, str):
        return [errors.invalid_value(field, value, "is not a folder name", _WRITABLE)]
    if value.startswith("gs://"):
        why = "is a gs:// URL: the pods write only the kit's bucket, through its mount, and name no other bucket"
    elif value.startswith("/"):
        why = "is an absolute path: a pod's own disk is lost with the pod, and no other pod sees it"
    elif ".." in value.split("/"):
        why = "steps out of the bucket's mount with '..'"
    elif len(value) > 200 or not _FOLDER.match(value):
        why = "is not a folder path (letters, digits, '.', '_', '-', '/'-separated, at most 200 characters)"
    else:
        return kit_folder_problems(field, value)
    return [errors.invalid_value(field, value, why, _WRITABLE)]


def budget_problems(field: str, value: object) -> list[InvalidInput]:
    """``compile_budget_s``: a positive, finite number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return []
    return [errors.invalid_value(field, value, "is not a positive number of seconds",
                                 "a number > 0, e.g. 120 (the seconds a start may compile before its first step)")]


def image_key(image: str) -> str:
    """A readable, unique folder name for ``image``: an executable compiled in one image may not load in another."""
    tail = _UNSAFE.sub("-", image.lower().rsplit("/", 1)[-1].split("@", 1)[0]).strip("-.")[:40] or "image"
    return f"{tail}-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def cache_dir(mount: str, folder: str, image: str, generation: str, topology: str, slices: int = 1) -> str:
    """``<mount>/<folder>/<image key>/<generation>-<topology>[-x<slices>]``: one cache per image and slice shape."""
    shape = f"{generation}-{topology}" + (f"-x{slices}" if slices > 1 else "")
    return f"{mount.rstrip('/')}/{folder.strip('/')}/{image_key(image)}/{shape}"


KEEP_EVERY_ENTRY = {MIN_TIME_ENV: "0", MIN_SIZE_ENV: "-1"}
"""JAX's floors lowered: every executable is kept, whatever its compile time or size."""


def team_folder(team: str, value: str | None) -> str:
    """A team run's cache: ``compile-cache/<team>`` (its identity writes there only; a team sets no other), or off."""
    return OFF if value == OFF else f"{DEFAULT_FOLDER}/{team}"


def folder_in_bucket(value: str | None) -> str | None:
    """A workload's ``compile_cache`` as the folder its programs write, or None when ``off``."""
    return None if value == OFF else value or DEFAULT_FOLDER


def env(directory: str) -> dict[str, str]:
    """The variables that turn the cache on at ``directory``, keeping any executable (any compile time, any size)."""
    return {DIR_ENV: directory, **KEEP_EVERY_ENTRY}


def job_env(folder: str | None, *, mount: str, image: str, generation: str, topology: str,
            slices: int = 1, team: bool = False) -> dict[str, str]:
    """A job's cache variables at :func:`cache_dir`, plus :data:`FOLDER_ENV` for a team's code; none when ``off``."""
    in_bucket = folder_in_bucket(folder)
    if in_bucket is None:
        return {}
    directory = cache_dir(mount, in_bucket, image, generation, topology, slices)
    return env(directory) | ({FOLDER_ENV: directory} if team else {})


JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
"""A submitted job's config, runtime env included, as its driver sees it (docs/FACTS.md#compile-cache-details).
Source: Ray 2.60 ``ray._private.runtime_env.constants``; ``ray._private.worker.init``."""


def forwarded(environ: Mapping[str, str]) -> dict[str, str]:
    """The cache variables in ``environ`` a driver passes to its workers, less those its job's runtime env sets."""
    try:
        job = json.loads(environ.get(JOB_CONFIG_ENV) or "{}")
    except ValueError:
        job = {}
    runtime = job.get("runtime_env") if isinstance(job, dict) else None
    given = (runtime.get("env_vars") if isinstance(runtime, dict) else None) or {}
    return {name: environ[name] for name in ENV_NAMES if name in environ and name not in given}


def over_budget(compile_s: float | None, budget_s: float | None) -> bool:
    """A start compiled for longer than the workload's ``compile_budget_s``."""
    return compile_s is not None and budget_s is not None and compile_s > budget_s


def first_and_resumed(attempts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A preempted run's first start beside its resumed one (``first_s``, ``resumed_*``); None without a resume."""
    if len(attempts) < 2:
        return None
    first, resumed = attempts[0], attempts[-1]
    return {"first_s": first["s"], "resumed_s": resumed["s"], "resumed_hits": resumed["hits"],
            "resumed_misses": resumed["misses"]}


def describe(compile_s: float, hits: int, misses: int, when: str = "before the first step") -> str:
    """The ``compiled`` phase's detail: seconds and where the executables came from."""
    return f"XLA compile {compile_s:.2f}s {when}: {hits} cache hit(s), {misses} miss(es)"


def by_process(compile: dict[str, Any]) -> list[dict[str, Any]]:
    """A start's compile per process (``processes``, by JAX process index: ``s``, ``hits``, ``misses``, ``wall``, and
    ``process`` where one may be missing); a record with none is its one process's."""
    return list(compile.get("processes") or [compile])


def last_to_finish(compile: dict[str, Any]) -> dict[str, Any]:
    """The process whose compile ended last: the one a start's first step (a collective) waited for."""
    return max(by_process(compile), key=lambda p: p.get("wall") or 0.0)


def longest(compile: dict[str, Any]) -> dict[str, Any]:
    """The process that compiled longest: what a compile budget judges."""
    return max(by_process(compile), key=lambda p: p.get("s") or 0.0)


def describe_processes(compile: dict[str, Any]) -> str:
    """The ``compiled`` detail of a start over one or more processes: the last to finish, beside process 0."""
    processes = by_process(compile)
    last = last_to_finish(compile)
    if len(processes) < 2:
        return describe(last["s"], last["hits"], last["misses"])
    first = processes[0]  # process 0's, or the lowest that reported
    number = last.get("process", processes.index(last))
    where = f"before the first step on process {number}, the last of {len(processes)} to finish"
    text = describe(last["s"], last["hits"], last["misses"], where)
    if last is first:  # its figures are already the phase's
        return text
    return (text + f"; process {first.get('process', 0)}: {first['s']:.2f}s, {first['hits']} hit(s), "
            f"{first['misses']} miss(es)")
