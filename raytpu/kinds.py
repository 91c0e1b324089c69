"""Workload kinds: what a ``workloads[].kind`` runs, as which KubeRay object, within which limits. One home per kind.

A kind knows its program (a module of :mod:`raytpu.workloads`, run as the RayJob entrypoint or imported by
the RayService), the KubeRay object it becomes and, for jobs, the bounds on an unattended run. Adding a kind is
one entry in :data:`KINDS` plus its program (and tests). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raytpu import errors
from raytpu.catalog import RAY_VERSION

SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")
RAY_IMAGE = f"rayproject/ray:{RAY_VERSION}-py311"
"""Default image of Ray pods of job kinds."""
JAX_VERSION = "0.10.2"
"""The JAX the job kinds pin (``jax[tpu]`` on GKE; the same ``jax`` on CPU in ``requirements.lock``)."""
SERVE_IMAGE = "vllm/vllm-tpu:nightly-20260701-6af3d12-9969466"
"""Default image of a serving RayService: vLLM-TPU with Ray and ``ray.serve.llm`` bundled, pinned by tag (GKE's
``ai-ml/gke-ray/tpu/get-started`` serve sample: "the first to bundle Ray 2.56, vLLM, and ray.serve.llm on TPU").
``rayproject/ray`` images carry no vLLM."""


@dataclass(frozen=True, kw_only=True)
class JobLimits:
    """Bounds on an unattended RayJob (every wait is bounded).

    Attributes:
        active_deadline_s: Whole-job deadline (``activeDeadlineSeconds``). Default 3600.
        pre_running_deadline_s: Fail a job still not running after this long, e.g. waiting for TPU
            capacity (``preRunningDeadlineSeconds``). Default 1800.
        ttl_s: Seconds the finished RayJob's cluster lingers (``ttlSecondsAfterFinished``). Default 300.
        backoff_limit: Retries of the whole job (``backoffLimit``). Default 0.
        submission_mode: ``K8sJobMode`` (a submitter Job whose logs carry the driver's output) or
            ``HTTPMode``/``InteractiveMode``/``SidecarMode``. Default ``K8sJobMode``.
        shutdown_after_finish: Delete the Ray cluster when the job ends. Default True.
    """

    active_deadline_s: int = 3600
    pre_running_deadline_s: int = 1800
    ttl_s: int = 300
    backoff_limit: int = 0
    submission_mode: str = "K8sJobMode"
    shutdown_after_finish: bool = True

    def __post_init__(self) -> None:
        if self.submission_mode not in SUBMISSION_MODES:
            raise errors.invalid_choice("submission_mode", self.submission_mode, SUBMISSION_MODES)
        for name in ("active_deadline_s", "pre_running_deadline_s"):
            if getattr(self, name) < 1:
                raise errors.invalid_value(name, getattr(self, name), "is below 1", "seconds >= 1")
        for name in ("ttl_s", "backoff_limit"):
            if getattr(self, name) < 0:
                raise errors.invalid_value(name, getattr(self, name), "is negative", "a whole number >= 0")


@dataclass(frozen=True)
class WorkloadKind:
    """One workload kind.

    Attributes:
        name: What ``raytpu.yaml`` says (``train``).
        program: Its module, ``raytpu.workloads.<program>``.
        object_kind: ``RayJob`` (one-shot: runs ``python -m raytpu.workloads.<program>``) or ``RayService``.
        limits: Bounds of a RayJob; None for a RayService.
        takes_model: The workload serves a model (``workloads[].model`` and the other serving fields apply).
        image: Default image of its Ray pods.
        packages: What its program imports that :attr:`image` lacks, pinned: installed by the job's runtime env
            (``pip``) on every node, as GKE's Ray TPU samples install ``jax[tpu]``. ``rayproject/ray`` images
            carry Ray and NumPy, not JAX.
        cpu_packages: The same on CPU, where TPU wheels do not install: what the import test
            (``tests/test_images.py``) builds beside Ray to stand in for the image.
        spans_slices: One run may span several slices joined over DCN (``workloads[].slices: N``: multi-slice
            training, :mod:`raytpu.multislice`); other kinds treat ``slices`` as independent copies.
    """

    name: str
    program: str
    object_kind: Literal["RayJob", "RayService"]
    limits: JobLimits | None = None
    takes_model: bool = False
    image: str = RAY_IMAGE
    packages: tuple[str, ...] = ()
    cpu_packages: tuple[str, ...] = ()
    spans_slices: bool = False

    @property
    def module(self) -> str:
        """The program's import path."""
        return f"raytpu.workloads.{self.program}"

    @property
    def is_job(self) -> bool:
        """A one-shot RayJob (as opposed to a long-lived RayService)."""
        return self.object_kind == "RayJob"


KINDS: dict[str, WorkloadKind] = {k.name: k for k in (
    WorkloadKind("smoke", "smoke", "RayJob",
                 JobLimits(active_deadline_s=1800, pre_running_deadline_s=1200, ttl_s=300),
                 packages=(f"jax[tpu]=={JAX_VERSION}",), cpu_packages=(f"jax=={JAX_VERSION}",)),
    WorkloadKind("train", "train", "RayJob",
                 JobLimits(active_deadline_s=24 * 3600, pre_running_deadline_s=3600, ttl_s=600),
                 packages=(f"jax[tpu]=={JAX_VERSION}", f"ray[train]=={RAY_VERSION}"),
                 cpu_packages=(f"jax=={JAX_VERSION}", f"ray[train]=={RAY_VERSION}"),
                 spans_slices=True),
    WorkloadKind("serve", "serve", "RayService", takes_model=True, image=SERVE_IMAGE),
)}
"""Every kind, by name."""

NAMES: tuple[str, ...] = tuple(KINDS)


def kind(name: str, field: str = "kind") -> WorkloadKind:
    """The kind called ``name``; InvalidInput listing the kinds otherwise."""
    try:
        return KINDS[name]
    except KeyError as exc:
        raise errors.invalid_choice(field, name, NAMES) from exc
