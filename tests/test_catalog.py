"""Unit tests of raytpu.catalog: the generated topology sets against FACTS.md and Ray's own tables."""

from __future__ import annotations

import pytest

from raytpu.catalog import GENERATIONS, chips_in, generation
from raytpu.errors import InvalidInput

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


def test_catalog_knows_exactly_the_five_generations() -> None:
    assert set(GENERATIONS) == set(FACTS_TABLE)


@pytest.mark.parametrize("name", ["v5e", "v6e"])
def test_2d_topologies_are_gkes_list(name: str) -> None:
    assert GENERATIONS[name].topologies == ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")


@pytest.mark.parametrize("name", ["v4", "v5p", "tpu7x"])
def test_3d_topologies_follow_the_multiple_of_4_rule(name: str) -> None:
    gen = GENERATIONS[name]
    small = {"2x2x1", "2x2x2", "2x2x4", "2x4x4"}
    assert small <= set(gen.topologies)
    for topo in set(gen.topologies) - small:
        dims = [int(d) for d in topo.split("x")]
        assert all(d % 4 == 0 for d in dims), topo
        assert dims == sorted(dims), topo
        assert chips_in(topo) <= gen.max_chips
    # FACTS.md's listed multi-host shapes are all present.
    for topo in ("4x4x4", "4x4x8", "4x8x8", "8x8x8"):
        assert topo in gen.topologies


@pytest.mark.parametrize(("name", "largest", "chips"), [("v4", "16x16x16", 4096), ("v5p", "16x16x24", 6144),
                                                         ("tpu7x", "16x24x24", 144 * 64)])
def test_largest_3d_slice_is_the_documented_one(name: str, largest: str, chips: int) -> None:
    gen = GENERATIONS[name]
    assert largest in gen.topologies
    assert max(chips_in(t) for t in gen.topologies) == chips


RAY_NAMES = {"v4": "v4", "v5e": "v5litepod", "v5p": "v5p", "v6e": "v6e", "tpu7x": "v7x"}


@pytest.mark.parametrize("name", sorted(RAY_NAMES))
def test_every_topology_ray_knows_is_in_the_catalog(name: str) -> None:
    """Ray 2.60's own table is an independent source; ours may be larger (Ray stops at 12x12x16 for v4).

    Ray accepts any order of dimensions; the kit asks for GKE's canonical one (non-decreasing, but
    the single-host 2x2x1).
    """
    from ray._private.accelerators.tpu import VALID_TPU_TOPOLOGY

    ray_topologies = VALID_TPU_TOPOLOGY[RAY_NAMES[name]] - {"2x8"}  # 2x8 is not a GKE node pool shape
    ours = GENERATIONS[name].topologies
    canonical = {t if t in ours or t.count("x") == 1 else "x".join(sorted(t.split("x"), key=int))
                 for t in ray_topologies}
    missing = {t for t in canonical if t not in ours}
    assert not missing


def test_unknown_generation_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as exc:
        generation("v5")
    assert exc.value.field == "generation"
    assert "v4, v5e, v5p, v6e, tpu7x" in exc.value.valid


def test_unknown_machine_type_lists_the_generations_types() -> None:
    with pytest.raises(InvalidInput) as exc:
        generation("v6e").machine_type("ct5lp-hightpu-4t")
    assert "ct6e-standard-1t, ct6e-standard-4t, ct6e-standard-8t" in exc.value.valid
