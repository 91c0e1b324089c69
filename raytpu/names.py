"""The names the kit derives from config names (smoke jobs, runs), in one place.

``validate`` bounds the longest of them (:data:`raytpu.spec.MULTI_HOST_NAME_LIMIT`) and the builders in
:mod:`raytpu.kuberay` name their objects with them, so a config ``validate`` passes never yields a name a later
command refuses. Standard library only.
"""

from __future__ import annotations

RUN_ID_LENGTH = 6
"""A job submission's run suffix (``<name>-<run id>``; :func:`raytpu.gke.run_id`, base-36 seconds): ``validate``
counts every derived name with one this long, so ``--run-id`` is at most this long too."""

DCN_SMOKE_SUFFIX = "dcn"
"""``smoke-<slice>-dcn``: the multi-slice smoke job of a slice."""


def run_name(base: str, run_id: str) -> str:
    """A RayJob's name: its base name and the run's suffix (``<base>-<run id>``); ``base`` alone without one."""
    return f"{base}-{run_id}" if run_id else base


def smoke_workload(slice_name: str) -> str:
    """The smoke workload's name on a slice (``smoke-<slice>``): the RAYTPU_WORKLOAD name its jobs run."""
    return f"smoke-{slice_name}"


def smoke_job(slice_name: str, copy: int) -> str:
    """The base name of the single-slice smoke job on copy ``copy`` of a slice (``smoke-<slice>-<i>``)."""
    return f"{smoke_workload(slice_name)}-{copy}"


def dcn_smoke_job(slice_name: str) -> str:
    """The base name of a slice's multi-slice smoke job (``smoke-<slice>-dcn``)."""
    return f"{smoke_workload(slice_name)}-{DCN_SMOKE_SUFFIX}"


def longest_smoke_job(slice_name: str, count: int, multislice: bool) -> str:
    """The longest base name of the smoke jobs ``raytpu smoke`` derives for a slice of ``count`` copies: the last
    copy's, or the DCN job's when a workload spans several copies."""
    return max([smoke_job(slice_name, count - 1)] + ([dcn_smoke_job(slice_name)] if multislice else []), key=len)


def service_account_id(cluster: str, role: str) -> str:
    """A Google service account id the cluster stack creates (``raytpu-<cluster>-<role>``: ``ray`` for the Ray pods,
    ``node`` for nodes, ``img`` for the image builder), 6-30 characters."""
    return f"raytpu-{cluster[:18].rstrip('-')}-{role}"
