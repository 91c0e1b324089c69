"""Unit tests of raytpu.core.tpu.catalog: two truths kept apart and each checked against its source.

- GKE-provisionable shapes (``Generation.topologies``): explicit tables from GKE's "Plan TPUs" page
  (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus) and the same rows in
  AI-Hypercomputer/xpk ``src/xpk/core/system_characteristics.py`` at aa4255bf,
  ``UserFacingNameToSystemCharacteristics``.
- Ray-reservable shapes (``Generation.ray_topologies``): checked against Ray's own ``VALID_TPU_TOPOLOGY``
  (``ray._private.accelerators.tpu.VALID_TPU_TOPOLOGY`` in the pinned Ray 2.60.0, importable in the test
  environment).
"""

from __future__ import annotations

import pytest

from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.catalog import GENERATIONS, RAY_VERSION, chips_in, generation
from raytpu.core.tpu.plan import TPU_RESOURCE, plan_slice

pytestmark = pytest.mark.unit

FACTS_TABLE = {
    # generation: (gke label, {machine type: chips}, mesh dims, HBM GiB, bf16 TFLOP/s, TCs/chip, Ray type)
    "v4": ("tpu-v4-podslice", {"ct4p-hightpu-4t": 4}, 3, 32, 275, 2, "TPU-V4"),
    "v5e": ("tpu-v5-lite-podslice", {"ct5lp-hightpu-1t": 1, "ct5lp-hightpu-4t": 4, "ct5lp-hightpu-8t": 8},
            2, 16, 197, 1, "TPU-V5LITEPOD"),
    "v5p": ("tpu-v5p-slice", {"ct5p-hightpu-4t": 4}, 3, 95, 459, 2, "TPU-V5P"),
    "v6e": ("tpu-v6e-slice", {"ct6e-standard-1t": 1, "ct6e-standard-4t": 4, "ct6e-standard-8t": 8},
            2, 32, 918, 1, "TPU-V6E"),
    "tpu7x": ("tpu7x", {"tpu7x-standard-4t": 4}, 3, 192, 2307, 2, "TPU-V7X"),
}


@pytest.mark.parametrize("name", sorted(FACTS_TABLE))
def test_generation_facts_match_facts_table(name: str) -> None:
    label, machines, dims, hbm, tflops, cores, ray_type = FACTS_TABLE[name]
    gen = generation(name)
    assert gen.gke_accelerator == label
    assert {m.name: m.chips for m in gen.machine_types} == machines
    assert (gen.mesh_dims, gen.hbm_gib_per_chip, gen.peak_bf16_tflops_per_chip) == (dims, hbm, tflops)
    assert (gen.tensorcores_per_chip, gen.ray_accelerator_type) == (cores, ray_type)


BANDWIDTH = {
    # generation: (HBM GB/s per chip, bidirectional ICI GB/s per chip or None when unpublished)
    "v4": (1200, None),  # https://cloud.google.com/tpu/docs/v4: "32 GiB, 1200 GBps"; no per-chip ICI figure
    "v5e": (819, 400),  # https://cloud.google.com/tpu/docs/v5e
    "v5p": (2765, 1200),  # https://cloud.google.com/tpu/docs/v5p-training
    "v6e": (1638, 800),  # https://cloud.google.com/tpu/docs/v6e
    "tpu7x": (7380, 1200),  # https://cloud.google.com/tpu/docs/tpu7x
}


@pytest.mark.parametrize("name", sorted(BANDWIDTH))
def test_generation_bandwidths_match_the_tpu_pages(name: str) -> None:
    gen = generation(name)
    assert (gen.hbm_gbps_per_chip, gen.ici_gbps_per_chip) == BANDWIDTH[name]


def test_catalog_knows_exactly_the_five_generations() -> None:
    assert list(GENERATIONS) == ["v4", "v5e", "v5p", "v6e", "tpu7x"]
    assert set(GENERATIONS) == set(FACTS_TABLE)


