"""Multi-slice training: one job on N whole slices of one kind, joined by the data-centre network (DCN).
Its rules and the builders' numbers (docs/FACTS.md#ray-train-multislice, docs/FACTS.md#ray-train-multislice-layout).
Stdlib and the core only (the spec layer imports it).
Source: https://cloud.google.com/tpu/docs/tpu-gke-multislice"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.serving.vllm_rules import ray_serve_chips_per_host
from raytpu.core.tpu.catalog import RAY_VERSION
from raytpu.core.tpu.plan import SlicePlan


class SpanningWork(Protocol):
    """What :func:`widest` reads of a workload; a protocol, so this module does not import the spec."""

    @property
    def name(self) -> str: ...
    @property
    def multislice(self) -> bool: ...
    @property
    def slices_per_run(self) -> int: ...

GKE_DOCS = "https://cloud.google.com/tpu/docs/tpu-gke-multislice"

MIN_GKE_VERSION = {"standard": "1.27.4-gke.900", "autopilot": "1.29.2-gke.1521000"}
"""Oldest GKE version that runs Multislice, per cluster mode; below the Ray Operator add-on's floor
(docs/FACTS.md#ray-train-multislice-layout)."""

NUM_SLICES_ENV = "MEGASCALE_NUM_SLICES"
"""The env var whose presence makes GKE's TPU webhook inject the other ``MEGASCALE_*`` per replica [Webhook]."""
WEBHOOK_INJECTED_ENV = ("MEGASCALE_SLICE_ID", "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_PORT")
"""What the webhook then adds to each TPU container [Webhook]."""
MEGASCALE_PORT = 8081
"""The DCN coordinator's port. Source: Ray 2.60 ``ray._private.accelerators.tpu.DEFAULT_MEGASCALE_PORT``."""
MEGASCALE_ENV = (NUM_SLICES_ENV, *WEBHOOK_INJECTED_ENV)
"""Every ``MEGASCALE_*`` a multi-slice pod carries; libtpu waits for that many slices when it starts.
Source: Ray 2.60 ``ray.train.v2.jax.config._JAX_MULTISLICE_OVERRIDE_KEYS``."""


def single_slice(env: MutableMapping[str, str]) -> list[str]:
    """Removes the :data:`MEGASCALE_ENV` keys from ``env`` so a one-slice check starts libtpu alone; the keys removed.
    A ``runtime_env`` cannot unset variables (docs/FACTS.md#ray-train-multislice-layout)."""
    return [key for key in MEGASCALE_ENV if env.pop(key, None) is not None]


def slice_env(slices: int) -> dict[str, str]:
    """The worker env a job spanning ``slices`` slices sets (none for one slice)."""
    return {NUM_SLICES_ENV: str(slices)} if slices > 1 else {}


def widest(workloads: Iterable[SpanningWork]) -> tuple[int, str | None]:
    """How many slices one run of ``workloads`` spans at most, and the workload (last by name among equals);
    ``(1, None)`` when none spans several. The one source of ``--dcn-slices``."""
    return max(((w.slices_per_run, w.name) for w in workloads if w.multislice), default=(1, None))


def reservation_waits(plan: SlicePlan, slices: int) -> int:
    """How many waits of ``RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S`` one Ray Train attempt makes to place the slices.
    Source: Ray 2.60 ``SlicePlacementGroup._reserve_slice``, ``WorkerGroup._start_impl``
    (docs/FACTS.md#preemption-restart-waits, docs/FACTS.md#ray-train-multislice-layout)."""
    ray_multi_host = plan.chips > ray_serve_chips_per_host(plan)
    return (slices if ray_multi_host else 0) + 1


def problems(plan: SlicePlan, slices: int, field: str = "slices", *,
             pins_each_slice: bool = False) -> list[InvalidInput]:
    """Why one job cannot span ``slices`` slices of ``plan`` (none for ``slices <= 1``). ``pins_each_slice``: the
    kit reserves every slice itself, by slice name and worker id (``run_on: every_host``), not through Ray Train's
    SlicePlacementGroup, so Ray's own idea of the slice's hosts does not matter."""
    if slices <= 1:
        return []
    shape = f"{plan.generation} {plan.topology} on {plan.hosts} x {plan.machine_type}"
    if plan.single_host:
        return [errors.invalid_value(
            field, slices, f"spans several slices of a single-host slice ({shape}); GKE Multislice runs only on "
            f"multi-host TPU slice node pools ({GKE_DOCS})",
            "slices: 1 (or leave it unset), or a multi-host slice such as v6e 4x4 or v5p 2x2x2")]
    ray_chips = ray_serve_chips_per_host(plan)
    if ray_chips != plan.chips_per_host and not pins_each_slice:
        return [errors.invalid_value(
            field, slices, f"cannot be reserved slice by slice by Ray {RAY_VERSION}: it takes a {plan.generation} "
            f"{plan.topology} for one host of {ray_chips} chips (ray._private.accelerators.tpu.get_chips_per_host), "
            f"not the {plan.hosts} hosts of {plan.chips_per_host} chips this slice has, so SlicePlacementGroup "
            "holds no slice head and pins no slice name: the workers could spread over parts of several slices and "
            "MEGASCALE_SLICE_ID would not match the slice a worker runs on",
            "slices: 1 (one such slice is pinned whole by the kit), or a larger topology such as "
            f"{plan.generation} 4x4")]
    return []
