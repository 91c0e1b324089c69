"""What both trainers on the slice share (the kit's, :mod:`raytpu.workloads.train`, and a team's ``train_loop``,
:mod:`raytpu.workloads.support.team_train`): the workers' scaling, pinning them to a whole slice, the ``ray_joined``
stamp and the compile verdict. Its own module, so neither trainer imports the other's module back."""

from __future__ import annotations

import sys
from typing import Any

from raytpu.core.common.timeline import stamp, stamp_line
from raytpu.core.specs.runtime import compile_cache
from raytpu.core.tpu.plan import SlicePlan

PIN_NOTICE = "reserving a whole slice"
"""Begins the stderr line the driver prints before it waits for a slice to pin its workers to."""


def ray_assumed_hosts(plan: SlicePlan) -> int:
    """Hosts per slice that Ray 2.60's slice reservation derives from ``plan``'s topology alone (every v5e/v6e topology
    of up to 8 chips is one host there). Source: Ray 2.60 ``ray.util.tpu.get_tpu_worker_resources``
    (docs/FACTS.md#ray-tpu-slices).
    """
    from ray.util.tpu import get_tpu_worker_resources

    hosts, _ = get_tpu_worker_resources(plan.topology, plan.ray_accelerator_type)
    return hosts


def start_autoscaling_coordinator() -> None:
    """Starts Ray's autoscaling coordinator (a detached actor, once per cluster) without waiting for it: Ray Train's
    controller blocks on it before it places any worker, so on a fresh cluster whose head starts two workers at once
    (the emulated one) its process starts beside the controller's instead of after it. A head with ``num-cpus: 0``
    (GKE's) starts one at a time: there it gains nothing and costs nothing. A failure is only a lost speed-up (the
    controller makes it anyway), so nothing raises. Source: Ray 2.60 ``ScalingPolicy.after_controller_start``,
    ``get_or_create_autoscaling_coordinator``, ``services.start_raylet`` (``maximum_startup_concurrency``)."""
    try:
        from ray.data._internal.cluster_autoscaler import get_or_create_autoscaling_coordinator

        get_or_create_autoscaling_coordinator()
    except Exception as exc:  # an import or GCS error: Ray Train makes the coordinator itself
        print(f"train: Ray's autoscaling coordinator not started ahead ({type(exc).__name__}); Ray Train starts it",
              file=sys.stderr, flush=True)


def scaling_config(plan: SlicePlan, slice_name: str | None = None, slices: int = 1) -> Any:
    """JaxTrainer's ScalingConfig for ``slices`` whole slices of ``plan``: one worker per host, all its chips; with
    ``slice_name``, every worker also takes that slice's own resource, so all land on it. Source: Ray 2.60
    ``TPUAcceleratorManager.get_current_node_additional_resources`` (docs/FACTS.md#ray-tpu-slices).
    """
    from ray.train.v2.api.config import ScalingConfig

    resources = {"TPU": plan.chips_per_host, "CPU": 1} | ({slice_name: 1} if slice_name else {})
    return ScalingConfig(use_tpu=True, topology=plan.topology, accelerator_type=plan.ray_accelerator_type,
                         num_workers=plan.hosts * slices, resources_per_worker=resources)


def reserve_for_pinning(plan: SlicePlan, timeout_s: float) -> Any:
    """Holds a whole, idle slice of ``plan`` for the workers to be pinned to, its head kept so other reservations skip
    it (docs/FACTS.md#ray-tpu-slices); ``release()`` it after the run. TimeoutError when none is free within
    ``timeout_s``.
    """
    from raytpu.workloads.support.slices import reserve_slice

    held = reserve_slice(plan, timeout_s=timeout_s)
    held.handle.shutdown()  # the hosts' TPUs go to the workers' placement group; the head pg stays
    return held


def stamp_joined(plan: SlicePlan) -> None:
    """Prints the ``ray_joined`` stamp (:mod:`raytpu.core.common.timeline`) when a whole slice of ``plan`` is alive as
    the driver starts (on GKE KubeRay starts the driver once the cluster's pods are ready, so it usually is)."""
    from raytpu.workloads.support.slices import inventory

    try:
        complete = [inv for inv in inventory(plan).values() if inv.complete]
    except Exception as exc:  # the timeline is a report: a failed look must not fail the training
        print(f"train: timeline: could not list the slices ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
        return
    if complete:
        print(stamp_line(stamp("ray_joined", f"{len(complete)} whole {plan.ray_pod_type} slice(s) alive as the "
                                             f"driver started ({', '.join(inv.name for inv in complete)})")),
              flush=True)


def compile_verdict(compile: dict[str, Any] | None, budget_s: float | None) -> dict[str, Any]:
    """The summary's ``compile_over_budget`` (and a ``compile_warning`` line) when the start compiled for longer than
    the workload's ``compile_budget_s``: a run that suddenly compiles everything again is seen."""
    if compile is None or budget_s is None:
        return {}
    longest = compile_cache.longest(compile)  # the host that compiled longest: the first step waits for it
    over = compile_cache.over_budget(longest.get("s"), budget_s)
    found: dict[str, Any] = {"compile_budget_s": budget_s, "compile_over_budget": over}
    if over:
        found["compile_warning"] = (f"compile {longest['s']:.1f}s exceeds compile_budget_s {budget_s:g}s "
                                    f"({longest.get('hits', 0)} cache hit(s), {longest.get('misses', 0)} miss(es))")
        print(f"train: warning: {found['compile_warning']}", file=sys.stderr, flush=True)
    return found
