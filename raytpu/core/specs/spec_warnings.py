"""The config's warnings: what ``raytpu validate`` (and ``submit``, for its workload) says on stderr with exit 0, beside
the errors the specs raise. A warning, not an error, where the kit's knowledge may be behind (the zone lists, GKE's
limits) or a choice may be deliberate (a RayService on flex-start capacity). Two rules read what the core cannot (a
model's fit reads :mod:`raytpu.sizing`; a job's driver file, :mod:`raytpu.teamcode.checks`): the caller passes them."""

from __future__ import annotations

from collections.abc import Callable

from raytpu.core.specs.cluster.grants import path_warnings
from raytpu.core.specs.runtime.run_env import secret_like_warnings
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec

WorkloadRule = Callable[[str, WorkloadSpec], list[str]]
"""A warning rule of one workload, given its config path (``workloads[2]``)."""


def _none(_prefix: str, _work: WorkloadSpec) -> list[str]:
    return []


def config_warnings(spec: ClusterSpec, fit: WorkloadRule = _none, head: WorkloadRule = _none) -> list[str]:
    """Every warning of ``spec``, in the order ``validate`` prints them (each a ``<field>: ...`` line): the security
    settings that open something, each slice's zone, then per workload ``fit`` (its model on its slice), its serving,
    deadline and disk rules, ``head`` (its driver's imports) and its secret-like ``env`` names, and a job on a slice a
    RayService holds whole; last, the ``gs://`` paths no grant covers."""
    out = list(spec.security.warnings())
    for i, item in enumerate(spec.slices):
        out.extend(f"slices[{i}].zone: {line}" for line in zone_warnings(item))
    held = served_copies(spec)
    for i, work in enumerate(spec.workloads):
        prefix = f"workloads[{i}]"
        out.extend([*fit(prefix, work), *serving_warnings(spec, work), *deadline_warnings(work),
                    *disk_warnings(spec, work), *head(prefix, work), *secret_like_warnings(prefix, work.env)])
        if work.kind.is_job and work.slice.name in held:
            out.append(f"workloads.{work.name}: every copy of slice {work.slice.name} is held by "
                       f"{held[work.slice.name]}; its RayJob's pods would stay Pending (google.com/tpu is an extended "
                       "resource: a chip is never shared), so `raytpu submit` refuses while they hold it; give the job "
                       "its own slice, or run `raytpu smoke`, which skips held copies as busy")
    return [*out, *path_warnings(spec)]


def zone_warnings(item: SliceSpec) -> list[str]:
    """Where Google does not document the slice's generation (or, flex-start, its generation under flex-start) in
    the slice's zone: :data:`raytpu.core.tpu.catalog.OFFERED`. A warning, not an error: the lists move (see there)."""
    from raytpu.core.tpu.catalog import OFFERED

    return OFFERED.warnings(item.plan.generation, _modes(item), item.zone)


def _modes(item: SliceSpec) -> tuple[str, ...]:
    """The provisioning modes a slice may run on: its own, then its fallbacks."""
    return (item.provisioning.name, *(m.name for m in item.fallback))


def served_copies(spec: ClusterSpec) -> dict[str, str]:
    """Slices whose every copy a RayService holds (its workers request all their hosts' chips for as long as it
    runs), with the services that hold them. A RayService spans all copies of its slice, or ``slices`` of them."""
    holders: dict[str, list[str]] = {}
    copies: dict[str, int] = {}
    for work in spec.workloads:
        if not work.kind.is_job:
            holders.setdefault(work.slice.name, []).append(f"RayService {work.name!r}")
            copies[work.slice.name] = copies.get(work.slice.name, 0) + work.slices_spanned
    return {name: ", ".join(who) for name, who in holders.items() if copies[name] >= spec.slice_named(name).count}


def serving_warnings(spec: ClusterSpec, work: WorkloadSpec) -> list[str]:
    """A RayService where it would go down: on flex-start capacity or a slice with a run duration, which GKE takes
    back then. (Weights in a bucket no grant covers: :func:`raytpu.core.specs.cluster.grants.path_warnings`.)"""
    from raytpu.core.specs.slices.provisioning import MAX_RUN_DURATION_S

    if work.kind.is_job:
        return []
    out = []
    item = work.slice
    if "flex-start" in _modes(item):
        # Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws (flex-start nodes run at most 7 days)
        ends = item.max_run_duration_s or MAX_RUN_DURATION_S[1]
        out.append(f"workloads.{work.name}: serves from slice {item.name}, which may run on flex-start capacity: GKE "
                   f"deletes flex-start nodes when their run duration ends ({ends} s), so the RayService goes down "
                   "and waits for new capacity; serve from on-demand, spot or a reservation")
    elif item.max_run_duration_s is not None:
        out.append(f"workloads.{work.name}: serves from slice {item.name}, whose nodes end at its max_run_duration_s "
                   f"({item.max_run_duration_s} s), so the RayService goes down then and waits for new nodes; "
                   f"remove max_run_duration_s from slice {item.name} for a long-lived service")
    return out


def deadline_warnings(work: WorkloadSpec) -> list[str]:
    """A RayJob whose deadline (``activeDeadlineSeconds``) outlasts its flex-start slice's ``max_run_duration_s``:
    GKE deletes the nodes at the run duration, so a job that takes its time is cut before its deadline.
    Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws (nodes removed at maxRunDurationSeconds)."""
    item, run_s = work.slice, work.run_deadline_s
    ends = item.max_run_duration_s
    if not work.kind.is_job or ends is None or "flex-start" not in _modes(item):
        return []
    if run_s is not None and run_s <= ends:
        return []
    runs = f"{run_s} s (activeDeadlineSeconds) or more" if run_s else "with no deadline (run_time_s: unlimited)"
    return [f"workloads.{work.name}: its RayJob may run {runs} once its slice is up, past slice {item.name}'s "
            f"flex-start max_run_duration_s {ends}: GKE deletes the nodes at {ends} s and cuts the job; raise "
            f"slices[].max_run_duration_s to at least {run_s or 'its run time'}, or run it on on-demand, spot or a "
            "reservation"]


def disk_warnings(spec: ClusterSpec, work: WorkloadSpec) -> list[str]:
    """On Autopilot, an engine whose ephemeral-storage request is more than a default Standard node would hold:
    GKE refuses a request above its maximum, which the sources the kit read do not state for TPU pods."""
    from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB
    from raytpu.core.specs.serving import node_disk

    need = node_disk.engine_disk(work, spec.bucket)
    if not spec.cluster.autopilot or need is None or need.need_gib <= node_disk.allocatable_gib(DEFAULT_DISK_SIZE_GIB):
        return []
    fix = "" if need.batch else f"; or serve it from gs://{spec.bucket}/PATH (read in place, no download)"
    return [f"workloads.{work.name}: its TPU pods request {need.request} of ephemeral storage ({need.model}'s "
            f"{need.weights_gib:,.1f} GiB of weights, downloaded to every host, + Ray's files); Autopilot refuses a "
            "request above its maximum for the pod's hardware, which the kit could not find stated for TPU pods: if "
            f"GKE refuses the pods, run the workload on a Standard cluster, whose boot disk the kit sizes{fix}"]
