"""The one TPU catalog: every fact about a TPU generation on GKE, as cited tables; no TPU literal appears elsewhere.
``topologies`` is what GKE provisions as one slice, ``ray_topologies`` what the pinned Ray reserves as one (a test
checks it against Ray's table). Standard library only: ``describe`` imports it.
Source: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus (evidence:
docs/FACTS.md#tpu-catalog-evidence)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from raytpu.core.common.errors import InvalidInput, invalid_choice
from raytpu.core.tpu.ici import SliceICI, ici_expected

RAY_VERSION = "2.60.0"
"""The one Ray version of the kit: whose TPU tables ``ray_topologies`` copies, what images pin, ``spec.rayVersion``."""

RAY_OPERATOR_MIN_GKE_VERSION = "1.30.0-gke.1747000"
"""Oldest GKE version with the Ray Operator add-on: the floor of every cluster the kit makes."""

MULTI_HOST_CHIPS_PER_VM = 4
"""GKE multi-host TPU node pools are built from 4-chip VMs, whatever the generation."""


@dataclass(frozen=True)
class MachineType:
    """A GCE machine type that carries TPU chips, as a GKE node has them (``vcpus``: the kubelet's, SMT off on some).
    Source: cluster-autoscaler ``NewMachineTypeInfo`` and ``gcloud compute machine-types list``
    (docs/FACTS.md#tpu-catalog-machine-types)."""

    name: str
    chips: int
    vcpus: int
    memory_gib: int
    network_gbps: float | None = None
    """The VM's DCN line rate, Gbps; None: unpublished (the smoke check assumes 25 GB/s per host).
    Source: https://cloud.google.com/compute/docs/accelerator-optimized-machines ("Maximum network bandwidth")."""

    @property
    def allocatable_cpu_m(self) -> int:
        """Millicores GKE leaves to pods: 6%, 1%, 0.5% x2, then 0.25% per core reserved (<= 110 pods: no 400m).
        Source: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes"""
        reserved = _tiered(self.vcpus * 1000, ((1000, 0.06), (1000, 0.01), (2000, 0.005), (None, 0.0025)))
        return self.vcpus * 1000 - int(reserved + 0.999)

    @property
    def allocatable_memory_mib(self) -> int:
        """MiB GKE leaves to pods: 25/20/10/6/2% tiers (4, 4, 8, 112 GiB, rest) reserved, less 100 MiB eviction."""
        total = self.memory_gib * 1024
        reserved = _tiered(total, ((4096, 0.25), (4096, 0.20), (8192, 0.10), (114688, 0.06), (None, 0.02)))
        return total - int(reserved + 0.999) - 100


def _tiered(amount: float, tiers: tuple[tuple[float | None, float], ...]) -> float:
    """The sum of ``rate`` x the part of ``amount`` in each consecutive tier of ``size`` (None: the rest)."""
    total, left = 0.0, amount
    for size, rate in tiers:
        part = left if size is None else min(left, size)
        total, left = total + part * rate, left - part
    return total


@dataclass(frozen=True)
class SmokeFloors:
    """What a healthy device reaches in the smoke check, as fractions of the catalog's figures.
    Each floor sits above one half, so a device at half speed fails; what each measures:
    docs/FACTS.md#tpu-catalog-fields.
    Source: JAX's Pallas TPU matmul guide, AI-Hypercomputer/accelerator-microbenchmarks
    (docs/FACTS.md#measurements-smoke-floors)."""

    matmul_of_peak: float
    hbm_of_spec: float
    busbw_of_expected: float = 0.5
    dcn_of_line_rate: float = 0.5
    """The DCN check's floor: a host's cross-slice all-reduce bus bandwidth over its line rate
    (docs/FACTS.md#tpu-catalog-fields)."""


@dataclass(frozen=True)
class Generation:
    """One TPU generation as GKE and Ray see it; each field's meaning and source: docs/FACTS.md#tpu-catalog-fields.
    ``name`` is what users write (``v6e``); ``ici_link_gbps`` feeds :func:`expected_busbw`; ``jax_device_kinds`` is
    libtpu's ``device_kind``. Source: jax-ml/scaling-book ``tpus.md``; jax 0.10.2 ``jax._src.mesh_utils``."""

    name: str
    gke_accelerator: str
    machine_types: tuple[MachineType, ...]
    mesh_dims: int
    topologies: tuple[str, ...]
    ray_topologies: tuple[str, ...]
    hbm_gib_per_chip: float
    hbm_gbps_per_chip: float
    ici_gbps_per_chip: float | None
    ici_link_gbps: float | None
    peak_bf16_tflops_per_chip: float
    tensorcores_per_chip: int
    ray_accelerator_type: str
    ray_pod_prefix: str
    gke_pod_prefix: str
    multi_host_placement: str
    min_gke_version: str = RAY_OPERATOR_MIN_GKE_VERSION
    min_gke_version_autopilot: str | None = None
    zones: tuple[str, ...] = ()
    jax_device_kinds: tuple[str, ...] = ()
    smoke: SmokeFloors | None = None

    def min_gke_version_for(self, mode: str) -> str:
        """Oldest GKE version that schedules this generation in cluster ``mode`` (standard|autopilot)."""
        if mode == "autopilot" and self.min_gke_version_autopilot:
            return self.min_gke_version_autopilot
        return self.min_gke_version

    @property
    def multi_host_machine_type(self) -> MachineType:
        """The 4-chip VM that multi-host slices are made of."""
        return next(m for m in self.machine_types if m.chips == MULTI_HOST_CHIPS_PER_VM)

    def machine_type(self, name: str, field: str = "machine_type") -> MachineType:
        """Looks a machine type up by name; raises InvalidInput listing this generation's."""
        for machine in self.machine_types:
            if machine.name == name:
                return machine
        raise invalid_choice(field, name, (m.name for m in self.machine_types), f" for {self.name}")

    @cached_property
    def single_host_topologies(self) -> dict[str, MachineType]:
        """Topologies one VM carries, mapped to that VM's machine type."""
        return {_single_host_shape(self.mesh_dims, m.chips): m for m in self.machine_types}

    def nearest_ray_topologies(self, topology: str, count: int = 3) -> list[str]:
        """The shapes GKE provisions and Ray reserves closest in chip count to ``topology`` (for error messages)."""
        chips = chips_in(topology)
        both = [t for t in self.topologies if t in self.ray_topologies]
        return sorted(both, key=lambda t: (abs(chips_in(t) - chips), chips_in(t)))[:count]


def _dims(topology: str) -> tuple[int, ...]:
    return tuple(int(d) for d in topology.split("x"))


def chips_in(topology: str) -> int:
    """Number of chips in a well-formed topology string (``4x4`` -> 16)."""
    total = 1
    for dim in _dims(topology):
        total *= dim
    return total


def _single_host_shape(mesh_dims: int, chips: int) -> str:
    """The shape one VM of ``chips`` chips forms: 1x1, 2x2, 2x4 (2D) or 2x2x1 (3D)."""
    shape_2d = {1: "1x1", 4: "2x2", 8: "2x4"}[chips]
    return shape_2d if mesh_dims == 2 else f"{shape_2d}x1"


SHAPES_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
"""v5e and v6e. Source: https://cloud.google.com/tpu/docs/v6e (table "Topology | TPU chips | Hosts | VMs")."""

SHAPES_V4 = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16", "8x16x16")
"""GKE's v4 table (v4-8 ... v4-4096). Source: xpk ``UserFacingNameToSystemCharacteristics``
(docs/FACTS.md#tpu-catalog-evidence)."""

SHAPES_V5P = (
    "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x12", "4x8x8",
    "4x4x20", "4x8x12", "4x4x28", "8x8x8", "4x12x12", "4x8x20", "4x4x44", "8x8x12",
    "4x4x52", "4x8x28", "4x12x20", "8x8x16", "4x4x68", "8x12x12", "4x4x76", "8x8x20",
    "4x12x28", "4x8x44", "4x4x92", "8x12x16", "4x20x20", "4x8x52", "12x12x12", "8x8x28",
    "4x4x116", "8x12x20", "4x4x124", "8x16x16", "4x12x44", "4x8x68", "4x20x28", "12x12x16",
    "4x4x148", "4x8x76", "4x12x52", "8x16x20", "4x4x164", "8x12x28", "4x4x172", "8x8x44",
    "12x12x20", "4x8x92", "4x4x188", "12x16x16", "4x28x28", "8x20x20", "4x12x68", "8x8x52",
    "4x4x212", "12x12x24", "4x20x44", "8x16x28", "4x12x76", "4x8x116", "4x4x236", "12x16x20",
    "4x4x244", "4x8x124", "12x12x28", "16x16x16", "4x20x52", "8x12x44", "8x8x68", "4x12x92",
    "8x20x28", "12x16x24", "4x8x148", "12x20x20", "8x8x76", "4x28x44", "8x12x52", "16x16x20",
    "12x12x36", "4x8x164", "12x16x28", "4x20x68", "4x8x172", "4x12x116", "8x16x44", "12x20x24",
    "4x28x52", "8x8x92", "4x12x124", "4x8x188", "4x20x76", "16x16x24", "12x24x24", "16x20x28",
)
"""GKE's v5p table (v5p-8 ... v5p-17920, one shape per size, e.g. 4x4x28 = v5p-896, 16x20x28 = 8,960 chips).
Source: xpk ``UserFacingNameToSystemCharacteristics`` (docs/FACTS.md#tpu-catalog-evidence)."""

SHAPES_TPU7X = (*SHAPES_V5P[:-1], "16x16x32", "16x20x28", "16x24x24")
"""v5p's table plus 16x16x32 and the full 16x24x24 pod. Source: xpk ``UserFacingNameToSystemCharacteristics``."""

_RAY_3D_SMALL = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")


def _ray_box(max_x: int, max_y: int, max_z: int) -> tuple[str, ...]:
    """Ray 2.60 ``ray._private.accelerators.tpu._get_larger_3d_topologies``, each box written non-decreasing."""
    shapes = set()
    for x in range(4, max_x + 1, 4):
        for y in range(4, max_y + 1, 4):
            for z in range(4, max_z + 1, 4):
                shapes.add("x".join(str(d) for d in sorted((x, y, z))))
    return (*_RAY_3D_SMALL, *sorted(shapes, key=lambda t: (chips_in(t), _dims(t))))


RAY_2D = ("1x1", "2x2", "2x4", "2x8", "4x4", "4x8", "8x8", "8x16", "16x16")
"""Ray 2.60 ``ray._private.accelerators.tpu.VALID_TPU_TOPOLOGY`` for v5litepod and v6e; 2x8 is no GKE shape."""
RAY_V7X = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16")
"""Ray 2.60 ``ray._private.accelerators.tpu.VALID_TPU_TOPOLOGY`` for v7x: 10 shapes."""


def _generation_2d(name: str, label: str, prefix: str, hbm: float, hbm_gbps: float, ici_gbps: float,
                   ici_link_gbps: float, tflops: float, ray_type: str, machines: tuple[MachineType, ...],
                   min_gke: str, zones: tuple[str, ...], device_kinds: tuple[str, ...],
                   smoke: SmokeFloors) -> Generation:
    return Generation(
        name=name, gke_accelerator=label,
        machine_types=machines,
        mesh_dims=2, topologies=SHAPES_2D, ray_topologies=RAY_2D,
        hbm_gib_per_chip=hbm, hbm_gbps_per_chip=hbm_gbps, ici_gbps_per_chip=ici_gbps,
        ici_link_gbps=ici_link_gbps, peak_bf16_tflops_per_chip=tflops, tensorcores_per_chip=1,
        ray_accelerator_type=ray_type,
        ray_pod_prefix=prefix, gke_pod_prefix=prefix, multi_host_placement="compact", min_gke_version=min_gke,
        zones=zones, jax_device_kinds=device_kinds, smoke=smoke,
    )


# TPU machine types: (name, chips, vCPUs, GiB, DCN Gbps); each figure's two sources:
# docs/FACTS.md#tpu-catalog-machine-types.
CT4P_4T = MachineType("ct4p-hightpu-4t", 4, 240, 407)
CT5LP_1T = MachineType("ct5lp-hightpu-1t", 1, 24, 48)
CT5LP_4T = MachineType("ct5lp-hightpu-4t", 4, 112, 192, 100)
CT5LP_8T = MachineType("ct5lp-hightpu-8t", 8, 224, 384, 200)
CT5P_4T = MachineType("ct5p-hightpu-4t", 4, 208, 448, 200)
CT6E_1T = MachineType("ct6e-standard-1t", 1, 44, 176, 50)
CT6E_4T = MachineType("ct6e-standard-4t", 4, 180, 720, 400)
CT6E_8T = MachineType("ct6e-standard-8t", 8, 180, 1440, 200)
"""SMT off on GKE: 180 cores, where Compute Engine lists 360 threads.
Source: cluster-autoscaler ``NewMachineTypeInfo("ct6e-standard-8t", 180, 1440).withThreadsPerCoreOverride(1)``."""
TPU7X_4T = MachineType("tpu7x-standard-4t", 4, 224, 960, 400)
"""960 GiB, the lower of the published figures (cluster-autoscaler has 992), so derived pod requests fit the node.
Source: https://cloud.google.com/tpu/docs/tpu7x ("RAM (GB)")."""


# ---------------------------------------------------------------------------------------------- where it is offered


@dataclass(frozen=True)
class OfferedZones:
    """The zones Google documents as offering a TPU generation, per provisioning mode: one dated, cited table.
    Warnings, not refusals: the pages disagree and move (docs/FACTS.md#tpu-catalog-gke). A generation absent from
    ``flex_start`` is warned; an empty tuple is refused (GKE says flex-start does not support it)."""

    read_on: str
    any_mode: dict[str, tuple[str, ...]]
    any_mode_source: str
    flex_start: dict[str, tuple[str, ...]]
    flex_start_source: str

    def warnings(self, generation_name: str, modes: tuple[str, ...], zone: str) -> list[str]:
        """Warnings for a slice in ``zone`` under ``modes``: zone undocumented for the generation (or flex-start)."""
        out = []
        offered = self.any_mode.get(generation_name, ())
        if zone not in offered:
            out.append(f"{zone} is not among the zones Google's TPU regions and zones page lists for "
                       f"{generation_name} ({', '.join(offered)}; read {self.read_on}, {self.any_mode_source}): "
                       "check the live list, or nothing may ever scale up there")
        flex = self.flex_start.get(generation_name)
        # () is refused (raytpu.core.specs.slices.provisioning.generation_problems)
        if "flex-start" in modes and flex != ():
            if flex is None:
                out.append(f"GKE's flex-start page lists no {generation_name} zones (read {self.read_on}, "
                           f"{self.flex_start_source}): check that flex-start offers {generation_name} in {zone}")
            elif zone not in flex:
                out.append(f"GKE offers {generation_name} flex-start only in {', '.join(flex)} (read "
                           f"{self.read_on}, {self.flex_start_source}), not {zone}: pods would wait for capacity "
                           "that never comes; check the live list or pick one of those zones")
        return out


OFFERED = OfferedZones(
    read_on="2026-12-03",
    # https://cloud.google.com/tpu/docs/regions-zones ("Supported zones" per TPU type; AI zones left out):
    # first zone of each generation is the kit's default for it.
    any_mode={
        "v4": ("us-central2-b",),
        "v5e": ("us-central1-a", "us-south1-a", "us-west1-c", "us-west4-a"),
        "v5p": ("us-east5-a", "us-central1-a"),
        "v6e": ("us-east5-b", "us-east5-a", "us-east1-d", "us-central1-b", "europe-west4-a", "asia-northeast1-b"),
        "tpu7x": ("us-central1-c",),
    },
    any_mode_source="https://cloud.google.com/tpu/docs/regions-zones",
    # https://cloud.google.com/kubernetes-engine/docs/concepts/dws (Requirements): "TPU v3 and v4 are not supported".
    flex_start={
        "v4": (),
        "v5e": ("us-west4-a",),
        "v5p": ("us-east5-a",),
        "v6e": ("asia-northeast1-b", "us-east5-a", "us-east5-b"),
    },
    flex_start_source="https://cloud.google.com/kubernetes-engine/docs/concepts/dws",
)
"""Where each generation is offered, per provisioning mode (see :class:`OfferedZones`)."""

FLEX_START_MIN_GKE_VERSION = "1.33.0-gke.1712000"
"""Oldest GKE version that runs flex-start TPUs. Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws"""


GENERATIONS: dict[str, Generation] = {
    g.name: g
    for g in (
        Generation(
            name="v4", gke_accelerator="tpu-v4-podslice", machine_types=(CT4P_4T,),
            mesh_dims=3, topologies=SHAPES_V4, ray_topologies=_ray_box(12, 12, 16),
            # https://cloud.google.com/tpu/docs/v4: "275 teraflops", "32 GiB, 1200 GBps"; no per-chip ICI figure.
            # One-way per link: scaling-book tpus.md "TPU v4p | 4.5e10".
            hbm_gib_per_chip=32, hbm_gbps_per_chip=1200, ici_gbps_per_chip=None, ici_link_gbps=45,
            peak_bf16_tflops_per_chip=275,
            tensorcores_per_chip=2, ray_accelerator_type="TPU-V4", ray_pod_prefix="v4", gke_pod_prefix="v4",
            multi_host_placement="compact", zones=OFFERED.any_mode["v4"], jax_device_kinds=("TPU v4",),
            # smoke floors: XLA's matmul as on v5e (92% measured there; both TensorCores are one megacore device),
            # copies as on tpu7x (87% measured); ICI against the topology's expected figure
            smoke=SmokeFloors(matmul_of_peak=0.7, hbm_of_spec=0.6),
        ),
        # https://cloud.google.com/tpu/docs/v5e: 197 TFLOP/s, "16 GB, 819 GBps", ICI 400 GBps bidirectional.
        # One-way per link 45 GB/s: scaling-book tpus.md "TPU v5e | 4.5e10".
        _generation_2d("v5e", "tpu-v5-lite-podslice", "v5litepod", 16, 819, 400, 45, 197, "TPU-V5LITEPOD",
                       (CT5LP_1T, CT5LP_4T, CT5LP_8T),
                       RAY_OPERATOR_MIN_GKE_VERSION, OFFERED.any_mode["v5e"],
                       ("TPU v5 lite", "TPU v5e"),
                       # matmul 92% of peak measured (JAX's Pallas matmul guide)
                       SmokeFloors(matmul_of_peak=0.75, hbm_of_spec=0.6)),
        Generation(
            name="v5p", gke_accelerator="tpu-v5p-slice", machine_types=(CT5P_4T,),
            mesh_dims=3, topologies=SHAPES_V5P, ray_topologies=_ray_box(16, 16, 24),
            # https://cloud.google.com/tpu/docs/v5p-training: 459 TFLOP/s, HBM 2765 GBps, ICI 1200 GBps.
            # One-way per link 90 GB/s: scaling-book tpus.md "TPU v5p | 9e10".
            hbm_gib_per_chip=95, hbm_gbps_per_chip=2765, ici_gbps_per_chip=1200, ici_link_gbps=90,
            peak_bf16_tflops_per_chip=459,
            tensorcores_per_chip=2, ray_accelerator_type="TPU-V5P", ray_pod_prefix="v5p", gke_pod_prefix="v5p",
            multi_host_placement="compact", zones=OFFERED.any_mode["v5p"],
            jax_device_kinds=("TPU v5p", "TPU v5"),
            # smoke floors: matmul as on v5e (megacore device), copies as on tpu7x
            smoke=SmokeFloors(matmul_of_peak=0.7, hbm_of_spec=0.6),
        ),
        # https://cloud.google.com/tpu/docs/v6e: 918 TFLOP/s, HBM 1638 GBps, ICI 800 GBps bidirectional.
        # One-way per link 90 GB/s: scaling-book tpus.md "TPU v6e | 9e10".
        _generation_2d("v6e", "tpu-v6e-slice", "v6e", 32, 1638, 800, 90, 918, "TPU-V6E",
                       (CT6E_1T, CT6E_4T, CT6E_8T),
                       "1.31.2-gke.1115000",
                       OFFERED.any_mode["v6e"],
                       ("TPU v6 lite", "TPU v6e"),
                       # matmul as on v5e, copies as on tpu7x
                       SmokeFloors(matmul_of_peak=0.7, hbm_of_spec=0.6)),
        Generation(
            name="tpu7x", gke_accelerator="tpu7x", machine_types=(TPU7X_4T,),
            mesh_dims=3, topologies=SHAPES_TPU7X, ray_topologies=RAY_V7X,
            # https://cloud.google.com/tpu/docs/tpu7x: 2307 TFLOP/s, 192 GiB, HBM 7380 GB/s, ICI 1200 GB/s.
            # One-way per link 100 GB/s: 1200 GB/s per chip over 2 directions x 6 links (see Generation).
            hbm_gib_per_chip=192, hbm_gbps_per_chip=7380, ici_gbps_per_chip=1200, ici_link_gbps=100,
            peak_bf16_tflops_per_chip=2307,
            tensorcores_per_chip=2, ray_accelerator_type="TPU-V7X", ray_pod_prefix="v7x", gke_pod_prefix="tpu7x",
            multi_host_placement="workload-policy", min_gke_version="1.34.0-gke.2201000",
            min_gke_version_autopilot="1.34.1-gke.3084001", zones=OFFERED.any_mode["tpu7x"],
            jax_device_kinds=("TPU7x",),
            # smoke floors: measured per device (accelerator-microbenchmarks): matmul 77-82% of peak, copies 87% of
            # spec, an all-gather 0.6-0.9 of the topology's expected figure
            smoke=SmokeFloors(matmul_of_peak=0.6, hbm_of_spec=0.65),
        ),
    )
}


def generation(name: str, field: str = "generation") -> Generation:
    """Looks a generation up by name; raises InvalidInput listing the known ones."""
    try:
        return GENERATIONS[name]
    except KeyError as exc:
        raise invalid_choice(field, name, GENERATIONS) from exc


ACCELERATOR_TYPE = re.compile(r"^([a-z0-9]+)-([0-9]+)$")
"""An accelerator (pod) type name: ``<prefix>-<size>`` (``v6e-16``, ``v5litepod-16``, ``v5p-128``, ``tpu7x-128``)."""


def accelerator_prefixes() -> dict[str, Generation]:
    """Every accelerator type prefix of a generation: the kit's, GKE's ``TPU_ACCELERATOR_TYPE``'s and Ray's."""
    return {p: g for g in GENERATIONS.values() for p in (g.name, g.gke_pod_prefix, g.ray_pod_prefix)}


def from_accelerator_type(name: str, field: str = "generation") -> tuple[str, str] | None:
    """``(generation, topology)`` of an accelerator type name (``v5p-128``), None if ``name`` is not one.
    The size counts TensorCores (``tensorcores_per_chip``); refused listing sizes when no or several shapes fit.
    Source: ray 2.60 ``ray._private.accelerators.tpu.get_tpu_cores_per_chip`` (docs/FACTS.md#tpu-catalog-gke)."""
    match = ACCELERATOR_TYPE.match(name.strip().lower())
    gen = accelerator_prefixes().get(match[1]) if match else None
    if match is None or gen is None:
        return None
    size, cores = int(match[2]), gen.tensorcores_per_chip
    unit = "TensorCores (2 per chip)" if cores > 1 else "chips"
    sizes = ", ".join(f"{match[1]}-{chips_in(t) * cores}" for t in gen.topologies[:12]) + (
        f", ... {match[1]}-{chips_in(gen.topologies[-1]) * cores}" if len(gen.topologies) > 12 else "")
    shapes = [t for t in gen.topologies if size % cores == 0 and chips_in(t) == size // cores]
    if len(shapes) != 1:
        problem = (f"{name!r} names {size} {unit}, which no {gen.name} slice has" if not shapes else
                   f"{name!r} names {size} {unit}, which several {gen.name} topologies have: {', '.join(shapes)}")
        raise InvalidInput(field, problem, f"{gen.name} accelerator types: {sizes}; or GENERATION TOPOLOGY")
    return gen.name, shapes[0]


def offered_topology(gen: Generation, topology: str, field: str = "topology") -> str:
    """Returns ``topology`` if ``gen`` offers it, else raises an error that says why (malformed, 2D/3D, order,
    not a multiple of 4, too large)."""
    if topology in gen.topologies:
        return topology
    kind = f"{gen.mesh_dims}D"
    parts = topology.split("x")
    valid = f"{kind} topologies of {gen.name}: " + ", ".join(gen.topologies[:10]) + (
        f", ... up to {gen.topologies[-1]} ({len(gen.topologies)} in all; `raytpu catalog` lists them)"
        if len(gen.topologies) > 10 else "")
    if not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) not in (2, 3):
        raise InvalidInput(field, f"{topology!r} is not a topology like AxB or AxBxC", valid)
    dims = tuple(int(p) for p in parts)
    if len(dims) != gen.mesh_dims:
        raise InvalidInput(field, f"{topology!r} is {len(dims)}D but {gen.name} is a {kind} torus", valid)
    canonical = "x".join(str(d) for d in sorted(dims))
    if canonical != topology and canonical in gen.topologies:
        raise InvalidInput(field, f"{topology!r} is not in canonical order (write {canonical!r})", valid)
    largest = gen.topologies[-1]
    if chips_in(topology) > chips_in(largest):
        raise InvalidInput(field, f"{topology!r} is larger than {gen.name}'s largest slice "
                           f"({largest}, {chips_in(largest)} chips)", valid)
    if gen.mesh_dims == 3 and any(d % 4 for d in dims):
        raise InvalidInput(field, f"{topology!r} has a dimension that is not a multiple of 4", valid)
    raise InvalidInput(field, f"{topology!r} is not a {gen.name} slice shape", valid)


def expected_busbw(generation_name: str, topology: str) -> SliceICI | None:
    """:func:`ici_expected` from the catalog's figures for ``generation_name``; None where it has no link rate."""
    gen = generation(generation_name)
    if gen.ici_link_gbps is None:
        return None
    return ici_expected(gen.ici_link_gbps, gen.mesh_dims, topology)
