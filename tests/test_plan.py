"""Unit tests of raytpu.core.tpu.plan: every generation x every valid topology, plus known shapes from the docs."""

from __future__ import annotations

import pytest

from raytpu.core.common.errors import InvalidInput
from raytpu.core.tpu.catalog import GENERATIONS, chips_in
from raytpu.core.tpu.plan import ACCELERATOR_LABEL, TOPOLOGY_LABEL, SlicePlan, plan_slice

pytestmark = pytest.mark.unit

ALL_SHAPES = [(g.name, t) for g in GENERATIONS.values() for t in g.topologies]


LARGEST = {
    # GKE's per-generation tables (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus;
    # AI-Hypercomputer/xpk src/xpk/core/system_characteristics.py aa4255bf L348-604): the largest slice.
    "v4": ("8x16x16", 2048), "v5e": ("16x16", 256), "v5p": ("16x20x28", 8960), "v6e": ("16x16", 256),
    "tpu7x": ("16x24x24", 9216),
}


def test_table_covers_every_generation_up_to_its_largest_slice() -> None:
    for gen in GENERATIONS.values():
        assert (gen.topologies[-1], max(chips_in(t) for t in gen.topologies)) == LARGEST[gen.name]
    assert max(chips_in(t) for _, t in ALL_SHAPES) >= 4096
    assert len(ALL_SHAPES) > 200


@pytest.mark.parametrize(("gen_name", "topology"), ALL_SHAPES)
def test_every_valid_shape_plans_consistently(gen_name: str, topology: str) -> None:
    gen = GENERATIONS[gen_name]
    plan = plan_slice(gen_name, topology)
    assert plan.chips == chips_in(topology)
    assert plan.hosts * plan.chips_per_host == plan.chips
    assert plan.machine_type in {m.name for m in gen.machine_types}
    assert plan.single_host == (plan.hosts == 1)
    if plan.single_host:
        assert plan.placement == "none"
    else:
        assert plan.chips_per_host == 4, "GKE multi-host pools are 4-chip VMs"
        assert plan.placement == ("workload-policy" if gen_name == "tpu7x" else "compact")
    assert plan.ray_pod_type == f"{gen.ray_pod_prefix}-{plan.chips * gen.tensorcores_per_chip}"
    assert plan.node_selector == {ACCELERATOR_LABEL: gen.gke_accelerator, TOPOLOGY_LABEL: topology}
    assert plan.ray_reservable == (topology in gen.ray_topologies)
    assert plan.hbm_gib_per_chip == gen.hbm_gib_per_chip
    assert SlicePlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(("gen_name", "topology"), ALL_SHAPES)
def test_pod_type_agrees_with_rays_inference(gen_name: str, topology: str) -> None:
    """Ray derives the pod type (and the ``TPU-<pod>-head`` resource) itself; ours must match.

    Ray 2.60 ``ray._private.accelerators.tpu.infer_tpu_pod_type_from_topology`` (a module function that
    ``reserve_tpu_slice`` calls) and ``ray._private.accelerators.tpu.normalize_tpu_accelerator_type``.
    """
    from ray._private.accelerators.tpu import infer_tpu_pod_type_from_topology, normalize_tpu_accelerator_type

    plan = plan_slice(gen_name, topology)
    assert infer_tpu_pod_type_from_topology(topology, plan.ray_accelerator_type) == plan.ray_pod_type
    assert normalize_tpu_accelerator_type(plan.gke_accelerator_type) == plan.ray_pod_type


@pytest.mark.parametrize(("gen_name", "topology"), ALL_SHAPES)
def test_ray_reservable_agrees_with_rays_topology_check(gen_name: str, topology: str) -> None:
    """``ray_reservable`` is what Ray's own check says of the shape as the kit spells it
    (Ray 2.60 ``ray._private.accelerators.tpu.TPUAcceleratorManager.is_valid_tpu_accelerator_topology``)."""
    from ray._private.accelerators.tpu import TPUAcceleratorManager

    plan = plan_slice(gen_name, topology)
    assert TPUAcceleratorManager.is_valid_tpu_accelerator_topology(plan.ray_accelerator_type, topology) == (
        plan.ray_reservable)


