"""The real rules: what the google provider and GKE enforce, checked on a matrix of synthesized stacks.

Terraform's google provider cannot be downloaded here, so ``terraform plan`` cannot run: these rules are
transcribed from the provider's source and GKE's docs, each row citing where it comes from, and checked against
the synthesized JSON of every generation x single/multi-host x every provisioning mode x Standard/Autopilot.
Negative tests show each rule fires. Rules that are the kit's own choices are not in these tables.

Provider source: hashicorp/terraform-provider-google, branch release-8.0.0 at e03b7622a2 (the newest snapshot
reachable; our bindings are google 8.7): RCC = google/services/container/resource_container_cluster.go,
RCNP = google/services/container/resource_container_node_pool.go.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from _synth import resources, synth_text

from raytpu import kuberay
from raytpu.catalog import GENERATIONS
from raytpu.provisioning import MODES

pytestmark = [pytest.mark.synth, pytest.mark.timeout(600)]

Rule = Callable[[dict[str, Any]], str | None]

AUTOPILOT_CONFLICTS = {
    # field path in google_container_cluster: where the provider declares ConflictsWith enable_autopilot
    "network_policy": "RCC:1687-1693",
    "enable_intranode_visibility": "RCC:2459-2465",
    "enable_shielded_nodes": "RCC:1106-1112",
    "remove_default_node_pool": "RCC:2071-2076",
    "default_max_pods_per_node": "RCC:2254-2261",
    "node_pool": "RCC:1714-1724",
    "addons_config.network_policy_config": "RCC:389-396",
    "addons_config.dns_cache_config": "RCC:443-450",
    "addons_config.stateful_ha_config": "RCC:602-609",
    "cluster_autoscaling.enabled": "RCC:744-748",
    "cluster_autoscaling.resource_limits": "RCC:751-756",
}
"""Setting any of these with ``enable_autopilot = true`` fails at plan time
(``ConflictsWith: ["enable_autopilot"]``)."""


def _get(obj: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        if isinstance(obj, list):
            obj = obj[0] if obj else {}
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def autopilot_conflicts(cluster: dict[str, Any]) -> str | None:
    """RCC ConflictsWith enable_autopilot (table above)."""
    if not cluster.get("enable_autopilot"):
        return None
    set_ = [f"{f} ({AUTOPILOT_CONFLICTS[f]})" for f in AUTOPILOT_CONFLICTS if _get(cluster, f) is not None]
    return f"set with enable_autopilot: {', '.join(set_)}" if set_ else None


def private_cluster_block(cluster: dict[str, Any]) -> str | None:
    """RCC:2172-2179: master_ipv4_cidr_block is a /28 (ValidateFunc IsCIDRNetwork(28, 28))."""
    cidr = _get(cluster, "private_cluster_config.master_ipv4_cidr_block")
    return None if cidr is None or str(cidr).endswith("/28") else f"master_ipv4_cidr_block {cidr} is not a /28"


def create_version_not_pinned(cluster: dict[str, Any]) -> str | None:
    """RCC:2999: ``min_master_version`` is sent as the cluster's ``InitialClusterVersion``, and GKE refuses a
    version it no longer offers ("Master version ... is unsupported"): a pinned patch version goes stale
    (FACTS.md section 8). Unset, GKE creates the cluster at the release channel's default (RCC:1667)."""
    version = cluster.get("min_master_version")
    return f"min_master_version pinned to {version}" if version else None


def control_plane_reachable(cluster: dict[str, Any]) -> str | None:
    """A private-nodes cluster whose public endpoint has no authorized network (and public CIDR access off) accepts
    no one, not even VMs in its VPC; GKE's DNS-based endpoint with external traffic allowed is reachable with IAM
    from anywhere (FACTS.md section 8; https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation)."""
    dns = _get(cluster, "control_plane_endpoints_config.dns_endpoint_config.allow_external_traffic")
    networks = _get(cluster, "master_authorized_networks_config.cidr_blocks")
    return None if dns or networks else "no DNS endpoint for outside traffic and no authorized network"


_DAYS = re.compile(r"BYDAY=([A-Z,]+)")