MACHINE_SIZES = {
    # machine type: (chips, vCPUs, GiB) as a GKE node has them, from two sources that do not copy each other:
    # CA = GoogleCloudPlatform/cluster-autoscaler 7d250507 pkg/cloudprovider/gke/machinetypes/
    #      deprecated_machine_types_config.go NewMachineTypeInfo(name, vCPUs, GiB); chips: deprecated_tpu_config.go
    #      fixedTpuCount.
    # GCE = `gcloud compute machine-types list` (CPUS;MEMORY_GB), Cyclenerd/google-cloud-pricing-cost-calculator
    #      tools/machinetypes.csv dac31281 (ct4p at 8d3624b).
    "ct4p-hightpu-4t": (4, 240, 407),  # CA 240, 407; GCE 240;407.00
    "ct5lp-hightpu-1t": (1, 24, 48),  # CA 24, 48; GCE 24;48.00
    "ct5lp-hightpu-4t": (4, 112, 192),  # CA 112, 192; GCE 112;192.00
    "ct5lp-hightpu-8t": (8, 224, 384),  # CA 224, 384; GCE 224;384.00
    "ct5p-hightpu-4t": (4, 208, 448),  # CA 208, 448; GCE 208;448.00
    "ct6e-standard-1t": (1, 44, 176),  # CA 44, 176; GCE 44;176.00
    "ct6e-standard-4t": (4, 180, 720),  # CA 180, 720; GCE 180;720.00
    # SMT off on GKE: CA NewMachineTypeInfo("ct6e-standard-8t", 180, 1440).withThreadsPerCoreOverride(1); GCE lists
    # 360 threads (360;1440.00) at 2 per core, the same 180 cores. The catalog said 360 (issue 18, item 1).
    "ct6e-standard-8t": (8, 180, 1440),
    # 224 vCPUs: CA, GCE and https://cloud.google.com/tpu/docs/tpu7x ("Number of vCPUs (4-chip VM)"). Memory: GCE
    # 960.00 and the TPU7x page's "RAM (GB)" 960; CA says 992. The lower figure is kept.
    "tpu7x-standard-4t": (4, 224, 960),
}


def test_every_machine_size_matches_two_sources() -> None:
    catalog = {m.name: (m.chips, m.vcpus, m.memory_gib) for g in GENERATIONS.values() for m in g.machine_types}
    assert catalog == MACHINE_SIZES


@pytest.mark.parametrize("machine", sorted(MACHINE_SIZES))
def test_a_standard_tpu_workers_requests_fit_its_node(machine: str) -> None:
    """The worker's CPU and memory requests (raytpu.core.manifests.kuberay.host_resources, from the catalog) stay within
    the node's allocatable, which stays within the machine (GKE reservations:
    https://cloud.google.com/kubernetes-engine/docs/ concepts/plan-node-sizes#memory_and_cpu_reservations); a request
    above it leaves the pod Pending forever."""
    from raytpu.core.manifests import kuberay
    gen = next(g for g in GENERATIONS.values() if machine in {m.name for m in g.machine_types})
    shape = gen.machine_type(machine)
    topology = next(t for t, m in gen.single_host_topologies.items() if m.name == machine)
    requests = kuberay.host_resources(plan_slice(gen.name, topology, machine), autopilot=False)["requests"]
    chips, vcpus, gib = MACHINE_SIZES[machine]
    assert int(requests["cpu"].removesuffix("m")) <= shape.allocatable_cpu_m < vcpus * 1000
    assert int(requests["memory"].removesuffix("Mi")) <= shape.allocatable_memory_mib < gib * 1024
    assert requests[TPU_RESOURCE] == str(chips)


# ---------------------------------------------------------------------------------------------- GKE-provisionable

GKE_2D = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
"""https://cloud.google.com/tpu/docs/v6e (table "Topology | TPU chips | Hosts"), https://cloud.google.com/tpu/docs/v5e;
xpk aa4255bf ``UserFacingNameToSystemCharacteristics``, its v6e and v5litepod entries."""

GKE_V4 = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16", "8x16x16")
"""GKE's v4 table, v4-8 ... v4-4096; xpk aa4255bf ``UserFacingNameToSystemCharacteristics``, its v4 entries."""

