"""Workload kinds: what a ``workloads[].kind`` runs, as which KubeRay object, within which limits. One home per kind.

A kind knows its program (a module of :mod:`raytpu.workloads`, run as the RayJob entrypoint or imported by
the RayService), the KubeRay object it becomes and, for jobs, the bounds on an unattended run. Adding a kind is
one entry in :data:`KINDS` plus its program (and tests). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from raytpu.core.common import errors, names
from raytpu.core.specs import workload_fields

SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")


@dataclass(frozen=True, kw_only=True)
class JobLimits:
    """Bounds on an unattended RayJob (every wait is bounded).

    Attributes:
        active_deadline_s: How long the job may run once its pods run: its ``activeDeadlineSeconds`` is this plus
            its ``preRunningDeadlineSeconds`` (KubeRay counts both from the RayJob's start). Default 3600.
        pre_running_deadline_s: Fail a job still not running after this long, e.g. waiting for TPU
            capacity (``preRunningDeadlineSeconds``; a run on spot or flex-start waits its whole
            ``active_deadline_s``: :func:`raytpu.core.manifests.preemption.pre_running_deadline_s`). Default 1800.
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
        errors.raise_found(self.problems())

    def problems(self) -> list[errors.InvalidInput]:
        """Every bad limit, so one pass reports them all."""
        found: list[errors.InvalidInput] = []
        if self.submission_mode not in SUBMISSION_MODES:
            found.append(errors.invalid_choice("submission_mode", self.submission_mode, SUBMISSION_MODES))
        found += [errors.invalid_value(name, getattr(self, name), "is below 1", "seconds >= 1")
                  for name in ("active_deadline_s", "pre_running_deadline_s") if getattr(self, name) < 1]
        found += [errors.invalid_value(name, getattr(self, name), "is negative", "a whole number >= 0")
                  for name in ("ttl_s", "backoff_limit") if getattr(self, name) < 0]
        if self.backoff_limit > 0 and self.submission_mode == "InteractiveMode":
            # Source: KubeRay v1.7.0 utils/validation.go ValidateRayJobSpec ("incompatible with InteractiveMode")
            found.append(errors.forbidden("backoff_limit", self.backoff_limit, "with submission_mode InteractiveMode",
                                          "0, or another submission_mode"))
        return found


@dataclass(frozen=True)
class WorkloadKind:
    """One workload kind.

    Attributes:
        name: What ``raytpu.yaml`` says (``train``).
        program: Its module, ``raytpu.workloads.<program>``.
        object_kind: ``RayJob`` (one-shot: runs ``python -m raytpu.workloads.<program>``) or ``RayService``.
        limits: Bounds of a RayJob; None for a RayService.
        takes_model: The workload runs a model on vLLM (``workloads[].model`` and the other serving fields apply, by
            the serving rules): as a RayService (``serve``) or as a one-shot job (``batch``).
        spans_slices: One run may span several slices joined over DCN (``workloads[].slices: N``: multi-slice
            training, :mod:`raytpu.core.specs.slices.multislice`); other kinds treat ``slices`` as independent copies.
        trains: Its program trains: each run gets its own checkpoint storage and name (:meth:`run_args`), and the
            emulated slice is its slice by default (``raytpu local up``).
        checks: Its program checks slices and prints verdicts (``raytpu smoke`` runs it on every slice; the image a
            slice's workload of this kind names is the one the slice's smoke jobs run; ``submit`` fails on an
            unhealthy verdict). ``submit`` refuses any RayJob whose copies another workload holds.
        code_entry: The field that names a team's code in ``code`` (:mod:`raytpu.core.specs.runtime.user_code`):
            ``train_loop`` (optional: without it the kit's own trainer runs) or ``entrypoint`` (required: the team's own
            driver, run instead of a program of the kit's) or ``serve_app`` (optional: a team's own Ray Serve app
            instead of the kit's LLM app, :mod:`raytpu.core.specs.serving.serve_app`); None: the kind runs the kit's
            program only.

    Its default image is the kit's image listing it (:data:`raytpu.images.definitions.IMAGES`), which carries
    everything its program imports.
    """

    name: str
    program: str | None
    object_kind: Literal["RayJob", "RayService"]
    limits: JobLimits | None = None
    takes_model: bool = False
    spans_slices: bool = False
    trains: bool = False
    checks: bool = False
    code_entry: Literal["train_loop", "entrypoint", "serve_app"] | None = None

    @property
    def module(self) -> str:
        """The program's import path (a kind that runs only a team's entrypoint has none)."""
        assert self.program is not None, f"kind {self.name} runs a team's entrypoint, not a program of the kit"
        return f"raytpu.workloads.{self.program}"

    @property
    def runs_entrypoint(self) -> bool:
        """Its RayJob runs the team's ``entrypoint`` (``kind: job``), not a program of the kit's."""
        return self.code_entry == "entrypoint"

    @property
    def serves(self) -> bool:
        """It serves a model behind an endpoint (a RayService that takes a model)."""
        return self.takes_model and not self.is_job

    @property
    def batches(self) -> bool:
        """It runs a model over a dataset offline (a RayJob that takes a model: input in, output out)."""
        return self.takes_model and self.is_job

    @property
    def is_job(self) -> bool:
        """A one-shot RayJob (as opposed to a long-lived RayService)."""
        return self.object_kind == "RayJob"

    def run_args(self, run_name: str, mount_path: str = names.GCS_MOUNT_PATH, team: str | None = None) -> list[str]:
        """Per-run flags of the program (none unless it :attr:`trains`): Ray Train storage under the bucket's GCS
        FUSE mount, a run name of its own.

        ``<mount>/checkpoints`` is a local path to Ray Train (pyarrow's LocalFileSystem), so the run's directory
        ``<mount>/checkpoints/<run_name>`` is :func:`raytpu.core.common.names.checkpoint_uri` in the bucket, written by
        the FUSE driver with the pod's ``roles/storage.objectUser``. A ``gs://`` storage path would go through pyarrow's
        GcsFileSystem instead (Ray 2.60 ``ray.train.v2._internal.execution.storage.get_fs_and_path``,
        ``FileSystem.from_uri``), whose directory creation reads the bucket's metadata (apache/arrow
        ``cpp/src/arrow/filesystem/gcsfs.cc``, ``CreateDirMarkerRecursive`` -> ``GetBucketMetadata``):
        ``storage.buckets.get``, which that role lacks. Ray's KubeRay guide checkpoints the same way, under the mount:
        https://docs.ray.io/en/latest/cluster/kubernetes/examples/distributed-checkpointing-with-gcsfuse.html
        """
        storage = f"{mount_path}/{names.checkpoints_folder(team)}"
        return ["--storage-path", storage, "--name", run_name] if self.trains else []


KINDS: dict[str, WorkloadKind] = {k.name: k for k in (
    WorkloadKind("smoke", "smoke", "RayJob",
                 JobLimits(active_deadline_s=1800, pre_running_deadline_s=1200, ttl_s=300), checks=True),
    WorkloadKind("train", "train", "RayJob",
                 JobLimits(active_deadline_s=24 * 3600, pre_running_deadline_s=3600, ttl_s=600),
                 spans_slices=True, trains=True, code_entry="train_loop"),
    # a team's own Ray driver on its slice(s): `entrypoint` runs in the `code` folder, the slice in RAYTPU_* env
    WorkloadKind("job", None, "RayJob",
                 JobLimits(active_deadline_s=24 * 3600, pre_running_deadline_s=3600, ttl_s=600),
                 spans_slices=True, code_entry="entrypoint"),
    WorkloadKind("serve", "serve", "RayService", takes_model=True, code_entry="serve_app"),
    # offline batch inference (Ray Data LLM's vLLM engine processor): input and output paths, one host
    WorkloadKind("batch", "batch", "RayJob",
                 JobLimits(active_deadline_s=12 * 3600, pre_running_deadline_s=3600, ttl_s=600), takes_model=True),
)}
"""Every kind, by name."""

NAMES: tuple[str, ...] = tuple(KINDS)


NO_RUN_DEADLINE = "unlimited"
"""``run_time_s: unlimited``: a train or job RayJob without ``activeDeadlineSeconds``, e.g. a multi-day pretrain."""
UNBOUNDED_KINDS = ("train", "job")
MAX_RUN_TIME_S = 365 * 24 * 3600
"""A year: the RayJob's ``activeDeadlineSeconds`` (run time plus waits) stays an int32.
Source: KubeRay v1.7.0 ray.io_rayjobs.yaml (spec.activeDeadlineSeconds format int32)."""


def run_time_problems(of: WorkloadKind, run_time_s: object) -> list[errors.InvalidInput]:
    """``workloads[].run_time_s``: seconds a RayJob may run once up (None: its kind's), or ``unlimited`` for train/job.
    Source: KubeRay v1.7.0 checkActiveDeadlineAndUpdateStatusIfNeeded (Failed/DeadlineExceeded, cluster deleted)."""
    if run_time_s is None:
        return []
    if not workload_fields.takes(of.name, "run_time_s") or of.limits is None:
        return [workload_fields.refusal("run_time_s", run_time_s, of.name)]
    if run_time_s == NO_RUN_DEADLINE:
        return [] if of.name in UNBOUNDED_KINDS else [errors.forbidden(
            "run_time_s", run_time_s, f"for kind {of.name} (an unattended {of.name} run stays bounded)",
            f"seconds from 1 to {MAX_RUN_TIME_S}")]
    if isinstance(run_time_s, bool) or not isinstance(run_time_s, int) or not 1 <= run_time_s <= MAX_RUN_TIME_S:
        no_limit = f", or {NO_RUN_DEADLINE}" if of.name in UNBOUNDED_KINDS else ""
        return [errors.invalid_value("run_time_s", run_time_s, "is not a whole number of seconds in range",
                                     f"seconds from 1 to {MAX_RUN_TIME_S} (default {of.limits.active_deadline_s})"
                                     f"{no_limit}")]
    return []


RETRYING_KINDS = workload_fields.taking("retries")
"""Kinds that take ``retries`` (why the others refuse it: :func:`retries_problems`, docs/FACTS.md#kuberay-retries)."""
MAX_RETRIES = 10
"""Each retry is a whole new RayCluster with the full deadlines (docs/FACTS.md#kuberay-retries): 10 is twice a train
run's preemption budget (``preemption.MAX_PREEMPTIONS``) and bounds a driver failing for good to 11 times its
slice-hours."""


def retries_problems(of: WorkloadKind, retries: object) -> list[errors.InvalidInput]:
    """``workloads[].retries``: whole new attempts of a ``kind: job`` RayJob after a failure (its ``backoffLimit``).
    Source: KubeRay v1.7.0 checkBackoffLimitAndUpdateStatusIfNeeded (Retrying while failed < backoffLimit + 1)."""
    if retries is None:
        return []
    if not workload_fields.takes(of.name, "retries"):
        return [workload_fields.refusal("retries", retries, of.name)]
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        return [errors.invalid_value("retries", retries, "is not a whole number in range",
                                     f"a whole number from 0 to {MAX_RETRIES} (default 0: no retry)")]
    return []


def kind(name: str, field: str = "kind") -> WorkloadKind:
    """The kind called ``name``; InvalidInput listing the kinds otherwise. Public API: ``from raytpu import kind``."""
    try:
        return KINDS[name]
    except KeyError as exc:
        raise errors.invalid_choice(field, name, NAMES) from exc