def maintenance_window_allows_48h(cluster: dict[str, Any]) -> str | None:
    """RCC:1252-1280: ``recurring_window`` needs ``start_time``, ``end_time`` (RFC 3339) and ``recurrence`` (RFC
    5545). GKE: "at least 48 hours of maintenance availability in a 32-day rolling window. Only contiguous
    availability windows of at least four hours are considered"
    (https://cloud.google.com/kubernetes-engine/docs/maintenance-window). Any 32 days hold each weekday 4 times."""
    window = _get(cluster, "maintenance_policy.recurring_window")
    if window is None:
        return None
    if not all(window.get(k) for k in ("start_time", "end_time", "recurrence")):
        return "recurring_window without its Required start_time, end_time and recurrence"
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    hours = (datetime.strptime(window["end_time"], stamp) - datetime.strptime(window["start_time"], stamp))
    hours_each = hours.total_seconds() / 3600
    days = _DAYS.search(window["recurrence"])
    per_week = len(days[1].split(",")) if days else 7
    if hours_each < 4 or per_week * 4 * hours_each < 48:
        return f"{per_week} window(s) a week of {hours_each:g} h: under GKE's 48 h in 32 days"
    return None


def tpu_host_drift_ignored(pool: dict[str, Any]) -> str | None:
    """Node config blocks that are ForceNew (provider node_config.go: ``advanced_machine_features`` at
    NC:1280-1309, not Computed; ``shielded_instance_config`` at NC:646-670) and that GKE rewrites on TPU hosts
    (``threads_per_core=1``: cloud-foundation-fabric PR #3972; vllm-project/ci-infra ignores both on its live TPU
    pools, clusters.tf:419-436): unless ignored, the next plan replaces the slice."""
    ignored = set((pool.get("lifecycle") or {}).get("ignore_changes") or [])
    wanted = {"node_config[0].advanced_machine_features", "node_config[0].shielded_instance_config"}
    return None if wanted <= ignored else f"TPU pool does not ignore {sorted(wanted - ignored)}"


def autopilot_ironwood_placed_by_policy(stack: dict[str, Any], slices: dict[str, str]) -> str | None:
    """Autopilot multi-host tpu7x: a pre-created HIGH_THROUGHPUT workload policy with the slice's topology, which its
    pods select with ``cloud.google.com/placement-policy-name`` (FACTS.md section 8; GKE Ironwood docs
    https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-ironwood). ``slices``: name -> topology."""
    policies = {p["name"]: p for p in resources(stack, "google_compute_resource_policy").values()}
    for name, topology in slices.items():
        policy = policies.get(kuberay.workload_policy_name(CLUSTER_NAMES["autopilot"], name))
        if policy is None or policy.get("workload_policy") != {"type": "HIGH_THROUGHPUT",
                                                                 "accelerator_topology": topology}:
            return f"no HIGH_THROUGHPUT workload policy of topology {topology} for {name}"
    return None


def placement_type_required(pool: dict[str, Any]) -> str | None:
    """RCNP placement_policy: ``type`` is Required in the block (a workload policy leaves it empty, not absent)."""
    policy = pool.get("placement_policy")
    return None if policy is None or "type" in policy else "placement_policy without its Required type"


def single_host_no_topology(pool: dict[str, Any], hosts: int) -> str | None:
    """GKE: "TPU topology can't be specified with single-host TPU slice pool" (FACTS §2; GKE TPU node pool docs
    https://cloud.google.com/kubernetes-engine/docs/how-to/tpus#node-pool)."""
    if hosts == 1 and _get(pool, "placement_policy.tpu_topology") is not None:
        return "single-host pool states a tpu_topology"
    return None


def multi_host_topology_stated(pool: dict[str, Any], hosts: int, topology: str) -> str | None:
    """Multi-host TPU pools state their topology (COMPACT or a workload policy); GKE stores it and the block is
    ForceNew (RCNP placement_policy), so leaving it out replaces the pool on every apply."""
    if hosts > 1 and _get(pool, "placement_policy.tpu_topology") != topology:
        return f"multi-host pool does not state tpu_topology {topology}"
    return None