GKE_V5P = (
    "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x4x12", "4x8x8", "4x4x20", "4x8x12", "4x4x28",
    "8x8x8", "4x12x12", "4x8x20", "4x4x44", "8x8x12", "4x4x52", "4x8x28", "4x12x20", "8x8x16", "4x4x68",
    "8x12x12", "4x4x76", "8x8x20", "4x12x28", "4x8x44", "4x4x92", "8x12x16", "4x20x20", "4x8x52", "12x12x12",
    "8x8x28", "4x4x116", "8x12x20", "4x4x124", "8x16x16", "4x12x44", "4x8x68", "4x20x28", "12x12x16", "4x4x148",
    "4x8x76", "4x12x52", "8x16x20", "4x4x164", "8x12x28", "4x4x172", "8x8x44", "12x12x20", "4x8x92", "4x4x188",
    "12x16x16", "4x28x28", "8x20x20", "4x12x68", "8x8x52", "4x4x212", "12x12x24", "4x20x44", "8x16x28",
    "4x12x76", "4x8x116", "4x4x236", "12x16x20", "4x4x244", "4x8x124", "12x12x28", "16x16x16", "4x20x52",
    "8x12x44", "8x8x68", "4x12x92", "8x20x28", "12x16x24", "4x8x148", "12x20x20", "8x8x76", "4x28x44",
    "8x12x52", "16x16x20", "12x12x36", "4x8x164", "12x16x28", "4x20x68", "4x8x172", "4x12x116", "8x16x44",
    "12x20x24", "4x28x52", "8x8x92", "4x12x124", "4x8x188", "4x20x76", "16x16x24", "12x24x24", "16x20x28",
)
"""GKE's v5p table, v5p-8 ... v5p-17920, one shape per size, in xpk's order; xpk aa4255bf
``UserFacingNameToSystemCharacteristics``, its v5p entries."""

GKE_TPU7X = frozenset(GKE_V5P) | {"16x16x32", "16x24x24"}
"""xpk aa4255bf ``UserFacingNameToSystemCharacteristics``'s tpu7x entries (listed alphabetically): v5p's 96 shapes
plus 16x16x32 and the full 9,216-chip 16x24x24 pod."""

GKE_TABLES: dict[str, frozenset[str]] = {"v4": frozenset(GKE_V4), "v5e": frozenset(GKE_2D), "v5p": frozenset(GKE_V5P),
                                         "v6e": frozenset(GKE_2D), "tpu7x": GKE_TPU7X}


@pytest.mark.parametrize("name", list(GKE_TABLES))
def test_gke_provisionable_topologies_are_exactly_gkes_table(name: str) -> None:
    assert set(GENERATIONS[name].topologies) == GKE_TABLES[name]


@pytest.mark.parametrize(("name", "table"), [("v4", GKE_V4), ("v5p", GKE_V5P), ("v5e", GKE_2D), ("v6e", GKE_2D)])
def test_gke_tables_keep_gkes_order(name: str, table: tuple[str, ...]) -> None:
    assert GENERATIONS[name].topologies == table


SMALL_3D = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
"""The 3D shapes below a 4x4x4 cube; every larger one has all dimensions a multiple of 4."""


@pytest.mark.parametrize("name", list(GENERATIONS))
def test_gke_topologies_have_one_canonical_shape_per_size_ordered_by_chips(name: str) -> None:
    gen = GENERATIONS[name]
    chips = [chips_in(t) for t in gen.topologies]
    assert chips == sorted(chips)
    assert len(set(chips)) == len(chips), "GKE offers one shape per slice size"
    for topo in gen.topologies:
        dims = [int(d) for d in topo.split("x")]
        assert len(dims) == gen.mesh_dims
        assert dims == sorted(dims) or topo == "2x2x1", topo
        if gen.mesh_dims == 3 and topo not in SMALL_3D:
            assert all(d % 4 == 0 for d in dims), topo
    if gen.mesh_dims == 3:
        assert gen.topologies[:4] == SMALL_3D


