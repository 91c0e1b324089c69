"""Synth tests of the constructs in raytpu.modules: node pool shapes per generation, provisioning modes,
guard rails of every props class, the escape hatch. One app is synthesized for the whole module."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from _synth import by_name, only, read_stacks, resources

from raytpu.errors import InvalidInput
from raytpu.plan import plan_slice

pytestmark = [pytest.mark.synth, pytest.mark.timeout(300)]

# name, generation, topology, machine type (None: default), expected machine type, hosts, placement
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

# pool name, provisioning, extra props
MODES: list[tuple[str, str, dict[str, Any]]] = [
    ("mode-on-demand", "on-demand", {}),
    ("mode-spot", "spot", {}),
    ("mode-reservation", "reservation", {"reservation": "my-res"}),
    ("mode-shared-res", "reservation", {"reservation": "shared", "reservation_project": "other-proj"}),
    ("mode-flex-start", "flex-start", {"max_run_duration_s": 86400}),
    ("mode-queued", "queued", {}),
]


def _cluster_props(**extra: Any) -> Any:
    from raytpu.modules.gke_cluster import GkeClusterProps

    base = dict(name="c", project="my-project", location="us-east5", network="net", subnetwork="sub",
                pods_range_name="pods", services_range_name="services")
    return GkeClusterProps(**{**base, **extra})


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    from raytpu.modules.cdk import App, TerraformStack, google_provider
    from raytpu.modules.gke_cluster import GkeCluster
    from raytpu.modules.tpu_slice_pool import TpuSlicePoolProps

    outdir = Path(tempfile.mkdtemp(prefix="raytpu-modules-"))
    app = App(outdir=str(outdir))
    scope = TerraformStack(app, "modules")
    google_provider.GoogleProvider(scope, "google", project="my-project")  # stacks declare providers
    cluster = GkeCluster(scope, "gke", _cluster_props(overrides={"description": "escape hatch"}))
    for name, gen, topo, machine, *_ in SHAPES:
        pool = cluster.add_slice_pool(name, TpuSlicePoolProps(name=name, plan=plan_slice(gen, topo, machine),
                                                              zone="us-east5-b"))
        assert pool.props.cluster is not None  # add_* wires the cluster in
    for name, mode, extra in MODES:
        cluster.add_slice_pool(name, TpuSlicePoolProps(name=name, plan=plan_slice("v6e", "4x4"), zone="us-east5-b",
                                                       provisioning=mode, **extra))  # type: ignore[arg-type]
    app.synth()
    return read_stacks(outdir)["modules"]


@pytest.fixture(scope="module")
def pools(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return by_name(stack, "google_container_node_pool")


@pytest.mark.parametrize(("name", "gen", "topo", "machine", "want_machine", "hosts", "placement"), SHAPES,
                         ids=[s[0] for s in SHAPES])
def test_pool_shape_per_generation(pools: dict[str, Any], name: str, gen: str, topo: str, machine: str | None,
                                   want_machine: str, hosts: int, placement: str) -> None:
    pool = pools[name]
    assert pool["node_config"]["machine_type"] == want_machine
    assert pool["node_count"] == hosts
    assert pool["node_locations"] == ["us-east5-b"]
    assert "guest_accelerator" not in pool["node_config"]
    policy = pool.get("placement_policy")
    if placement == "none":
        assert policy is None, "single-host pools must not set a placement policy / tpu_topology"
    elif placement == "compact":
        assert policy == {"type": "COMPACT", "tpu_topology": topo}
    else:
        assert "type" not in policy and "tpu_topology" not in policy
        assert policy["policy_name"].startswith("${google_compute_resource_policy.")


def test_tpu7x_multi_host_gets_high_throughput_workload_policy(stack: dict[str, Any]) -> None:
    policies = by_name(stack, "google_compute_resource_policy")
    assert list(policies) == ["tpu7x-multi-wp"], "only multi-host tpu7x pools get a workload policy"
    policy = policies["tpu7x-multi-wp"]
    assert policy["workload_policy"] == {"type": "HIGH_THROUGHPUT", "accelerator_topology": "2x2x2"}
    assert policy["region"] == "us-east5"


def test_every_pool_is_hardened_and_tainted(pools: dict[str, Any]) -> None:
    for name, pool in pools.items():
        config = pool["node_config"]
        assert config["workload_metadata_config"] == {"mode": "GKE_METADATA"}, name
        assert config["taint"] == [{"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"}], name
        assert config["shielded_instance_config"]["enable_secure_boot"] is True, name
        assert "consume_reservation_type" in config["reservation_affinity"], name
        assert config["resource_labels"]["managed-by"] == "raytpu"


@pytest.mark.parametrize(("name", "mode", "extra"), MODES, ids=[m[0] for m in MODES])
def test_provisioning_mode(pools: dict[str, Any], name: str, mode: str, extra: dict[str, Any]) -> None:
    pool = pools[name]
    config = pool["node_config"]
    affinity = config["reservation_affinity"]
    assert config.get("spot", False) is (mode == "spot")
    assert config.get("flex_start", False) is (mode == "flex-start")
    assert ("queued_provisioning" in pool) is (mode == "queued")
    if mode == "reservation":
        expected = extra["reservation"] if "reservation_project" not in extra else \
            f"projects/{extra['reservation_project']}/reservations/{extra['reservation']}"
        assert affinity == {"consume_reservation_type": "SPECIFIC_RESERVATION",
                            "key": "compute.googleapis.com/reservation-name", "values": [expected]}
    else:
        assert affinity == {"consume_reservation_type": "NO_RESERVATION"}
    if mode in ("flex-start", "queued"):
        assert "node_count" not in pool
        assert pool["initial_node_count"] == 0
        assert pool["autoscaling"]["min_node_count"] == 0
        assert pool["autoscaling"]["max_node_count"] == 4  # per-zone limits, = hosts of v6e 4x4
        assert "total_min_node_count" not in pool["autoscaling"]
        assert pool["management"]["auto_repair"] is False
    else:
        assert pool["node_count"] == 4
        assert "autoscaling" not in pool
        assert pool["management"] == {"auto_repair": True, "auto_upgrade": True}
    if mode == "flex-start":
        assert config["max_run_duration"] == "86400s"
    if mode == "queued":
        assert pool["queued_provisioning"] == {"enabled": True}


def test_overrides_escape_hatch_reaches_raw_fields(stack: dict[str, Any]) -> None:
    assert only(stack, "google_container_cluster")["description"] == "escape hatch"


def test_standard_cluster_properties(stack: dict[str, Any]) -> None:
    cluster = only(stack, "google_container_cluster")
    assert cluster["remove_default_node_pool"] is True
    assert cluster["deletion_protection"] is True
    assert cluster["addons_config"]["ray_operator_config"] == [{
        "enabled": True, "ray_cluster_logging_config": {"enabled": True},
        "ray_cluster_monitoring_config": {"enabled": True}}]


# ----------------------------------------------------------------------------------------- guard rails


def _pool(**extra: Any) -> Any:
    from raytpu.modules.tpu_slice_pool import TpuSlicePoolProps

    base: dict[str, Any] = dict(name="p", plan=plan_slice("v6e", "4x4"), zone="us-east5-b")
    return TpuSlicePoolProps(**{**base, **extra})


GUARD_RAILS: list[tuple[str, str, dict[str, Any]]] = [
    ("pool", "provisioning", {"provisioning": "preemptible"}),
    ("pool", "reservation", {"provisioning": "reservation"}),
    ("pool", "reservation", {"provisioning": "spot", "reservation": "r"}),
    ("pool", "reservation", {"provisioning": "flex-start", "reservation": "r"}),
    ("pool", "reservation", {"provisioning": "queued", "reservation": "r"}),
    ("pool", "reservation_project", {"provisioning": "spot", "reservation_project": "p"}),
    ("pool", "max_run_duration_s", {"provisioning": "spot", "max_run_duration_s": 3600}),
    ("pool", "max_run_duration_s", {"provisioning": "flex-start", "max_run_duration_s": 60}),
    ("pool", "disk_size_gib", {"disk_size_gib": 5}),
    ("pool", "zone", {"zone": "us-east5"}),
    ("pool", "name", {"name": "Bad_Name"}),
    ("pool", "plan", {"plan": "v6e-16"}),
    ("pool", "labels['Team']", {"labels": {"Team": "x"}}),
    ("cluster", "mode", {"mode": "serverless"}),
    ("cluster", "release_channel", {"release_channel": "NIGHTLY"}),
    ("cluster", "master_cidr", {"master_cidr": "172.16.0.0/24"}),
    ("cluster", "min_master_version", {"min_master_version": "latest"}),
    ("cluster", "location", {"location": "us-east5-b"}),
]


@pytest.mark.parametrize(("what", "field", "bad"), GUARD_RAILS,
                         ids=[f"{w}-{f}-{'-'.join(map(str, b.values()))}" for w, f, b in GUARD_RAILS])
def test_bad_props_raise_invalid_input_naming_the_field(what: str, field: str, bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput) as info:
        _pool(**bad) if what == "pool" else _cluster_props(**bad)
    assert info.value.field == field
    assert "valid:" in str(info.value)


def test_other_props_guard_rails() -> None:
    from raytpu.modules.bucket import BucketProps
    from raytpu.modules.compute_class import ComputeClassProps, TpuPriority
    from raytpu.modules.head_pool import HeadPoolProps
    from raytpu.modules.network import NetworkProps
    from raytpu.modules.ray_workload import RayWorkloadProps
    from raytpu.modules.workload_identity import KubernetesNamespaceProps, WorkloadIdentityProps

    plan = plan_slice("v6e", "4x4")
    cases = [
        ("pods_cidr", lambda: NetworkProps(name="n", project="p", region="us-east5", pods_cidr="10.10.0.0/16")),
        ("flow_log_sampling", lambda: NetworkProps(name="n", project="p", region="us-east5", flow_log_sampling=2)),
        ("name", lambda: BucketProps(name="UPPER", project="p", location="us-east5")),
        ("noncurrent_version_retention_days",
         lambda: BucketProps(name="okay-bucket", project="p", location="us", noncurrent_version_retention_days=0)),
        ("min_nodes", lambda: HeadPoolProps(min_nodes=5, max_nodes=2)),
        ("bucket_role", lambda: WorkloadIdentityProps(project="p", account_id="raytpu-ray", namespace="ray",
                                                      ksa_name="ray", bucket="b", bucket_role="roles/owner")),
        ("account_id", lambda: WorkloadIdentityProps(project="p", account_id="x", namespace="ray",
                                                     ksa_name="ray", bucket="b")),
        ("priorities", lambda: ComputeClassProps(name="cc", priorities=())),
        ("reservation", lambda: TpuPriority(plan=plan, spot=True, reservation="r", reservation_project="p")),
        ("manifest", lambda: RayWorkloadProps(manifest={"apiVersion": "v1", "kind": "Pod"})),
        ("name", lambda: KubernetesNamespaceProps(name="default")),
    ]
    for field, build in cases:
        with pytest.raises(InvalidInput) as info:
            build()
        assert info.value.field == field, (field, str(info.value))


def test_props_are_frozen_and_keyword_only() -> None:
    import dataclasses

    from raytpu.modules.tpu_slice_pool import TpuSlicePoolProps

    props = _pool()
    with pytest.raises(dataclasses.FrozenInstanceError):
        props.zone = "us-east5-a"
    with pytest.raises(TypeError):
        TpuSlicePoolProps("p", plan_slice("v6e", "4x4"), "us-east5-b")  # type: ignore[call-arg, arg-type]


def test_autopilot_cluster_refuses_node_pools() -> None:
    from raytpu.modules.cdk import App, TerraformStack
    from raytpu.modules.gke_cluster import GkeCluster

    stack = TerraformStack(App(outdir=tempfile.mkdtemp()), "s")
    cluster = GkeCluster(stack, "gke", _cluster_props(mode="autopilot"))
    with pytest.raises(InvalidInput) as info:
        cluster.add_slice_pool("p", _pool())
    assert info.value.field == "mode"


def test_compute_class_manifest_lists_tpu_priorities() -> None:
    from raytpu.modules.compute_class import ComputeClassProps, TpuPriority

    plan = plan_slice("v6e", "4x4")
    props = ComputeClassProps(name="raytpu-train", priorities=(
        TpuPriority(plan=plan, reservation="r", reservation_project="p"), TpuPriority(plan=plan, spot=True)))
    spec = props.manifest()["spec"]
    tpu = {"type": "tpu-v6e-slice", "count": 4, "topology": "4x4"}
    assert spec["priorities"] == [
        {"tpu": tpu, "reservations": {"affinity": "Specific", "specific": [{"name": "r", "project": "p"}]}},
        {"tpu": tpu, "spot": True},
    ]
    assert spec["whenUnsatisfiable"] == "DoNotScaleUp"


def test_min_gke_version_takes_the_newest_requirement() -> None:
    from raytpu.modules.gke_cluster import RAY_OPERATOR_MIN_GKE_VERSION, min_gke_version

    assert min_gke_version([]) == RAY_OPERATOR_MIN_GKE_VERSION
    assert min_gke_version([plan_slice("v5e", "2x2")]) == RAY_OPERATOR_MIN_GKE_VERSION
    assert min_gke_version([plan_slice("v5e", "2x2"), plan_slice("v6e", "4x4")]) == "1.31.2-gke.1115000"
    assert min_gke_version([plan_slice("tpu7x", "2x2x2"), plan_slice("v6e", "4x4")]) == "1.34.0-gke.2201000"
    assert min_gke_version([plan_slice("tpu7x", "2x2x2")], "autopilot") == "1.34.1-gke.3084001"
    assert min_gke_version([plan_slice("v6e", "4x4")], "autopilot") == "1.31.2-gke.1115000"


def test_resource_ids_are_stable(stack: dict[str, Any]) -> None:
    paths = {r["//"]["metadata"]["path"] for r in resources(stack, "google_container_node_pool").values()}
    assert "modules/gke/v6e-multi/pool" in paths
    policy = next(iter(resources(stack, "google_compute_resource_policy").values()))
    assert policy["//"]["metadata"]["path"] == "modules/gke/tpu7x-multi/workload-policy"
