"""TpuSlicePool: one GKE node pool that is one TPU slice, shaped by a SliceSpec (its plan and provisioning)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from raytpu.core.common import errors, names
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.field_rules import DISK_SIZE_GIB, range_problems
from raytpu.core.specs.slices.gke_versions import long_notice_check
from raytpu.core.specs.slices.provisioning import RESERVATION_KEY, TPU_TAINT, reservation_parts
from raytpu.core.specs.spec import SliceSpec
from raytpu.modules.parts import _props, node_system
from raytpu.modules.parts._node_pool import JoinedCluster, NodePoolOptions, hardened_node_config, joined_to
from raytpu.modules.parts.cdk import Construct, Precondition, TerraformResourceLifecycle, container_node_pool
from raytpu.modules.workload_policy import WorkloadPolicy, WorkloadPolicyProps


@dataclass(frozen=True, kw_only=True)
class TpuSlicePoolOptions(NodePoolOptions):
    """What a caller chooses for one TPU slice pool: the slice (shape, zone, provisioning, disk), which copy (``index``,
    naming the pool ``<slice>-<index>``), the project owning a consumed reservation, and the boot disk; plus the fields
    of :class:`NodePoolOptions`."""

    slice: SliceSpec
    index: int = 0
    reservation_project: str | None = None
    disk_size_gib: int | None = None

    def _problems(self) -> list[InvalidInput]:
        found = [*super()._problems(), *range_problems("index", self.index, 0, self.slice.count - 1)]
        if self.disk_size_gib is not None:
            found += range_problems("disk_size_gib", self.disk_size_gib, *DISK_SIZE_GIB, " GiB")
        if self.reservation_project is not None and not self.slice.provisioning.needs_reservation:
            found.append(errors.forbidden(
                "reservation_project", self.reservation_project,
                f"with provisioning: {self.slice.provisioning.name} (no reservation to own)",
                "remove reservation_project, or use a slice with provisioning: reservation"))
        return found

    @property
    def name(self) -> str:
        """The node pool's name, ``<slice>-<index>``."""
        return self.slice.pool_names[self.index]


@dataclass(frozen=True, kw_only=True)
class TpuSlicePoolProps(TpuSlicePoolOptions):
    """Props of :class:`TpuSlicePool`: its options and the cluster it joins (``GkeCluster.add_slice_pool``)."""

    cluster: JoinedCluster



TPU_HOST_DRIFT = ("node_config[0].advanced_machine_features", "node_config[0].shielded_instance_config",
                  "upgrade_settings")
"""Fields GKE rewrites on TPU hosts (SMT off, shielded instance config, upgrade settings), ignored after create so a
later plan never replaces a slice (the first two are ForceNew).
Source: vllm-project/ci-infra's TPU node pools' ``lifecycle.ignore_changes`` (docs/FACTS.md#terraform-constructs)."""