KNOWN_GKE = [
    # (generation, topology, chips, hosts, GKE/Ray pod type); https://cloud.google.com/kubernetes-engine/docs/
    # concepts/plan-tpus, xpk aa4255bf system_characteristics.py ``UserFacingNameToSystemCharacteristics``.
    ("v5p", "4x4x28", 448, 112, "v5p-896"),
    ("v5p", "16x20x28", 8960, 2240, "v5p-17920"),
    ("v5p", "12x24x24", 6912, 1728, "v5p-13824"),
    ("v5p", "4x12x116", 5568, 1392, "v5p-11136"),
    ("v4", "8x16x16", 2048, 512, "v4-4096"),
    ("tpu7x", "16x24x24", 9216, 2304, "v7x-18432"),
    ("tpu7x", "16x16x32", 8192, 2048, "v7x-16384"),
]


@pytest.mark.parametrize(("name", "topology", "chips", "hosts", "pod_type"), KNOWN_GKE)
def test_known_gke_shapes_are_provisionable(name: str, topology: str, chips: int, hosts: int, pod_type: str) -> None:
    assert topology in GENERATIONS[name].topologies
    plan = plan_slice(name, topology)
    assert (plan.chips, plan.hosts, plan.ray_pod_type) == (chips, hosts, pod_type)


@pytest.mark.parametrize(("name", "largest", "chips"), [("v4", "8x16x16", 2048), ("v5p", "16x20x28", 8960),
                                                         ("tpu7x", "16x24x24", 9216), ("v5e", "16x16", 256),
                                                         ("v6e", "16x16", 256)])
def test_largest_slice_is_the_documented_one(name: str, largest: str, chips: int) -> None:
    gen = GENERATIONS[name]
    assert gen.topologies[-1] == largest
    assert max(chips_in(t) for t in gen.topologies) == chips


def test_v4_tops_at_8x16x16() -> None:
    """v4-4096 (2,048 chips) is GKE's largest v4 slice: 16x16x16 is no GKE shape."""
    assert "16x16x16" not in GENERATIONS["v4"].topologies
    with pytest.raises(InvalidInput, match="larger than v4's largest slice"):
        plan_slice("v4", "16x16x16")


# ---------------------------------------------------------------------------------------------- Ray-reservable

RAY_NAMES = {"v4": "v4", "v5e": "v5litepod", "v5p": "v5p", "v6e": "v6e", "tpu7x": "v7x"}
"""Ray's generation names (Ray 2.60 ``ray._private.accelerators.tpu.VALID_TPU_TYPES``)."""


def canonical(topology: str) -> str:
    """GKE's spelling: dimensions non-decreasing, but the single-host 3D shape stays ``2x2x1``."""
    if topology == "2x2x1":
        return topology
    return "x".join(sorted(topology.split("x"), key=int))


@pytest.mark.parametrize("name", list(RAY_NAMES))
def test_ray_names_match_the_catalogs_pod_prefix_and_accelerator_type(name: str) -> None:
    from ray._private.accelerators.tpu import VALID_TPU_TYPES, normalize_tpu_accelerator_type

    gen = GENERATIONS[name]
    assert RAY_NAMES[name] in VALID_TPU_TYPES
    assert gen.ray_pod_prefix == RAY_NAMES[name]
    assert normalize_tpu_accelerator_type(gen.ray_accelerator_type) == RAY_NAMES[name]


@pytest.mark.parametrize("name", list(RAY_NAMES))
def test_ray_reservable_topologies_are_exactly_rays_table(name: str) -> None:
    """The recorded ``ray_topologies`` equal Ray 2.60's ``VALID_TPU_TOPOLOGY``, canonicalized."""
    import ray
    from ray._private.accelerators.tpu import VALID_TPU_TOPOLOGY

    assert ray.__version__ == RAY_VERSION
    assert {canonical(t) for t in VALID_TPU_TOPOLOGY[RAY_NAMES[name]]} == set(GENERATIONS[name].ray_topologies)