KNOWN = [
    # (generation, topology, machine type or None) -> (machine type, hosts, chips/host, placement, pod type)
    # GKE: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus (hosts = chips / 4 when multi-host);
    # pod types count TensorCores (2 per chip on v4, v5p, tpu7x): Ray 2.60 infer_tpu_pod_type_from_topology.
    ("v6e", "1x1", None, "ct6e-standard-1t", 1, 1, "none", "v6e-1"),
    ("v6e", "2x2", None, "ct6e-standard-4t", 1, 4, "none", "v6e-4"),
    ("v6e", "2x4", None, "ct6e-standard-8t", 1, 8, "none", "v6e-8"),
    ("v6e", "2x4", "ct6e-standard-4t", "ct6e-standard-4t", 2, 4, "compact", "v6e-8"),
    ("v6e", "4x4", None, "ct6e-standard-4t", 4, 4, "compact", "v6e-16"),
    ("v6e", "16x16", None, "ct6e-standard-4t", 64, 4, "compact", "v6e-256"),
    ("v5e", "2x4", None, "ct5lp-hightpu-8t", 1, 8, "none", "v5litepod-8"),
    ("v5e", "2x4", "ct5lp-hightpu-4t", "ct5lp-hightpu-4t", 2, 4, "compact", "v5litepod-8"),
    ("v5e", "8x8", None, "ct5lp-hightpu-4t", 16, 4, "compact", "v5litepod-64"),
    ("v4", "2x2x1", None, "ct4p-hightpu-4t", 1, 4, "none", "v4-8"),
    ("v4", "2x2x2", None, "ct4p-hightpu-4t", 2, 4, "compact", "v4-16"),
    ("v4", "8x16x16", None, "ct4p-hightpu-4t", 512, 4, "compact", "v4-4096"),
    ("v5p", "2x2x1", None, "ct5p-hightpu-4t", 1, 4, "none", "v5p-8"),
    ("v5p", "4x4x8", None, "ct5p-hightpu-4t", 32, 4, "compact", "v5p-256"),
    ("v5p", "8x8x8", None, "ct5p-hightpu-4t", 128, 4, "compact", "v5p-1024"),
    ("v5p", "4x4x28", None, "ct5p-hightpu-4t", 112, 4, "compact", "v5p-896"),
    ("v5p", "12x24x24", None, "ct5p-hightpu-4t", 1728, 4, "compact", "v5p-13824"),
    ("v5p", "4x12x116", None, "ct5p-hightpu-4t", 1392, 4, "compact", "v5p-11136"),
    ("v5p", "16x20x28", None, "ct5p-hightpu-4t", 2240, 4, "compact", "v5p-17920"),
    ("tpu7x", "2x2x1", None, "tpu7x-standard-4t", 1, 4, "none", "v7x-8"),
    ("tpu7x", "2x2x2", None, "tpu7x-standard-4t", 2, 4, "workload-policy", "v7x-16"),
    ("tpu7x", "4x4x4", None, "tpu7x-standard-4t", 16, 4, "workload-policy", "v7x-128"),
    ("tpu7x", "16x24x24", None, "tpu7x-standard-4t", 2304, 4, "workload-policy", "v7x-18432"),
]


@pytest.mark.parametrize(("gen_name", "topology", "requested", "machine", "hosts", "per_host", "placement", "pod"),
                         KNOWN)
def test_known_shapes_plan_as_documented(gen_name: str, topology: str, requested: str | None, machine: str,
                                         hosts: int, per_host: int, placement: str, pod: str) -> None:
    plan = plan_slice(gen_name, topology, requested)
    assert (plan.machine_type, plan.hosts, plan.chips_per_host, plan.placement, plan.ray_pod_type) == (
        machine, hosts, per_host, placement, pod)
    assert plan.head_resource == f"TPU-{pod}-head"