def queued_needs_flex_start(pool: dict[str, Any]) -> str | None:
    """GKE queued provisioning needs both flags: ``--enable-queued-provisioning`` and ``--flex-start``
    (https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest; xpk core/capacity.py)."""
    if _get(pool, "queued_provisioning.enabled") and not _get(pool, "node_config.flex_start"):
        return "queued_provisioning without node_config.flex_start"
    return None


def dynamic_pools_not_repaired(pool: dict[str, Any]) -> str | None:
    """Flex-start and queued TPU nodes run without auto-repair
    (https://cloud.google.com/kubernetes-engine/docs/how-to/dws-flex-start-training)."""
    if _get(pool, "node_config.flex_start") and _get(pool, "management.auto_repair"):
        return "flex-start pool with auto_repair on"
    return None


def no_guest_accelerator(pool: dict[str, Any]) -> str | None:
    """TPUs come from the TPU machine type; guest_accelerator is GPUs only (GKE TPU docs)."""
    return "TPU pool sets guest_accelerator" if _get(pool, "node_config.guest_accelerator") else None


CLUSTER_NAMES = {"standard": "rules-stan", "autopilot": "rules-auto"}


def _matrix_config(mode: str) -> str:
    """One slice per generation x single/multi-host x provisioning mode, in one cluster."""
    lines = [f"project: my-ml-project\nregion: us-central1\ncluster: {{name: {CLUSTER_NAMES[mode]}, mode: {mode}}}",
             "slices:"]
    for gen in GENERATIONS.values():
        shapes = {"s": next(iter(gen.single_host_topologies)), "m": "2x2x2" if gen.mesh_dims == 3 else "4x4"}
        for kind, topology in shapes.items():
            for name, prov in MODES.items():
                extra = ", reservation: r1" if prov.needs_reservation else ""
                lines.append(f"  - {{name: {gen.name}-{kind}-{name}, generation: {gen.name}, topology: {topology}, "
                             f"zone: us-central1-a, provisioning: {name}{extra}}}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", params=["standard", "autopilot"])
def matrix(request: pytest.FixtureRequest) -> dict[str, dict[str, Any]]:
    return synth_text(_matrix_config(request.param))