class TpuSlicePool(Construct):
    """One TPU slice as a GKE node pool: the plan's shape, a placement policy on multi-host pools (a per-cluster
    HIGH_THROUGHPUT workload policy for multi-host tpu7x), the TPU taint, stated reservation affinity and secure boot;
    provisioning fields from the slice's mode, node system settings from :mod:`raytpu.modules.parts.node_system`.
    Details: docs/FACTS.md#terraform-modules.

    Resource ids: ``pool``; ``workload-policy`` (multi-host tpu7x only)."""

    def __init__(self, scope: Construct, id: str, props: TpuSlicePoolProps) -> None:
        super().__init__(scope, id)
        self.props = props
        item = props.slice
        plan = item.plan
        cluster = props.cluster.props
        fields = item.provisioning.pool
        np = container_node_pool
        self.workload_policy: WorkloadPolicy | None = None
        placement = None
        if plan.placement == "compact":
            # Queued pools too: COMPACT + tpu_topology is how a multi-host TPU slice is asked for; tpu7x takes its
            # workload policy below, queued or not. Source: cluster-toolkit gke-node-pool
            # (docs/FACTS.md#terraform-constructs).
            placement = np.ContainerNodePoolPlacementPolicy(type="COMPACT", tpu_topology=plan.topology)
        elif plan.placement == "workload-policy":
            self.workload_policy = WorkloadPolicy(self, "workload-policy", WorkloadPolicyProps(
                cluster_name=cluster.spec.name, owner=props.name, project=cluster.project, region=item.region,
                topology=plan.topology))
        if fields.reservation:
            given, name = reservation_parts(str(item.reservation))
            owner = given or props.reservation_project
            values = [name if owner is None else f"projects/{owner}/reservations/{name}"]
            affinity = np.ContainerNodePoolNodeConfigReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=values)
        else:
            affinity = np.ContainerNodePoolNodeConfigReservationAffinity(consume_reservation_type="NO_RESERVATION")
        node_config: dict[str, object] = {
            "linux_node_config": np.ContainerNodePoolNodeConfigLinuxNodeConfig(
                transparent_hugepage_enabled=node_system.thp_setting(item))}
        window = node_system.shutdown_window(item)
        checks = []
        if window is not None:
            node_config["kubelet_config"] = np.ContainerNodePoolNodeConfigKubeletConfig(
                shutdown_grace_period_seconds=window[0], shutdown_grace_period_critical_pods_seconds=window[1])
            # The API refuses the window on an older control plane, whatever the channel's default.
            checks.append(Precondition(**long_notice_check(props.cluster.cluster.master_version)))
        if fields.spot:
            node_config["spot"] = True
        if fields.flex_start:
            node_config["flex_start"] = True
        if item.max_run_duration_s is not None:  # any mode: the provider's field is not tied to flex_start
            node_config["max_run_duration"] = f"{item.max_run_duration_s}s"
        sizing: dict[str, object]
        if fields.scale_from_zero:
            # Per-zone limits (not total_*): flex-start TPU pools need them.
            # Source: https://cloud.google.com/kubernetes-engine/docs/how-to/dws-flex-start-training
            sizing = {"initial_node_count": 0,
                      "autoscaling": np.ContainerNodePoolAutoscaling(
                          min_node_count=0, max_node_count=plan.hosts, location_policy="ANY")}
        else:
            sizing = {"node_count": plan.hosts}

        self.pool = np.ContainerNodePool(
            self, "pool",
            **joined_to(props.name, props.cluster),
            node_locations=[item.zone],
            placement_policy=placement,
            queued_provisioning=np.ContainerNodePoolQueuedProvisioning(enabled=True) if fields.queued else None,
            management=np.ContainerNodePoolManagement(auto_repair=fields.auto_repair, auto_upgrade=True),
            upgrade_settings=np.ContainerNodePoolUpgradeSettings(max_surge=0, max_unavailable=1, strategy="SURGE"),
            node_config=hardened_node_config(
                props, plan.machine_type, props.disk_size_gib or item.disk_gib,
                reservation_affinity=affinity,
                labels={names.SLICE_LABEL: item.name},  # what the slice's TPU pods select (kuberay.tpu_placement)
                taint=[np.ContainerNodePoolNodeConfigTaint(key=TPU_TAINT, value="present", effect="NO_SCHEDULE")],
                **node_config,
            ),
            lifecycle=TerraformResourceLifecycle(ignore_changes=list(TPU_HOST_DRIFT), precondition=checks or None),
            **sizing,  # type: ignore[arg-type]
        )
        if self.workload_policy is not None:
            # A workload policy replaces COMPACT: `type` is Required in the schema but must be empty, and GKE stores
            # the topology, so it is stated too (the block is ForceNew: a missing field would replace the pool on
            # every apply). Source: provider ``resource_container_node_pool.go`` placement_policy
            # (docs/FACTS.md#terraform-constructs).
            self.pool.add_override("placement_policy", {"type": "", "policy_name": self.workload_policy.name,
                                                        "tpu_topology": plan.topology})
        _props.apply_overrides(self.pool, props.overrides)

    def grow_boot_disk(self, disk_size_gib: int) -> None:
        """Raises the hosts' boot disk to ``disk_size_gib`` (a workload added after the pool needs room for its
        weights: :func:`raytpu.core.specs.serving.node_disk.boot_disk_gib`); never shrinks it."""
        errors.raise_found(range_problems("disk_size_gib", disk_size_gib, *DISK_SIZE_GIB, " GiB"))
        current = self.props.disk_size_gib or self.props.slice.disk_gib
        if disk_size_gib > current:
            self.props = replace(self.props, disk_size_gib=disk_size_gib)
            self.pool.add_override("node_config.disk_size_gb", disk_size_gib)