def test_tpu7x_env_accelerator_type_keeps_gkes_spelling() -> None:
    assert plan_slice("tpu7x", "2x2x2").gke_accelerator_type == "tpu7x-16"
    assert plan_slice("v6e", "4x4").gke_accelerator_type == "v6e-16"


BAD = [
    # (generation, topology, machine type, field, words in the problem, words in valid)
    ("v7", "4x4", None, "generation", "'v7'", "v4, v5e, v5p, v6e, tpu7x"),
    ("V6E", "4x4", None, "generation", "'V6E'", "v6e"),
    ("v6e", "2x2x2", None, "topology", "is 3D but v6e is a 2D torus", "4x4"),
    ("v4", "4x4", None, "topology", "is 2D but v4 is a 3D torus", "2x2x1"),
    ("v5p", "4x4x6", None, "topology", "not a multiple of 4", "4x4x8"),
    ("v4", "2x6x8", None, "topology", "not a multiple of 4", "2x2x1"),
    ("v4", "8x4x4", None, "topology", "canonical order (write '4x4x8')", "4x4x8"),
    ("v6e", "4x2", None, "topology", "canonical order (write '2x4')", "2x4"),
    ("v6e", "32x32", None, "topology", "larger than v6e's largest slice", "16x16"),
    ("v4", "16x16x32", None, "topology", "larger than v4's largest slice", "8x16x16"),
    ("v4", "16x16x16", None, "topology", "larger than v4's largest slice (8x16x16, 2048 chips)", "8x16x16"),
    ("v5p", "16x16x48", None, "topology", "larger than v5p's largest slice (16x20x28, 8960 chips)", "16x20x28"),
    ("v5p", "4x4x24", None, "topology", "not a v5p slice shape", "96 in all"),
    ("v5p", "16x16x32", None, "topology", "not a v5p slice shape", "16x20x28"),
    ("tpu7x", "24x24x24", None, "topology", "larger than tpu7x's largest slice", "16x24x24"),
    ("v6e", "4by4", None, "topology", "not a topology like AxB", "4x4"),
    ("v6e", "", None, "topology", "not a topology like AxB", "4x4"),
    ("v6e", "0x4", None, "topology", "not a topology like AxB", "4x4"),
    ("v6e", "2x8", None, "topology", "not a v6e slice shape", "4x4"),
    ("v6e", "1x2", None, "topology", "not a v6e slice shape", "1x1"),
    ("v6e", "4x4", "ct6e-standard-8t", "machine_type", "cannot form v6e 4x4", "ct6e-standard-4t"),
    ("v6e", "1x1", "ct6e-standard-4t", "machine_type", "cannot form v6e 1x1", "ct6e-standard-1t"),
    ("v6e", "2x4", "ct6e-standard-1t", "machine_type", "cannot form v6e 2x4", "ct6e-standard-8t, ct6e-standard-4t"),
    ("v6e", "4x4", "ct5lp-hightpu-4t", "machine_type", "for v6e", "ct6e-standard-4t"),
    ("v4", "2x2x2", "ct5p-hightpu-4t", "machine_type", "for v4", "ct4p-hightpu-4t"),
]


@pytest.mark.parametrize(("gen_name", "topology", "machine", "field", "problem", "valid"), BAD)
def test_impossible_slices_name_the_field_and_list_valid_values(gen_name: str, topology: str, machine: str | None,
                                                                field: str, problem: str, valid: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        plan_slice(gen_name, topology, machine)
    assert exc.value.field == field
    assert problem in exc.value.problem
    assert valid in exc.value.valid


def test_field_prefix_locates_errors_inside_a_config() -> None:
    with pytest.raises(InvalidInput) as exc:
        plan_slice("v6e", "3x3", field_prefix="slices[2].")
    assert exc.value.field == "slices[2].topology"