def _cluster_stack(stacks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return next(s for sid, s in stacks.items() if sid.endswith("-cluster"))


def _pools(stacks: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in resources(_cluster_stack(stacks), "google_container_node_pool").values()}


def _slice_of(pool_name: str) -> tuple[int, str]:
    from raytpu.plan import plan_slice

    gen, kind, _ = pool_name.split("-", 2)
    gen_obj = GENERATIONS[gen]
    topology = next(iter(gen_obj.single_host_topologies)) if kind == "s" else (
        "2x2x2" if gen_obj.mesh_dims == 3 else "4x4")
    return plan_slice(gen, topology).hosts, topology


def test_the_matrix_covers_every_generation_shape_mode_and_cluster_mode(matrix: dict[str, dict[str, Any]]) -> None:
    cluster = next(iter(resources(_cluster_stack(matrix), "google_container_cluster").values()))
    pools = _pools(matrix)
    if cluster.get("enable_autopilot"):
        assert pools == {}
    else:
        tpu = {n for n in pools if n != "ray-head"}
        assert len(tpu) == len(GENERATIONS) * 2 * len(MODES)


def test_cluster_obeys_the_providers_rules(matrix: dict[str, dict[str, Any]]) -> None:
    for cluster in resources(_cluster_stack(matrix), "google_container_cluster").values():
        assert autopilot_conflicts(cluster) is None
        assert private_cluster_block(cluster) is None
        assert create_version_not_pinned(cluster) is None
        assert control_plane_reachable(cluster) is None
        assert maintenance_window_allows_48h(cluster) is None


def test_autopilot_places_multi_host_ironwood_by_a_workload_policy(matrix: dict[str, dict[str, Any]]) -> None:
    stack = _cluster_stack(matrix)
    cluster = next(iter(resources(stack, "google_container_cluster").values()))
    if not cluster.get("enable_autopilot"):
        return
    ironwood = {f"tpu7x-m-{name}": "2x2x2" for name, prov in MODES.items() if prov.priority is not None}
    assert autopilot_ironwood_placed_by_policy(stack, ironwood) is None
    assert autopilot_ironwood_placed_by_policy(stack, {"tpu7x-m-other": "2x2x2"}) is not None  # fires


def test_every_tpu_pool_obeys_the_providers_and_gkes_rules(matrix: dict[str, dict[str, Any]]) -> None:
    for name, pool in _pools(matrix).items():
        if name == "ray-head":
            continue
        hosts, topology = _slice_of(name.rsplit("-", 1)[0])
        problems = [p for p in (placement_type_required(pool), single_host_no_topology(pool, hosts),
                                multi_host_topology_stated(pool, hosts, topology), queued_needs_flex_start(pool),
                                dynamic_pools_not_repaired(pool), no_guest_accelerator(pool),
                                tpu_host_drift_ignored(pool)) if p]
        assert problems == [], name


# ---------------------------------------------------------------------------------- each rule fires


def test_autopilot_conflict_rule_fires_for_each_field() -> None:
    for field in AUTOPILOT_CONFLICTS:
        cluster: dict[str, Any] = {"enable_autopilot": True}
        node: Any = cluster
        *parents, last = field.split(".")
        for part in parents:
            node = node.setdefault(part, [{}])[0]
        node[last] = True
        assert autopilot_conflicts(cluster) is not None, field
        assert autopilot_conflicts({**cluster, "enable_autopilot": False}) is None


@pytest.mark.parametrize(("rule", "pool", "args"), [
    (placement_type_required, {"placement_policy": {"policy_name": "wp"}}, ()),
    (single_host_no_topology, {"placement_policy": {"type": "COMPACT", "tpu_topology": "2x2"}}, (1,)),
    (multi_host_topology_stated, {"placement_policy": {"type": "", "policy_name": "wp"}}, (2, "2x2x2")),
    (queued_needs_flex_start, {"queued_provisioning": {"enabled": True}, "node_config": {}}, ()),
    (dynamic_pools_not_repaired, {"node_config": {"flex_start": True}, "management": {"auto_repair": True}}, ()),
    (no_guest_accelerator, {"node_config": {"guest_accelerator": [{"type": "nvidia-l4", "count": 1}]}}, ()),
    (tpu_host_drift_ignored, {"lifecycle": {"ignore_changes": ["upgrade_settings"]}}, ()),
])
def test_each_pool_rule_fires(rule: Callable[..., str | None], pool: dict[str, Any], args: tuple[Any, ...]) -> None:
    assert rule(copy.deepcopy(pool), *args) is not None


def test_master_cidr_rule_fires() -> None:
    assert private_cluster_block({"private_cluster_config": {"master_ipv4_cidr_block": "172.16.0.0/24"}})


@pytest.mark.parametrize(("rule", "cluster"), [
    (create_version_not_pinned, {"min_master_version": "1.31.2-gke.1115000"}),
    (control_plane_reachable, {"control_plane_endpoints_config": {"dns_endpoint_config": {
        "allow_external_traffic": False}}, "master_authorized_networks_config": {"cidr_blocks": []}}),
    (maintenance_window_allows_48h, {"maintenance_policy": {"recurring_window": {
        "start_time": "2025-01-04T02:00:00Z", "end_time": "2025-01-04T10:00:00Z",
        "recurrence": "FREQ=WEEKLY;BYDAY=SA"}}}),
    (maintenance_window_allows_48h, {"maintenance_policy": {"recurring_window": {
        "start_time": "2025-01-04T02:00:00Z", "end_time": "2025-01-04T05:00:00Z", "recurrence": "FREQ=DAILY"}}}),
    (maintenance_window_allows_48h, {"maintenance_policy": {"recurring_window": {"recurrence": "FREQ=DAILY"}}}),
])
def test_each_cluster_rule_fires(rule: Callable[[dict[str, Any]], str | None], cluster: dict[str, Any]) -> None:
    assert rule(cluster) is not None
