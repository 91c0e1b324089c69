"""Slice planning: (generation, topology, machine type) -> the SlicePlan that pools, KubeRay groups, JaxTrainer,
Serve and the smoke check read. Standard library only."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.catalog import (
    MULTI_HOST_CHIPS_PER_VM,
    Generation,
    MachineType,
    chips_in,
    generation,
    offered_topology,
)

Placement = Literal["none", "compact", "workload-policy"]

ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"

RAY_ACCELERATOR_LABEL = "ray.io/accelerator-type"
RAY_SLICE_LABEL = "ray.io/tpu-slice-name"
RAY_WORKER_LABEL = "ray.io/tpu-worker-id"
RAY_TOPOLOGY_LABEL = "ray.io/tpu-topology"
RAY_POD_TYPE_LABEL = "ray.io/tpu-pod-type"


@dataclass(frozen=True)
class SlicePlan:
    """Everything derived from one slice shape. Field names are the CLI's JSON keys.
    ``hosts`` is KubeRay's ``numOfHosts`` and the pool's ``node_count``; ``ray_reservable``: the pinned Ray can
    reserve the shape as one slice (GKE provisions some it cannot, e.g. v5p 4x4x28)."""

    generation: str
    topology: str
    machine_type: str
    gke_accelerator: str
    hosts: int
    chips_per_host: int
    chips: int
    single_host: bool
    placement: Placement
    ray_accelerator_type: str
    ray_pod_type: str
    ray_reservable: bool
    hbm_gib_per_chip: float
    peak_bf16_tflops_per_chip: float
    node_selector: dict[str, str] = field(hash=False)

    @property
    def head_resource(self) -> str:
        """The Ray resource only worker 0 of a slice carries (``TPU-v6e-16-head``)."""
        return f"TPU-{self.ray_pod_type}-head"

    @property
    def gke_accelerator_type(self) -> str:
        """What GKE puts in ``TPU_ACCELERATOR_TYPE`` (``v6e-16``; ``tpu7x-8`` for Ironwood)."""
        gen = generation(self.generation)
        return f"{gen.gke_pod_prefix}-{self.ray_pod_type.rsplit('-', 1)[1]}"

    def ray_labels(self, slice_name: str, worker_id: int) -> dict[str, str]:
        """The ``ray.io/*`` node labels Ray's TPU detection gives host ``worker_id`` of slice ``slice_name``."""
        return {
            RAY_ACCELERATOR_LABEL: self.ray_accelerator_type,
            RAY_SLICE_LABEL: slice_name,
            RAY_WORKER_LABEL: str(worker_id),
            RAY_TOPOLOGY_LABEL: self.topology,
            RAY_POD_TYPE_LABEL: self.ray_pod_type,
        }

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (``raytpu describe --json``, stack outputs)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SlicePlan:
        """Inverse of :meth:`to_json` (workloads read plans from stack outputs or env)."""
        return cls(**data)


def plan_slice(generation_name: str, topology: str, machine_type: str | None = None,
               field_prefix: str = "") -> SlicePlan:
    """Plans one slice, or raises InvalidInput naming the field (``field_prefix``: ``slices[0].``) that makes it
    impossible. ``machine_type`` defaults to the one VM that carries the topology, else the 4-chip VM."""
    gen = generation(generation_name, f"{field_prefix}generation")
    offered_topology(gen, topology, f"{field_prefix}topology")
    chips = chips_in(topology)
    machine = _machine_for(gen, topology, chips, machine_type, f"{field_prefix}machine_type")
    hosts = max(chips // machine.chips, 1)
    single_host = hosts == 1
    placement: Placement = "none" if single_host else gen.multi_host_placement  # type: ignore[assignment]
    cores = chips * gen.tensorcores_per_chip
    return SlicePlan(
        generation=gen.name,
        topology=topology,
        machine_type=machine.name,
        gke_accelerator=gen.gke_accelerator,
        hosts=hosts,
        chips_per_host=machine.chips,
        chips=chips,
        single_host=single_host,
        placement=placement,
        ray_accelerator_type=gen.ray_accelerator_type,
        ray_pod_type=f"{gen.ray_pod_prefix}-{cores}",
        ray_reservable=topology in gen.ray_topologies,
        hbm_gib_per_chip=gen.hbm_gib_per_chip,
        peak_bf16_tflops_per_chip=gen.peak_bf16_tflops_per_chip,
        node_selector={ACCELERATOR_LABEL: gen.gke_accelerator, TOPOLOGY_LABEL: topology},
    )


def machine_types_for(gen: Generation, topology: str) -> list[MachineType]:
    """The machine types that can form ``topology``: its single VM, or 4-chip VMs."""
    chips = chips_in(topology)
    fits = [m for m in gen.machine_types if m.chips == chips]
    if chips > MULTI_HOST_CHIPS_PER_VM and chips % MULTI_HOST_CHIPS_PER_VM == 0:
        fits.append(gen.multi_host_machine_type)
    return sorted(set(fits), key=lambda m: -m.chips)


def _machine_for(gen: Generation, topology: str, chips: int, requested: str | None,
                 field: str) -> MachineType:
    candidates = machine_types_for(gen, topology)
    if requested is None:
        return candidates[0]
    machine = gen.machine_type(requested, field)
    if machine not in candidates:
        raise InvalidInput(
            field,
            f"{requested!r} ({machine.chips} chips per VM) cannot form {gen.name} {topology} ({chips} chips)",
            ", ".join(m.name for m in candidates),
        )
    return machine