@pytest.mark.parametrize("name", list(RAY_NAMES))
def test_every_recorded_ray_topology_is_spelled_as_ray_accepts_it(name: str) -> None:
    """Ray checks the string as given (Ray 2.60 ``TPUAcceleratorManager.is_valid_tpu_accelerator_topology``): the kit's
    canonical spelling must itself be in Ray's table, not only a permutation of it."""
    from ray._private.accelerators.tpu import VALID_TPU_TOPOLOGY

    gen = GENERATIONS[name]
    assert set(gen.ray_topologies) <= VALID_TPU_TOPOLOGY[RAY_NAMES[name]]
    assert all(canonical(t) == t for t in gen.ray_topologies)
    assert len(set(gen.ray_topologies)) == len(gen.ray_topologies)


def test_tpu7x_ray_reservable_is_exactly_ten_shapes() -> None:
    """Ray 2.60's v7x entry of ``VALID_TPU_TOPOLOGY`` lists ten shapes, up to 8x16x16."""
    assert GENERATIONS["tpu7x"].ray_topologies == ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8",
                                                   "8x8x8", "8x8x16", "8x16x16")


TWO_TRUTHS = [
    # (generation, topology, GKE provisions it, Ray 2.60 reserves it)
    ("v5p", "4x4x28", True, False),  # a dimension above Ray's 24
    ("v5p", "16x20x28", True, False),
    ("v5p", "12x24x24", True, False),  # two 24s: Ray's box is 16x16x24
    ("v5p", "4x12x116", True, False),
    ("v5p", "16x16x24", True, True),
    ("v5p", "4x4x24", False, True),  # Ray's box has it; GKE's 384-chip v5p shape is 4x8x12
    ("v4", "8x16x16", True, False),  # Ray's v4 box is 12x12x16
    ("v4", "12x12x16", False, True),
    ("v4", "8x8x16", True, True),
    ("tpu7x", "16x24x24", True, False),
    ("tpu7x", "4x4x12", True, False),
    ("tpu7x", "8x16x16", True, True),
    ("v6e", "2x8", False, True),  # Ray lists 2x8; GKE has no 2x8 node pool
    ("v5e", "2x8", False, True),
    ("v6e", "16x16", True, True),
]


@pytest.mark.parametrize(("name", "topology", "gke", "ray_ok"), TWO_TRUTHS)
def test_catalog_tells_gke_provisionable_from_ray_reservable(name: str, topology: str, gke: bool,
                                                             ray_ok: bool) -> None:
    from ray._private.accelerators.tpu import TPUAcceleratorManager

    gen = GENERATIONS[name]
    assert (topology in gen.topologies, topology in gen.ray_topologies) == (gke, ray_ok)
    assert TPUAcceleratorManager.is_valid_tpu_accelerator_topology(RAY_NAMES[name], topology) == ray_ok
    if gke:
        assert plan_slice(name, topology).ray_reservable == ray_ok


@pytest.mark.parametrize("name", list(GENERATIONS))
def test_every_generation_has_both_kinds_of_shape_and_most_small_ones_in_both(name: str) -> None:
    gen = GENERATIONS[name]
    both = [t for t in gen.topologies if t in gen.ray_topologies]
    assert both[:4] == list(gen.topologies[:4]), "the small slices are reservable everywhere"


@pytest.mark.parametrize(("name", "topology", "nearest"), [
    ("v5p", "4x4x28", ["4x8x12", "8x8x8", "4x4x20"]),  # 448 chips: 384 and 512 tie, then 320
    ("v5p", "16x20x28", ["16x16x24", "16x16x20", "12x16x24"]),  # 8960 chips: 6144, 5120, 4608
    ("tpu7x", "16x24x24", ["8x16x16", "8x8x16", "8x8x8"]),
    ("v4", "8x16x16", ["8x8x16", "8x8x12", "8x8x8"]),
])
def test_nearest_ray_topologies_are_both_provisionable_and_reservable(name: str, topology: str,
                                                                      nearest: list[str]) -> None:
    gen = GENERATIONS[name]
    found = gen.nearest_ray_topologies(topology)
    assert found == nearest
    assert all(t in gen.topologies and t in gen.ray_topologies for t in found)
    distance = [abs(chips_in(t) - chips_in(topology)) for t in found]
    assert distance == sorted(distance)


