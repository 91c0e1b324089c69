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

from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import kuberay
from raytpu.core.specs.slices.provisioning import MODES, generation_problems
from raytpu.core.tpu.catalog import GENERATIONS, MachineType

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
    (docs/FACTS.md#gke-cluster-provider-rules). Unset, GKE creates the cluster at the release channel's default
    (RCC:1667)."""
    version = cluster.get("min_master_version")
    return f"min_master_version pinned to {version}" if version else None


def control_plane_reachable(cluster: dict[str, Any]) -> str | None:
    """A private-nodes cluster whose public endpoint has no authorized network (and public CIDR access off) accepts
    no one, not even VMs in its VPC; GKE's DNS-based endpoint with external traffic allowed is reachable with IAM
    from anywhere (docs/FACTS.md#networking-private-endpoint;
    https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation)."""
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
    """Node config blocks that are ForceNew (provider node_config.go, ``schemaNodeConfig``:
    ``advanced_machine_features``, not Computed; ``shielded_instance_config``) and that GKE rewrites on TPU hosts
    (``threads_per_core=1``: cloud-foundation-fabric PR #3972; vllm-project/ci-infra ignores both on its live TPU
    pools, clusters.tf's ``lifecycle.ignore_changes`` at d7afa9c): unless ignored, the next plan replaces the
    slice."""
    ignored = set((pool.get("lifecycle") or {}).get("ignore_changes") or [])
    wanted = {"node_config[0].advanced_machine_features", "node_config[0].shielded_instance_config"}
    return None if wanted <= ignored else f"TPU pool does not ignore {sorted(wanted - ignored)}"


def autopilot_ironwood_placed_by_policy(stack: dict[str, Any], slices: dict[str, str]) -> str | None:
    """Autopilot multi-host tpu7x: a pre-created HIGH_THROUGHPUT workload policy with the slice's topology, which its
    pods select with ``cloud.google.com/placement-policy-name`` (docs/FACTS.md#gke-node-pools-placement; GKE Ironwood
    docs https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-ironwood). ``slices``: name -> topology."""
    policies = {p["name"]: p for p in resources(stack, "google_compute_resource_policy").values()}
    for name, topology in slices.items():
        policy = policies.get(names.workload_policy_name(CLUSTER_NAMES["autopilot"], name))
        if policy is None or policy.get("workload_policy") != {"type": "HIGH_THROUGHPUT",
                                                                 "accelerator_topology": topology}:
            return f"no HIGH_THROUGHPUT workload policy of topology {topology} for {name}"
    return None


def placement_type_required(pool: dict[str, Any]) -> str | None:
    """RCNP placement_policy: ``type`` is Required in the block (a workload policy leaves it empty, not absent)."""
    policy = pool.get("placement_policy")
    return None if policy is None or "type" in policy else "placement_policy without its Required type"


def single_host_no_topology(pool: dict[str, Any], hosts: int) -> str | None:
    """GKE: "TPU topology can't be specified with single-host TPU slice pool" (docs/FACTS.md#gke-node-pools-rules; GKE
    TPU node pool docs https://cloud.google.com/kubernetes-engine/docs/how-to/tpus#node-pool)."""
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


TPU_MACHINE_TYPES = frozenset(m.name for g in GENERATIONS.values() for m in g.machine_types)


def queued_and_flex_start_preconditions(pool: dict[str, Any]) -> str | None:
    """GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf preconditions (1047080):
    "placement_policy cannot be COMPACT when enable_queued_provisioning is true, unless using TPUs" (the TPU
    exception since bf7c3e1, PR #5218, whose TPU v6e queued blueprint sets COMPACT + tpu_topology); queued and
    flex-start want ``NO_RESERVATION`` and no nodes at minimum; flex-start excludes spot and a static
    ``node_count``; spot "only works with reservation_affinity consume_reservation_type NO_RESERVATION"."""
    queued = bool(_get(pool, "queued_provisioning.enabled"))
    flex, spot = bool(_get(pool, "node_config.flex_start")), bool(_get(pool, "node_config.spot"))
    affinity = _get(pool, "node_config.reservation_affinity.consume_reservation_type")
    if queued and _get(pool, "placement_policy.type") == "COMPACT" and \
            _get(pool, "node_config.machine_type") not in TPU_MACHINE_TYPES:
        return "COMPACT with queued provisioning on a machine type that is not a TPU"
    if (queued or flex or spot) and affinity != "NO_RESERVATION":
        return f"queued/flex-start/spot pool with reservation affinity {affinity}"
    if (queued or flex) and (pool.get("node_count") or _get(pool, "autoscaling.min_node_count")):
        return "queued/flex-start pool with nodes at minimum"
    if flex and spot:
        return "flex-start and spot together"
    return None


CA_MACHINES = {
    # GKE's cluster autoscaler: GoogleCloudPlatform/cluster-autoscaler 7d250507
    # pkg/cloudprovider/gke/machinetypes/deprecated_machine_types_config.go NewMachineTypeInfo(name, vCPUs, GiB)
    # (ct6e-standard-8t .withThreadsPerCoreOverride(1): SMT off); chips: deprecated_tpu_config.go fixedTpuCount
    "ct4p-hightpu-4t": (4, 240, 407), "ct5lp-hightpu-1t": (1, 24, 48), "ct5lp-hightpu-4t": (4, 112, 192),
    "ct5lp-hightpu-8t": (8, 224, 384), "ct5p-hightpu-4t": (4, 208, 448), "ct6e-standard-1t": (1, 44, 176),
    "ct6e-standard-4t": (4, 180, 720), "ct6e-standard-8t": (8, 180, 1440), "tpu7x-standard-4t": (4, 224, 992),
}


def worker_fits_its_node(machine_type: str, requests: dict[str, str]) -> str | None:
    """A pod whose requests exceed a node's allocatable never schedules there. Allocatable: the node's vCPUs and
    memory as GKE's autoscaler has them (table above) minus GKE's reservations
    (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_and_cpu_reservations)."""
    chips, vcpus, gib = CA_MACHINES[machine_type]
    node = MachineType(machine_type, chips, vcpus, gib)
    cpu_m, memory_mi = int(requests["cpu"].removesuffix("m")), int(requests["memory"].removesuffix("Mi"))
    if cpu_m > node.allocatable_cpu_m or memory_mi > node.allocatable_memory_mib or \
            requests["google.com/tpu"] != str(chips):
        return f"worker requests {requests} do not fit a {machine_type} node ({vcpus} vCPU, {gib} GiB, {chips} chips)"
    return None


GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
"""Compute Engine resource names (resource policies included): RFC 1035, ``[a-z]([-a-z0-9]*[a-z0-9])?``, 1-63
characters (https://cloud.google.com/compute/docs/naming-resources)."""


def resource_policy_names(stack: dict[str, Any]) -> str | None:
    """Every resource policy has a GCE name (uniqueness per project and region: the two-cluster test below)."""
    for policy in resources(stack, "google_compute_resource_policy").values():
        if not GCE_NAME.match(policy["name"]):
            return f"resource policy name {policy['name']!r} breaks GCE's name rules"
    return None


CLUSTER_NAMES = {"standard": "rules-stan", "autopilot": "rules-auto"}


def _matrix_config(mode: str) -> str:
    """One slice per generation x single/multi-host x provisioning mode, in one cluster."""
    lines = [f"project: my-ml-project\nregion: us-central1\ncluster: {{name: {CLUSTER_NAMES[mode]}, mode: {mode}}}",
             "slices:"]
    for gen in GENERATIONS.values():
        shapes = {"s": next(iter(gen.single_host_topologies)), "m": "2x2x2" if gen.mesh_dims == 3 else "4x4"}
        for kind, topology in shapes.items():
            for name, prov in MODES.items():
                if mode == "autopilot" and prov.priority is None:
                    continue  # refused at validate (test_autopilot_refuses_a_mode_no_compute_class_offers)
                if generation_problems((prov,), gen.name):
                    continue  # flex-start on v4: refused at validate (GKE's dws page; tests/test_capacity.py)
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
    from raytpu.core.tpu.plan import plan_slice

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
        offered = sum(1 for gen in GENERATIONS for prov in MODES.values() if not generation_problems((prov,), gen))
        assert len(tpu) == 2 * offered


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
                                tpu_host_drift_ignored(pool), queued_and_flex_start_preconditions(pool)) if p]
        assert problems == [], name


def test_every_standard_tpu_worker_fits_its_pools_nodes(matrix: dict[str, dict[str, Any]]) -> None:
    """Issue 18 item 1: a worker's requests come from the catalog; they must fit the node GKE really makes."""
    from raytpu.core.tpu.plan import plan_slice

    pools = {n: p for n, p in _pools(matrix).items() if n != "ray-head"}
    for name, pool in pools.items():
        _, topology = _slice_of(name.rsplit("-", 1)[0])
        plan = plan_slice(name.split("-", 1)[0], topology)
        assert pool["node_config"]["machine_type"] == plan.machine_type, name
        requests = kuberay.host_resources(plan, autopilot=False)["requests"]
        assert worker_fits_its_node(plan.machine_type, requests) is None, name
    for machine in CA_MACHINES:  # the machine types no matrix shape picks by default (v5e/v6e 8t, 2x4 on 4t)
        gen = next(g for g in GENERATIONS.values() if machine in {m.name for m in g.machine_types})
        topology = next(t for t, m in gen.single_host_topologies.items() if m.name == machine)
        requests = kuberay.host_resources(plan_slice(gen.name, topology, machine), autopilot=False)["requests"]
        assert worker_fits_its_node(machine, requests) is None, machine


def test_workload_policy_names_are_gce_names(matrix: dict[str, dict[str, Any]]) -> None:
    assert resources(_cluster_stack(matrix), "google_compute_resource_policy")  # tpu7x multi-host: one per slice
    assert resource_policy_names(_cluster_stack(matrix)) is None


LONGEST_CLUSTER = "c" * 39 + "x"
"""40 characters, GKE's longest cluster name (raytpu.core.specs.field_rules.CLUSTER_NAME)."""


def test_two_clusters_in_one_project_and_region_never_share_a_workload_policy() -> None:
    """Issue 18 item 8: Standard tpu7x pools were ``<slice>-<i>-wp`` whatever the cluster. Two clusters with the same
    slices in one project and region, at the longest names the kit allows: GKE's 40-character cluster name, and the
    longest multi-host slice name (its smoke jobs ``smoke-<slice>-<i>-<run id>`` fill raytpu.core.specs.spec's
    MULTI_HOST_NAME_LIMIT)."""
    from raytpu.core.common.names import RUN_ID_LENGTH
    from raytpu.core.specs.spec import MULTI_HOST_NAME_LIMIT

    count = 2
    longest = "s" * (MULTI_HOST_NAME_LIMIT - len(f"smoke--{count - 1}-") - RUN_ID_LENGTH)
    config = ("project: my-ml-project\nregion: us-central1\ncluster: {{name: {cluster}}}\nslices:\n"
              f"  - {{{{name: {longest}, generation: tpu7x, topology: 2x2x2, zone: us-central1-a, count: {count}}}}}\n")
    names = []
    for cluster in (LONGEST_CLUSTER, LONGEST_CLUSTER[:-1] + "y"):
        stack = _cluster_stack(synth_text(config.format(cluster=cluster)))
        policies = {key: p["name"] for key, p in resources(stack, "google_compute_resource_policy").items()}
        assert len(set(policies.values())) == count and resource_policy_names(stack) is None
        for pool in resources(stack, "google_container_node_pool").values():  # each pool takes its own policy
            if pool["name"] != "ray-head":
                key = pool["placement_policy"]["policy_name"].split(".")[1]
                assert policies[key].startswith(f"{pool['name']}-wp-"), pool["name"]
        names.append(set(policies.values()))
    assert names[0].isdisjoint(names[1]), names


def test_autopilot_refuses_a_mode_no_compute_class_offers() -> None:
    """Issue 18 item 9: Autopilot gets TPUs through ComputeClass priorities (spot, flexStart, reservations:
    https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes) and has no node pools to
    mark queued (``--enable-queued-provisioning`` is a node-pool flag:
    https://cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest). Such a slice used to synthesize
    nothing at all; now it never reaches synth."""
    offered = [m.name for m in MODES.values() if m.priority is not None]
    refused = [name for name, prov in MODES.items() if prov.priority is None]
    assert refused == ["queued"]
    for name in refused:
        config = (f"project: my-ml-project\nregion: us-central1\ncluster: {{name: q, mode: autopilot}}\nslices:\n"
                  f"  - {{name: q, generation: v6e, topology: 4x4, zone: us-central1-a, provisioning: {name}}}\n")
        with pytest.raises(InvalidInputs) as exc:
            synth_text(config)
        [problem] = exc.value.problems
        assert problem.field == "slices[0].provisioning" and repr(name) in problem.problem
        assert problem.valid.startswith(", ".join(offered))


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
    (queued_and_flex_start_preconditions, {"queued_provisioning": {"enabled": True}, "placement_policy": {
        "type": "COMPACT"}, "node_config": {"machine_type": "a3-highgpu-8g", "flex_start": True,
                                            "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"}}},
     ()),
    (queued_and_flex_start_preconditions, {"node_config": {"spot": True, "reservation_affinity": {
        "consume_reservation_type": "ANY_RESERVATION"}}}, ()),
    (queued_and_flex_start_preconditions, {"node_config": {"flex_start": True, "reservation_affinity": {
        "consume_reservation_type": "NO_RESERVATION"}}, "node_count": 2}, ()),
    (worker_fits_its_node, "ct6e-standard-8t", ({"cpu": "323127m", "memory": "1Mi", "google.com/tpu": "8"},)),
])
def test_each_pool_rule_fires(rule: Callable[..., str | None], pool: dict[str, Any], args: tuple[Any, ...]) -> None:
    assert rule(copy.deepcopy(pool), *args) is not None


def test_queued_tpu_pools_may_be_compact_the_rule_is_gpu_only() -> None:
    """Issue 18 item 7: the kit emits COMPACT + tpu_topology for multi-host queued TPU pools; cluster-toolkit refused
    that until bf7c3e1 and now refuses it only for non-TPU machine types (rule above)."""
    pool = {"queued_provisioning": {"enabled": True}, "placement_policy": {"type": "COMPACT", "tpu_topology": "4x4"},
            "autoscaling": {"min_node_count": 0}, "node_config": {
                "machine_type": "ct6e-standard-4t", "flex_start": True,
                "reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"}}}
    assert queued_and_flex_start_preconditions(pool) is None


def test_resource_policy_name_rule_fires() -> None:
    def stack(name: str) -> dict[str, Any]:
        return {"resource": {"google_compute_resource_policy": {"p": {"name": name}}}}

    for bad in ("Big-0-wp", "0-wp", "big-0-wp-", "b" * 64, "big_0_wp"):
        assert resource_policy_names(stack(bad)) is not None, bad
    assert resource_policy_names(stack("b" * 63)) is None


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
