"""A job's Ray workers on the emulated slice without its nodes' serving-only variables, as a RayJob's pods on GKE
never carry them: every emulated node gets Serve's HAProxy switch for the local twin, and JAX 0.10.2 warns at each
``jax.distributed.initialize`` that a variable whose name holds ``_proxy`` "may cause a hang". Standard library only:
Ray runs :func:`drop_serving_env` at the start of every worker of a job whose driver names it
(the team train driver: :func:`job_runtime_env`).
Source: JAX 0.10.2 ``jax._src.distributed.State.initialize`` (``'_proxy' in key.lower()``); Ray 2.60
``RuntimeEnv(worker_process_setup_hook=...)``."""

from __future__ import annotations

import os
from typing import Any

EMULATED = "RAYTPU_EMULATED"
"""``1`` in an emulated slice's drivers and hosts (:data:`raytpu.local.slice.emulation.ENV_EMULATED`; named again
here, as this module imports nothing of the kit)."""

SERVING_ONLY_ENV = "RAYTPU_SERVING_ONLY_ENV"
"""In every emulated node's environment: the comma-separated names only Serve reads
(:data:`raytpu.core.manifests.serving.DIRECT_STREAMING_ENV`, set by :mod:`raytpu.local.slice.launch`)."""

HOOK = "raytpu.workloads.support.job_worker_env.drop_serving_env"
""":func:`drop_serving_env` as Ray's ``worker_process_setup_hook`` names it."""


def drop_serving_env() -> None:
    """Removes the node's serving-only variables from this worker's environment and loads the run's secrets file, as
    :func:`raytpu.workloads.local_secrets.load` (a no-op off the emulated slice): this hook replaces that one in the
    workers of a driver that names it."""
    for name in os.environ.get(SERVING_ONLY_ENV, "").split(","):
        if name:
            os.environ.pop(name, None)
    from raytpu.workloads import local_secrets

    local_secrets.load()


def job_runtime_env(runtime_env: dict[str, Any] | None = None) -> dict[str, Any]:
    """``runtime_env`` for the team train driver's ``ray.init``, whose workers' output it echoes: on an emulated slice
    (``RAYTPU_EMULATED=1``) they start without the nodes' serving-only variables; elsewhere unchanged. The kit's
    quiet drivers take no worker output and name no hook: a runtime env would cost the smoke's host actors the
    raylets' prestarted workers."""
    runtime_env = dict(runtime_env or {})
    if os.environ.get(EMULATED) == "1":
        runtime_env.setdefault("worker_process_setup_hook", HOOK)
    return runtime_env