# ---------------------------------------------------------------------------------------------- lookups


def test_unknown_generation_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as exc:
        generation("v5")
    assert exc.value.field == "generation"
    assert exc.value.valid == "v4, v5e, v5p, v6e, tpu7x"


def test_unknown_machine_type_lists_the_generations_types() -> None:
    with pytest.raises(InvalidInput) as exc:
        generation("v6e").machine_type("ct5lp-hightpu-4t")
    assert "ct6e-standard-1t, ct6e-standard-4t, ct6e-standard-8t" in exc.value.valid


@pytest.mark.parametrize(("name", "mode", "version"), [
    ("tpu7x", "standard", "1.34.0-gke.2201000"), ("tpu7x", "autopilot", "1.34.1-gke.3084001"),
    ("v6e", "autopilot", "1.31.2-gke.1115000"), ("v4", "standard", "1.30.0-gke.1747000"),
])
def test_min_gke_version_per_mode(name: str, mode: str, version: str) -> None:
    assert generation(name).min_gke_version_for(mode) == version


# ---------------------------------------------------------------------------------------------- accelerator types


@pytest.mark.parametrize(("name", "expected"), [
    # issue 28 item 11: the names people already use. v5e/v6e count chips, v4/v5p/tpu7x TensorCores (2 per chip)
    ("v6e-16", ("v6e", "4x4")), ("v6e-8", ("v6e", "2x4")), ("v6e-256", ("v6e", "16x16")),
    ("v5litepod-16", ("v5e", "4x4")), ("v5e-4", ("v5e", "2x2")),
    ("v5p-128", ("v5p", "4x4x4")), ("v5p-8", ("v5p", "2x2x1")), ("v4-32", ("v4", "2x2x4")),
    ("tpu7x-128", ("tpu7x", "4x4x4")), ("v7x-8", ("tpu7x", "2x2x1")), ("TPU7X-16", ("tpu7x", "2x2x2")),
    ("v6e", None), ("4x4", None), ("v9-16", None), ("v6e-", None),
])
def test_accelerator_type_names_map_to_a_generation_and_topology(name: str,
                                                                   expected: tuple[str, str] | None) -> None:
    from raytpu.core.tpu.catalog import from_accelerator_type

    assert from_accelerator_type(name) == expected


@pytest.mark.parametrize(("name", "problem"), [
    ("v6e-12", "'v6e-12' names 12 chips, which no v6e slice has"),
    ("v5p-7", "'v5p-7' names 7 TensorCores (2 per chip), which no v5p slice has"),
    ("v5p-64000", "which no v5p slice has"),
    ("tpu7x-2", "'tpu7x-2' names 2 TensorCores"),
])
def test_an_accelerator_type_of_no_slice_is_refused_listing_the_sizes(name: str, problem: str) -> None:
    from raytpu.core.tpu.catalog import from_accelerator_type

    with pytest.raises(InvalidInput) as caught:
        from_accelerator_type(name)
    assert caught.value.field == "generation" and problem in caught.value.problem
    assert caught.value.valid.startswith(f"{name.split('-')[0]} accelerator types: ")


@pytest.mark.parametrize("name", list(RAY_NAMES))
def test_every_slices_own_pod_type_names_it_back_as_ray_names_it(name: str) -> None:
    """Ray 2.60 ``infer_tpu_pod_type_from_topology`` names each catalog slice; that name (and GKE's
    TPU_ACCELERATOR_TYPE) maps back to the same generation and topology."""
    from ray._private.accelerators.tpu import infer_tpu_pod_type_from_topology

    from raytpu.core.tpu.catalog import from_accelerator_type

    gen = GENERATIONS[name]
    for topology in gen.topologies:
        plan = plan_slice(name, topology)
        assert infer_tpu_pod_type_from_topology(topology, RAY_NAMES[name]) == plan.ray_pod_type
        assert from_accelerator_type(plan.ray_pod_type) == from_accelerator_type(plan.gke_accelerator_type) == (
            name, topology)
