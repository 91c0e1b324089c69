"""Synth tests of the constructs in raytpu.modules: node pool shapes per generation, provisioning modes,
the head pool, ComputeClasses, guard rails of every options/props class, the escape hatch.

Constructs take specs and a typed cluster: ``GkeClusterProps(spec=GkeSpec, network=Network, ...)``,
``GkeCluster.add_slice_pool(id, TpuSlicePoolOptions(slice=SliceSpec, index=i))``,
``GkeCluster.add_head_pool(id, HeadPoolOptions(spec=HeadPoolSpec))``, ``ComputeClassProps(slice=SliceSpec,
project=...)``. One app is synthesized for the whole module.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _synth import by_name, only, read_stacks, resources

from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInput, InvalidInputs, problems_of
from raytpu.core.specs.cluster.cluster_parts import GkeSpec, HeadPoolSpec, NetworkSpec
from raytpu.core.specs.slices.provisioning import MODES as PROVISIONING_MODES
from raytpu.core.specs.spec import SliceSpec
from raytpu.core.tpu.plan import plan_slice

pytestmark = [pytest.mark.synth, pytest.mark.timeout(300)]

PROJECT = "my-project"
REGION = "us-east5"
ZONE = "us-east5-b"

# Shapes: docs/FACTS.md#tpu-catalog-gke (machine types, hosts) and docs/FACTS.md#gke-node-pools-rules (placement):
# single-host pools set no
# placement policy ("TPU topology can't be specified with single-host TPU slice pool"), multi-host
# v4/v5e/v5p/v6e pools are COMPACT with tpu_topology, multi-host tpu7x uses a HIGH_THROUGHPUT workload policy
# (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus).
# slice name, generation, topology, machine type (None: default), expected machine type, hosts, placement
SHAPES = [
    ("v4-single", "v4", "2x2x1", None, "ct4p-hightpu-4t", 1, "none"),
    ("v4-multi", "v4", "2x2x4", None, "ct4p-hightpu-4t", 4, "compact"),
    ("v5e-single", "v5e", "2x2", None, "ct5lp-hightpu-4t", 1, "none"),
    ("v5e-multi", "v5e", "4x4", None, "ct5lp-hightpu-4t", 4, "compact"),
    ("v5p-single", "v5p", "2x2x1", None, "ct5p-hightpu-4t", 1, "none"),
    ("v5p-multi", "v5p", "2x4x4", None, "ct5p-hightpu-4t", 8, "compact"),
    ("v6e-2x4-8t", "v6e", "2x4", None, "ct6e-standard-8t", 1, "none"),
    ("v6e-2x4-4t", "v6e", "2x4", "ct6e-standard-4t", "ct6e-standard-4t", 2, "compact"),
    ("v6e-multi", "v6e", "8x8", None, "ct6e-standard-4t", 16, "compact"),
    ("tpu7x-single", "tpu7x", "2x2x1", None, "tpu7x-standard-4t", 1, "none"),
    ("tpu7x-multi", "tpu7x", "2x2x2", None, "tpu7x-standard-4t", 2, "workload-policy"),
]

NO_RESERVATION = {"consume_reservation_type": "NO_RESERVATION"}
RESERVATION_KEY = "compute.googleapis.com/reservation-name"

# One v6e 4x4 (4 hosts) slice per provisioning mode of raytpu.core.specs.slices.provisioning.MODES, and what its pool
# must say. Fields (docs/FACTS.md#gke-node-pools-rules, terraform-provider-google google_container_node_pool):
# - spot: node_config.spot (https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms);
# - reservation: node_config.reservation_affinity SPECIFIC_RESERVATION with key
#   compute.googleapis.com/reservation-name, else NO_RESERVATION stated (GKE TPU pools want it stated;
#   https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations);
# - flex-start: node_config.flex_start (+ max_run_duration), autoscaling from 0 with per-zone limits (provider
#   quirk), auto_repair off, NO_RESERVATION (https://cloud.google.com/kubernetes-engine/docs/concepts/dws;
#   cluster-toolkit gke-node-pool preconditions);
# - queued: queued_provisioning.enabled together with flex_start, autoscaling min 0, NO_RESERVATION, auto_repair
#   off (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest: `--flex-start
#   --enable-queued-provisioning`; xpk src/xpk/core/capacity.py).
# case id, mode, slice fields, options fields, expected
MODE_CASES: list[tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("mode-on-demand", "on-demand", {}, {},
     dict(spot=False, flex_start=False, queued=False, affinity=NO_RESERVATION, scale_from_zero=False,
          auto_repair=True)),
    ("mode-spot", "spot", {}, {},
     dict(spot=True, flex_start=False, queued=False, affinity=NO_RESERVATION, scale_from_zero=False,
          auto_repair=True)),
    ("mode-reservation", "reservation", {"reservation": "my-res"}, {},
     dict(spot=False, flex_start=False, queued=False, scale_from_zero=False, auto_repair=True,
          affinity={"consume_reservation_type": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY,
                    "values": ["my-res"]})),
    ("mode-shared-res", "reservation", {"reservation": "shared"}, {"reservation_project": "other-proj"},
     dict(spot=False, flex_start=False, queued=False, scale_from_zero=False, auto_repair=True,
          affinity={"consume_reservation_type": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY,
                    "values": ["projects/other-proj/reservations/shared"]})),
    ("mode-shared-res-path", "reservation", {"reservation": "projects/other-proj/reservations/shared"}, {},
     dict(spot=False, flex_start=False, queued=False, scale_from_zero=False, auto_repair=True,
          affinity={"consume_reservation_type": "SPECIFIC_RESERVATION", "key": RESERVATION_KEY,
                    "values": ["projects/other-proj/reservations/shared"]})),
    ("mode-flex-start", "flex-start", {"max_run_duration_s": 86400}, {},
     dict(spot=False, flex_start=True, queued=False, affinity=NO_RESERVATION, scale_from_zero=True,
          auto_repair=False, max_run_duration="86400s")),
    # any mode takes a run duration (provider node_config.max_run_duration is not tied to flex_start)
    ("mode-spot-run-s", "spot", {"max_run_duration_s": 3600}, {},
     dict(spot=True, flex_start=False, queued=False, affinity=NO_RESERVATION, scale_from_zero=False,
          auto_repair=True, max_run_duration="3600s")),
    ("mode-queued", "queued", {}, {},
     dict(spot=False, flex_start=True, queued=True, affinity=NO_RESERVATION, scale_from_zero=True,
          auto_repair=False)),
]
MODE_HOSTS = 4  # v6e 4x4 on ct6e-standard-4t


def _slice(name: str, generation: str = "v6e", topology: str = "4x4", **fields: Any) -> SliceSpec:
    return SliceSpec.create(name=name, generation=generation, topology=topology, zone=fields.pop("zone", ZONE),
                            **fields)


def _fields_of(error: InvalidInput | InvalidInputs) -> list[str]:
    return [p.field for p in problems_of(error)]


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """One app: a Standard cluster with every shape, every mode, a two-copy slice and a head pool; an
    Autopilot cluster; a ComputeClass per mode that offers one. Returns the constructs and the synthesized JSON."""
    from raytpu.modules.compute_class import ComputeClass, ComputeClassProps
    from raytpu.modules.gke_cluster import GkeCluster, GkeClusterProps
    from raytpu.modules.head_pool import HeadPoolOptions
    from raytpu.modules.network import Network, NetworkProps
    from raytpu.modules.parts.cdk import App, TerraformStack, google_provider, kubernetes_provider
    from raytpu.modules.tpu_slice_pool import TpuSlicePoolOptions

    outdir = Path(tempfile.mkdtemp(prefix="raytpu-modules-"))
    app = App(outdir=str(outdir))
    scope = TerraformStack(app, "modules")
    google_provider.GoogleProvider(scope, "google", project=PROJECT)  # stacks declare providers
    network = Network(scope, "network", NetworkProps(name="c", project=PROJECT, region=REGION,
                                                     spec=NetworkSpec(master_cidr="172.16.0.48/28")))
    spec = GkeSpec(name="c", labels={"team": "ml"})
    cluster = GkeCluster(scope, "gke", GkeClusterProps(spec=spec, project=PROJECT, location=REGION, network=network,
                                                       overrides={"description": "escape hatch"}))
    pools = {}
    for name, gen, topo, machine, *_ in SHAPES:
        pools[name] = cluster.add_slice_pool(name, TpuSlicePoolOptions(slice=_slice(name, gen, topo,
                                                                                     machine_type=machine)))
    for case, mode, fields, options, _ in MODE_CASES:
        pools[case] = cluster.add_slice_pool(case, TpuSlicePoolOptions(
            slice=_slice(case, provisioning=mode, **fields), **options))
    pair = _slice("pair", "v5e", "2x2", count=2, disk_size_gib=200)
    for i in range(pair.count):
        pools[f"pair-{i}"] = cluster.add_slice_pool(f"pair-{i}", TpuSlicePoolOptions(
            slice=pair, index=i, labels={"team": "ml"}, overrides={"node_config.disk_type": "hyperdisk-balanced"}))
    head = cluster.add_head_pool("head-pool", HeadPoolOptions(
        spec=HeadPoolSpec(machine_type="n2-standard-4", min_nodes=0, max_nodes=2), zones=(ZONE,)))

    auto_scope = TerraformStack(app, "autopilot")
    google_provider.GoogleProvider(auto_scope, "google", project=PROJECT)
    auto_network = Network(auto_scope, "network", NetworkProps(name="a", project=PROJECT, region=REGION))
    auto = GkeCluster(auto_scope, "gke", GkeClusterProps(spec=GkeSpec(name="a", mode="autopilot"), project=PROJECT,
                                                         location=REGION, network=auto_network,
                                                         node_service_account="nodes@p.iam.gserviceaccount.com"))
    kubernetes_provider.KubernetesProvider(auto_scope, "kubernetes", host="https://example.invalid")
    classes = {}
    for case, mode, fields, _, _ in MODE_CASES:
        if PROVISIONING_MODES[mode].priority is not None:
            item = _slice(case, provisioning=mode, **fields)
            classes[case] = ComputeClass(auto_scope, f"cc-{case}", ComputeClassProps(slice=item, project=PROJECT))
    fallback = _slice("fallback", provisioning="reservation", reservation="r", fallback=("spot", "flex-start"))
    classes["fallback"] = ComputeClass(auto_scope, "cc-fallback", ComputeClassProps(
        slice=fallback, project=PROJECT, when_unsatisfiable="ScaleUpAnyway", labels={"team": "ml"}))
    app.synth()
    stacks = read_stacks(outdir)
    return {"cluster": cluster, "autopilot": auto, "pools": pools, "head": head, "classes": classes,
            "stack": stacks["modules"], "autopilot_stack": stacks["autopilot"], "network": network}


@pytest.fixture(scope="module")
def stack(built: dict[str, Any]) -> dict[str, Any]:
    return built["stack"]


@pytest.fixture(scope="module")
def pools(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return by_name(stack, "google_container_node_pool")


@pytest.mark.parametrize(("name", "gen", "topo", "machine", "want_machine", "hosts", "placement"), SHAPES,
                         ids=[s[0] for s in SHAPES])
def test_pool_shape_per_generation(pools: dict[str, Any], name: str, gen: str, topo: str, machine: str | None,
                                   want_machine: str, hosts: int, placement: str) -> None:
    pool = pools[f"{name}-0"]
    assert pool["node_config"]["machine_type"] == want_machine
    assert pool["node_count"] == hosts  # docs/FACTS.md#gke-node-pools-rules: node_count = hosts
    assert pool["node_locations"] == [ZONE]  # one zone per slice
    assert "guest_accelerator" not in pool["node_config"]  # TPUs never use guest_accelerator (that is GPUs)
    policy = pool.get("placement_policy")
    if placement == "none":
        assert policy is None, "single-host pools must not set a placement policy / tpu_topology"
    elif placement == "compact":
        assert policy == {"type": "COMPACT", "tpu_topology": topo}
    else:
        # tpu7x multi-host: a workload policy instead of COMPACT; placement_policy.type is Required in the schema
        # (resource_container_node_pool.go, hashicorp/terraform-provider-google e03b7622) and stays empty, and GKE
        # stores tpu_topology, so it is stated (the block is ForceNew: leaving it out replaces the pool every apply)
        assert policy["type"] == "" and policy["tpu_topology"] == topo
        assert policy["policy_name"].startswith("${google_compute_resource_policy.")


def test_shape_table_covers_every_generation_and_placement() -> None:
    from raytpu.core.tpu.catalog import GENERATIONS

    assert {s[1] for s in SHAPES} == set(GENERATIONS)
    assert {s[6] for s in SHAPES} == {"none", "compact", "workload-policy"}


def test_tpu7x_multi_host_gets_high_throughput_workload_policy(stack: dict[str, Any]) -> None:
    policies = by_name(stack, "google_compute_resource_policy")
    # named for the cluster ("c") too: resource policies are unique per project and region (issue 18, item 8)
    name = names.workload_policy_name("c", "tpu7x-multi-0")
    assert list(policies) == [name], "only multi-host tpu7x pools get a workload policy"
    policy = policies[name]
    # docs/FACTS.md#gke-node-pools-rules: workload_policy { type = "HIGH_THROUGHPUT", accelerator_topology = "<topo>" }
    assert policy["workload_policy"] == {"type": "HIGH_THROUGHPUT", "accelerator_topology": "2x2x2"}
    assert policy["region"] == REGION and policy["project"] == PROJECT


def test_every_tpu_pool_is_hardened_tainted_and_joins_its_cluster(pools: dict[str, Any]) -> None:
    tpu_pools = {n: p for n, p in pools.items() if n != "ray-head"}
    assert len(tpu_pools) == len(SHAPES) + len(MODE_CASES) + 2
    for name, pool in tpu_pools.items():
        config = pool["node_config"]
        # docs/FACTS.md#gke-cluster-terraform: node pools run the GKE metadata server (Workload Identity)
        assert config["workload_metadata_config"] == {"mode": "GKE_METADATA"}, name
        assert config["taint"] == [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}], name
        assert config["shielded_instance_config"]["enable_secure_boot"] is True, name
        # stated, docs/FACTS.md#gke-node-pools-rules
        assert "consume_reservation_type" in config["reservation_affinity"], name
        assert config["resource_labels"]["managed-by"] == "raytpu", name
        assert config["metadata"] == {"disable-legacy-endpoints": "true"}, name
        assert pool["cluster"].startswith("${google_container_cluster.gke_cluster_"), name
        assert (pool["project"], pool["location"]) == (PROJECT, REGION), name
        assert pool["upgrade_settings"] == {"max_surge": 0, "max_unavailable": 1, "strategy": "SURGE"}, name
        # What GKE rewrites on TPU hosts is ignored after create, or the next plan replaces the slice:
        # advanced_machine_features is ForceNew and not Computed (provider node_config.go) and GKE sets
        # threads_per_core=1 on TPU VMs (cloud-foundation-fabric PR #3972); vllm-project/ci-infra ignores the
        # same on its live TPU pools (terraform/gcp_old/tpu-inference/k8s/clusters.tf at d7afa9c, the TPU node
        # pools' lifecycle.ignore_changes).
        assert pool["lifecycle"]["ignore_changes"] == ["node_config[0].advanced_machine_features",
                                                       "node_config[0].shielded_instance_config",
                                                       "upgrade_settings"], name


def test_mode_table_covers_every_provisioning_mode() -> None:
    assert {m for _, m, *_ in MODE_CASES} == set(PROVISIONING_MODES)


@pytest.mark.parametrize(("case", "mode", "fields", "options", "want"), MODE_CASES, ids=[c[0] for c in MODE_CASES])
def test_provisioning_mode_sets_the_pool_fields(pools: dict[str, Any], case: str, mode: str, fields: dict[str, Any],
                                                options: dict[str, Any], want: dict[str, Any]) -> None:
    pool = pools[f"{case}-0"]
    config = pool["node_config"]
    assert config.get("spot", False) is want["spot"]
    assert config.get("flex_start", False) is want["flex_start"]
    assert config["reservation_affinity"] == want["affinity"]
    if want["queued"]:
        assert pool["queued_provisioning"] == {"enabled": True}
    else:
        assert "queued_provisioning" not in pool
    if want["scale_from_zero"]:
        assert "node_count" not in pool
        assert pool["initial_node_count"] == 0
        # Per-zone limits, not total_*: flex-start TPU pools need them (provider quirk,
        # docs/FACTS.md#gke-node-pools-rules).
        assert pool["autoscaling"] == {"min_node_count": 0, "max_node_count": MODE_HOSTS, "location_policy": "ANY"}
    else:
        assert pool["node_count"] == MODE_HOSTS
        assert "autoscaling" not in pool
    assert pool["management"] == {"auto_repair": want["auto_repair"], "auto_upgrade": True}
    if "max_run_duration" in want:
        assert config["max_run_duration"] == want["max_run_duration"]
    else:
        assert "max_run_duration" not in config


def test_slice_copies_are_pools_named_by_index_with_their_options(pools: dict[str, Any],
                                                                   built: dict[str, Any]) -> None:
    for i in range(2):
        pool = pools[f"pair-{i}"]
        assert pool["node_config"]["disk_size_gb"] == 200  # the slice's disk_size_gib
        assert pool["node_config"]["resource_labels"] == {"managed-by": "raytpu", "team": "ml"}
        assert pool["node_config"]["disk_type"] == "hyperdisk-balanced"  # the options' escape hatch
        assert built["pools"][f"pair-{i}"].props.cluster is built["cluster"]  # add_* wires the cluster in
    assert pools["v6e-multi-0"]["node_config"]["disk_size_gb"] == 100  # DEFAULT_DISK_SIZE_GIB


def test_head_pool_takes_its_spec(pools: dict[str, Any]) -> None:
    head = pools["ray-head"]
    assert head["node_config"]["machine_type"] == "n2-standard-4"
    assert head["initial_node_count"] == 0
    assert head["autoscaling"] == {"min_node_count": 0, "max_node_count": 2}
    assert head["node_locations"] == [ZONE]
    assert head["node_config"]["labels"] == {"raytpu/pool": "ray-head"}
    assert head["node_config"]["workload_metadata_config"] == {"mode": "GKE_METADATA"}
    assert "taint" not in head["node_config"]


def test_overrides_escape_hatch_reaches_raw_fields(stack: dict[str, Any]) -> None:
    assert only(stack, "google_container_cluster")["description"] == "escape hatch"


def test_standard_cluster_takes_its_spec_and_network(stack: dict[str, Any]) -> None:
    cluster = only(stack, "google_container_cluster")
    assert cluster["name"] == "c"
    assert cluster["remove_default_node_pool"] is True
    assert cluster["deletion_protection"] is True
    assert cluster["release_channel"] == {"channel": "RAPID"}
    assert cluster["resource_labels"] == {"managed-by": "raytpu", "team": "ml"}
    # docs/FACTS.md#gke-cluster-terraform: ray_operator_config is a LIST block in the bindings.
    assert cluster["addons_config"]["ray_operator_config"] == [{
        "enabled": True, "ray_cluster_logging_config": {"enabled": True},
        "ray_cluster_monitoring_config": {"enabled": True}}]
    assert cluster["workload_identity_config"] == {"workload_pool": f"{PROJECT}.svc.id.goog"}
    # The typed network: its VPC, subnet, secondary ranges and the spec's control-plane /28.
    assert cluster["network"].startswith("${google_compute_network.network_vpc_")
    assert cluster["subnetwork"].startswith("${google_compute_subnetwork.network_subnet_")
    assert cluster["ip_allocation_policy"] == {"cluster_secondary_range_name": "pods",
                                               "services_secondary_range_name": "services"}
    assert cluster["private_cluster_config"]["master_ipv4_cidr_block"] == "172.16.0.48/28"
    # Standard only (ConflictsWith enable_autopilot): Dataplane V2 enforces NetworkPolicy, Calico stays off.
    assert cluster["network_policy"] == {"enabled": False}
    assert cluster["enable_intranode_visibility"] is True
    assert cluster["enable_shielded_nodes"] is True


def test_autopilot_cluster_has_no_node_config(built: dict[str, Any]) -> None:
    cluster = only(built["autopilot_stack"], "google_container_cluster")
    assert cluster["enable_autopilot"] is True
    # hashicorp/terraform-provider-google google/services/container/resource_container_cluster.go (e03b7622):
    # enable_shielded_nodes, network_policy, remove_default_node_pool and enable_intranode_visibility are
    # ConflictsWith enable_autopilot (docs/FACTS.md#gke-cluster-provider-rules); Autopilot rejects node_config.
    for field in ("node_config", "remove_default_node_pool", "enable_shielded_nodes", "network_policy",
                  "enable_intranode_visibility", "initial_node_count"):
        assert field not in cluster, field
    assert cluster["datapath_provider"] == "ADVANCED_DATAPATH"
    assert cluster["cluster_autoscaling"]["auto_provisioning_defaults"]["service_account"] == \
        "nodes@p.iam.gserviceaccount.com"


# ComputeClass priorities per mode
# (https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes,
# docs/FACTS.md#gke-cluster-terraform): spot
# -> `spot: true`; reservation -> `reservations: {affinity: Specific, specific: [{name, project}]}`; flex-start ->
# `flexStart: {enabled: true}` and the slice's `maxRunDurationSeconds`; on-demand -> the TPU shape alone; queued has
# none. Every priority holds the slice's one zone, `location: {zones: [zone]}` (issue 27 item 6;
# GoogleCloudPlatform/compute-class-api types.go Priority.Location.Zones, Priority.MaxRunDurationSeconds).
TPU_4X4 = {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"}
IN_ZONE = {"location": {"zones": [ZONE]}}
PRIORITIES = {
    "mode-on-demand": [{"tpu": TPU_4X4, **IN_ZONE}],
    "mode-spot": [{"tpu": TPU_4X4, "spot": True, **IN_ZONE}],
    "mode-reservation": [{"tpu": TPU_4X4, "reservations": {"affinity": "Specific",
                                                           "specific": [{"name": "my-res", "project": PROJECT}]},
                          **IN_ZONE}],
    "mode-shared-res": [{"tpu": TPU_4X4, "reservations": {"affinity": "Specific",
                                                          "specific": [{"name": "shared", "project": PROJECT}]},
                         **IN_ZONE}],
    # A shared reservation named by its path: its owner is the ComputeClass's project (compute-class-api types.go
    # SpecificReservation.Project), not the cluster's.
    "mode-shared-res-path": [{"tpu": TPU_4X4, "reservations": {
        "affinity": "Specific", "specific": [{"name": "shared", "project": "other-proj"}]}, **IN_ZONE}],
    "mode-flex-start": [{"tpu": TPU_4X4, "flexStart": {"enabled": True}, "maxRunDurationSeconds": 86400, **IN_ZONE}],
    # compute-class-api Priority.MaxRunDurationSeconds is a field of any priority, not only flex-start's
    "mode-spot-run-s": [{"tpu": TPU_4X4, "spot": True, "maxRunDurationSeconds": 3600, **IN_ZONE}],
    "fallback": [{"tpu": TPU_4X4, "reservations": {"affinity": "Specific",
                                                   "specific": [{"name": "r", "project": PROJECT}]}, **IN_ZONE},
                 {"tpu": TPU_4X4, "spot": True, **IN_ZONE},
                 {"tpu": TPU_4X4, "flexStart": {"enabled": True}, **IN_ZONE}],
}


@pytest.mark.parametrize("case", sorted(PRIORITIES))
def test_compute_class_lists_the_slice_priorities_in_order(built: dict[str, Any], case: str) -> None:
    manifests = {m["manifest"]["metadata"]["name"]: m["manifest"]
                 for m in resources(built["autopilot_stack"], "kubernetes_manifest").values()}
    manifest = manifests[f"raytpu-{case}"]
    assert manifest["apiVersion"] == "cloud.google.com/v1" and manifest["kind"] == "ComputeClass"
    assert manifest["spec"]["priorities"] == PRIORITIES[case]
    assert manifest["spec"]["nodePoolAutoCreation"] == {"enabled": True}
    want = "ScaleUpAnyway" if case == "fallback" else "DoNotScaleUp"
    assert manifest["spec"]["whenUnsatisfiable"] == want
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "raytpu"


def test_compute_classes_exist_for_every_mode_with_a_priority(built: dict[str, Any]) -> None:
    offered = {c for c, m, *_ in MODE_CASES if PROVISIONING_MODES[m].priority is not None}
    assert set(built["classes"]) == offered | {"fallback"}
    assert set(PRIORITIES) == offered | {"fallback"}


# ----------------------------------------------------------------------------------------- guard rails


def _pool_options(**extra: Any) -> Any:
    from raytpu.modules.tpu_slice_pool import TpuSlicePoolOptions

    return TpuSlicePoolOptions(**{"slice": _slice("p"), **extra})


def _cluster_props(network: Any, **extra: Any) -> Any:
    from raytpu.modules.gke_cluster import GkeClusterProps

    return GkeClusterProps(**{"spec": GkeSpec(name="c"), "project": PROJECT, "location": REGION,
                              "network": network, **extra})


# What a construct is given, broken one field at a time: the slice spec it takes (SliceSpec.create), the
# cluster's spec parts, and the options/props the constructs check themselves. Each names the field.
# (unit, field, build)
GUARD_RAILS: list[tuple[str, str, Callable[[Any], object]]] = [
    ("slice", "provisioning", lambda n: _slice("p", provisioning="preemptible")),
    ("slice", "reservation", lambda n: _slice("p", provisioning="reservation")),
    ("slice", "reservation", lambda n: _slice("p", provisioning="spot", reservation="r")),
    ("slice", "reservation", lambda n: _slice("p", provisioning="flex-start", reservation="r")),
    ("slice", "reservation", lambda n: _slice("p", provisioning="queued", reservation="r")),
    ("slice", "max_run_duration_s", lambda n: _slice("p", provisioning="spot", max_run_duration_s=121 * 86400)),
    ("slice", "max_run_duration_s", lambda n: _slice("p", provisioning="flex-start", max_run_duration_s=60)),
    ("slice", "fallback", lambda n: _slice("p", provisioning="queued", fallback=("spot",))),  # no priority
    ("slice", "fallback", lambda n: _slice("p", provisioning="spot", fallback=("spot",))),  # repeats a mode
    ("slice", "fallback[0]", lambda n: _slice("p", provisioning="spot", fallback=("queued",))),
    ("slice", "fallback[1]", lambda n: _slice("p", provisioning="spot", fallback=("on-demand", "reservation"))),
    ("slice", "disk_size_gib", lambda n: _slice("p", disk_size_gib=5)),
    ("slice", "zone", lambda n: _slice("p", zone="us-east5")),
    ("slice", "name", lambda n: _slice("Bad_Name")),
    ("slice", "topology", lambda n: _slice("p", topology="4x5")),
    ("slice", "machine_type", lambda n: _slice("p", machine_type="ct5p-hightpu-4t")),
    ("slice", "count", lambda n: _slice("p", count=0)),
    ("pool", "labels['Team']", lambda n: _pool_options(labels={"Team": "x"})),
    ("pool", "index", lambda n: _pool_options(index=1)),
    ("pool", "reservation_project", lambda n: _pool_options(slice=_slice("p", provisioning="spot"),
                                                            reservation_project="p")),
    ("pool", "overrides[' x']", lambda n: _pool_options(overrides={" x": 1})),
    ("head", "min_nodes", lambda n: HeadPoolSpec(min_nodes=5, max_nodes=2)),
    ("head", "name", lambda n: _head_options(name="Head")),
    ("head", "zones", lambda n: _head_options(zones=("us-east5",))),
    ("cluster", "mode", lambda n: GkeSpec(name="c", mode="serverless")),
    ("cluster", "release_channel", lambda n: GkeSpec(name="c", release_channel="NIGHTLY")),
    ("cluster", "name", lambda n: GkeSpec(name="c" * 41)),
    ("cluster", "head_pool", lambda n: GkeSpec(name="c", mode="autopilot", head_pool=HeadPoolSpec())),
    ("cluster", "labels['Team']", lambda n: GkeSpec(name="c", labels={"Team": "x"})),
    ("cluster", "master_cidr", lambda n: NetworkSpec(master_cidr="172.16.0.0/24")),
    ("cluster", "pods_cidr", lambda n: NetworkSpec(pods_cidr="10.10.0.0/16")),
    ("cluster", "min_master_version", lambda n: _cluster_props(n, min_master_version="latest")),
    ("cluster", "location", lambda n: _cluster_props(n, location="us-east5-b")),
    ("cluster", "overrides['']", lambda n: _cluster_props(n, overrides={"": 1})),
    ("network", "region", lambda n: _network_props(region="us-east5-b")),
    ("network", "flow_log_sampling", lambda n: _network_props(flow_log_sampling=2)),
    ("network", "name", lambda n: _network_props(name="UPPER")),
    ("compute-class", "slice", lambda n: _compute_class(_slice("p", provisioning="queued"))),
    ("compute-class", "when_unsatisfiable", lambda n: _compute_class(_slice("p"), when_unsatisfiable="Never")),
    ("images", "repository_id", lambda n: _registry_props(repository_id="1-images")),
    ("images", "repository_id", lambda n: _registry_props(repository_id="r" * 64)),
    ("images", "builder_account_id", lambda n: _registry_props(builder_account_id="raytpu-a-very-long-cluster-imgs")),
    ("images", "location", lambda n: _registry_props(location="us-east5-b")),
    ("images", "labels['Team']", lambda n: _registry_props(labels={"Team": "x"})),
    ("images", "overrides['']", lambda n: _registry_props(overrides={"": 1})),
]


def _registry_props(**extra: Any) -> Any:
    from raytpu.modules.image_registry import ImageRegistryProps

    return ImageRegistryProps(**{"project": PROJECT, "location": REGION, "repository_id": "c-images",
                                 "builder_account_id": "raytpu-c-img", "pullers": (), "bucket": "b", **extra})


def _head_options(**extra: Any) -> Any:
    from raytpu.modules.head_pool import HeadPoolOptions

    return HeadPoolOptions(**extra)


def _network_props(**extra: Any) -> Any:
    from raytpu.modules.network import NetworkProps

    return NetworkProps(**{"name": "n", "project": PROJECT, "region": REGION, **extra})


def _compute_class(item: SliceSpec, **extra: Any) -> Any:
    from raytpu.modules.compute_class import ComputeClassProps

    return ComputeClassProps(slice=item, project=PROJECT, **extra)


@pytest.fixture(scope="module")
def network(built: dict[str, Any]) -> Any:
    return built["network"]


@pytest.mark.parametrize(("unit", "field", "build"), GUARD_RAILS,
                         ids=[f"{u}-{f}-{i}" for i, (u, f, _) in enumerate(GUARD_RAILS)])
def test_bad_input_raises_invalid_input_naming_the_field(network: Any, unit: str, field: str,
                                                         build: Callable[[Any], object]) -> None:
    with pytest.raises((InvalidInput, InvalidInputs)) as info:
        build(network)
    error = info.value
    assert isinstance(error, InvalidInput | InvalidInputs)
    assert _fields_of(error) == [field], str(error)
    assert "valid:" in str(error)


def test_other_props_guard_rails() -> None:
    from raytpu.modules.bucket import BucketProps
    from raytpu.modules.ray_workload import RayWorkloadProps
    from raytpu.modules.workload_identity import (
        KubernetesNamespaceProps,
        KubernetesServiceAccountProps,
        WorkloadIdentityProps,
    )

    cases: list[tuple[str, Callable[[], object]]] = [
        ("name", lambda: BucketProps(name="UPPER", project="p", location="us-east5")),
        ("noncurrent_version_retention_days",
         lambda: BucketProps(name="okay-bucket", project="p", location="us", noncurrent_version_retention_days=0)),
        ("cache_retention_days",
         lambda: BucketProps(name="okay-bucket", project="p", location="us", cache_retention_days=0)),
        ("checkpoint_noncurrent_days",
         lambda: BucketProps(name="okay-bucket", project="p", location="us", checkpoint_noncurrent_days=0)),
        ("bucket_role", lambda: WorkloadIdentityProps(project="p", account_id="raytpu-ray", namespace="ray",
                                                      ksa_name="ray", bucket="b", bucket_role="roles/owner")),
        ("account_id", lambda: WorkloadIdentityProps(project="p", account_id="x", namespace="ray",
                                                     ksa_name="ray", bucket="b")),
        ("ksa_name", lambda: WorkloadIdentityProps(project="p", account_id="raytpu-ray", namespace="ray",
                                                   ksa_name="ray..pods", bucket="b")),
        ("name", lambda: KubernetesServiceAccountProps(name="Ray_Pods", gsa_email="a@p.iam.gserviceaccount.com")),
        ("manifest", lambda: RayWorkloadProps(manifest={"apiVersion": "v1", "kind": "Pod"})),
        ("name", lambda: KubernetesNamespaceProps(name="default")),
    ]
    for field, build in cases:
        with pytest.raises((InvalidInput, InvalidInputs)) as info:
            build()
        error = info.value
        assert isinstance(error, InvalidInput | InvalidInputs)
        assert _fields_of(error) == [field], (field, str(error))


def test_a_kubernetes_serviceaccount_name_longer_than_a_slice_name_or_dotted_is_accepted() -> None:
    """KSA names are DNS-1123 subdomains (k8s.io/apimachinery ValidateServiceAccountName), as the stack output."""
    from raytpu.modules.workload_identity import KubernetesServiceAccountProps, WorkloadIdentityProps

    name = "inference-platform-prod.ray-worker-pods-serving-" + "a" * 40
    assert WorkloadIdentityProps(project="p", account_id="raytpu-ray", namespace="ray", ksa_name=name,
                                 bucket="b").member.endswith(f"[ray/{name}]")
    assert KubernetesServiceAccountProps(name=name, gsa_email="a@p.iam.gserviceaccount.com").name == name


def test_options_are_frozen_and_keyword_only() -> None:
    from raytpu.modules.tpu_slice_pool import TpuSlicePoolOptions

    options = _pool_options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.index = 1
    with pytest.raises(TypeError):
        TpuSlicePoolOptions(_slice("p"), 0)  # type: ignore[call-arg, arg-type]


def test_pool_options_name_the_pool_after_the_slice_copy() -> None:
    item = _slice("train", count=3)
    assert [_pool_options(slice=item, index=i).name for i in range(3)] == ["train-0", "train-1", "train-2"]


def test_autopilot_cluster_refuses_node_pools(built: dict[str, Any]) -> None:
    from raytpu.modules.head_pool import HeadPoolOptions

    cluster = built["autopilot"]
    for add in (lambda: cluster.add_slice_pool("p", _pool_options()),
                lambda: cluster.add_head_pool("h", HeadPoolOptions())):
        with pytest.raises(InvalidInput) as info:
            add()
        assert info.value.field == "mode"


def test_version_floor_takes_the_newest_requirement() -> None:
    from raytpu.core.specs.slices.gke_versions import version_floor
    from raytpu.core.tpu.catalog import RAY_OPERATOR_MIN_GKE_VERSION

    # docs/FACTS.md#tpu-catalog-gke: Ray Operator 1.30.0-gke.1747000; v6e 1.31.2-gke.1115000; tpu7x Standard
    # 1.34.0-gke.2201000, Autopilot 1.34.1-gke.3084001.
    assert version_floor([])[0] == RAY_OPERATOR_MIN_GKE_VERSION
    assert version_floor([plan_slice("v5e", "2x2")])[0] == RAY_OPERATOR_MIN_GKE_VERSION
    assert version_floor([plan_slice("v5e", "2x2"), plan_slice("v6e", "4x4")])[0] == "1.31.2-gke.1115000"
    assert version_floor([plan_slice("tpu7x", "2x2x2"), plan_slice("v6e", "4x4")])[0] == "1.34.0-gke.2201000"
    assert version_floor([plan_slice("tpu7x", "2x2x2")], "autopilot")[0] == "1.34.1-gke.3084001"
    # an Autopilot ComputeClass carries nodeSystemConfig (transparent hugepages), which needs 1.32.1-gke.1729000
    # (https://cloud.google.com/kubernetes-engine/docs/how-to/node-system-config;
    # docs/FACTS.md#preemption-notice-window)
    assert version_floor([plan_slice("v6e", "4x4")], "autopilot") == ("1.32.1-gke.1729000",
                                                                     "a ComputeClass's nodeSystemConfig")


def test_resource_ids_are_stable(stack: dict[str, Any]) -> None:
    paths = {r["//"]["metadata"]["path"] for r in resources(stack, "google_container_node_pool").values()}
    assert {"modules/gke/v6e-multi/pool", "modules/gke/pair-1/pool", "modules/gke/head-pool/pool"} <= paths
    policy = next(iter(resources(stack, "google_compute_resource_policy").values()))
    assert policy["//"]["metadata"]["path"] == "modules/gke/tpu7x-multi/workload-policy"
    network_paths = {r["//"]["metadata"]["path"] for r in resources(stack, "google_compute_network").values()}
    assert network_paths == {"modules/network/vpc"}
