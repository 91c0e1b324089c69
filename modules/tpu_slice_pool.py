"""TpuSlicePool: one GKE node pool that is one TPU slice, shaped entirely by a SlicePlan (FACTS.md section 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raytpu import errors
from raytpu.config import PROVISIONING_MODES, Provisioning
from raytpu.kuberay import QUEUED_LABEL
from raytpu.modules import _props
from raytpu.modules._node_pool import NodePoolProps, hardened_node_config
from raytpu.modules.cdk import Construct, compute_resource_policy, container_node_pool
from raytpu.plan import TPU_RESOURCE, SlicePlan

RESERVATION_KEY = "compute.googleapis.com/reservation-name"
MAX_RUN_DURATION_S = (600, 7 * 24 * 3600)


@dataclass(frozen=True, kw_only=True)
class TpuSlicePoolProps(NodePoolProps):
    """Props of :class:`TpuSlicePool`.

    Attributes:
        name: Node pool name (unique in the cluster), e.g. ``train-0``.
        plan: The slice's SlicePlan: machine type, host count, placement all come from it.
        zone: The one zone of the pool (TPU slices never span zones).
        provisioning: ``on-demand`` (default), ``spot``, ``reservation`` (needs ``reservation``),
            ``flex-start`` (DWS flex-start: capacity when available, up to ``max_run_duration_s``) or
            ``queued`` (DWS queued provisioning through ProvisioningRequests).
        reservation: Name of a specific reservation (with ``provisioning='reservation'`` only).
        reservation_project: Project that owns ``reservation``; default: the pool's project (a shared
            reservation from another project is named ``projects/<p>/reservations/<r>``).
        max_run_duration_s: Flex-start only: nodes are reclaimed after this long; default GKE's 7 days.
        (and the fields of :class:`NodePoolProps`: disk, service account, labels, cluster, overrides)
    """

    name: str
    plan: SlicePlan
    zone: str
    provisioning: Provisioning = "on-demand"
    reservation: str | None = None
    reservation_project: str | None = None
    max_run_duration_s: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _props.check_name("name", self.name, max_len=40)
        if not isinstance(self.plan, SlicePlan):
            raise errors.invalid_value("plan", self.plan, "is not a SlicePlan",
                                       "raytpu.plan.plan_slice(generation, topology)")
        _props.check_zone("zone", self.zone)
        _props.check_choice("provisioning", self.provisioning, PROVISIONING_MODES)
        mode = self.provisioning
        if mode == "reservation" and not self.reservation:
            raise errors.missing("reservation", "with provisioning='reservation'",
                                 "the name of a specific reservation")
        if mode != "reservation" and self.reservation:
            raise errors.forbidden("reservation", self.reservation, f"with provisioning={mode!r}",
                                   "remove reservation, or use provisioning='reservation'")
        if mode != "reservation" and self.reservation_project:
            raise errors.forbidden("reservation_project", self.reservation_project, f"with provisioning={mode!r}",
                                   "only with provisioning='reservation'")
        if self.max_run_duration_s is not None:
            if mode != "flex-start":
                raise errors.forbidden("max_run_duration_s", self.max_run_duration_s, f"with provisioning={mode!r}",
                                       "only with provisioning='flex-start'")
            _props.check_range("max_run_duration_s", self.max_run_duration_s, *MAX_RUN_DURATION_S, " seconds")

    @property
    def region(self) -> str:
        """The zone's region (where a workload policy lives)."""
        return self.zone.rsplit("-", 1)[0]


class TpuSlicePool(Construct):
    """One TPU slice as a GKE node pool.

    Shape (from the SlicePlan): ``machine_type``, ``node_locations = [zone]``, ``hosts`` nodes; multi-host
    pools get ``placement_policy {type=COMPACT, tpu_topology}``, multi-host tpu7x gets a
    ``google_compute_resource_policy`` with a HIGH_THROUGHPUT workload policy referenced by
    ``placement_policy.policy_name`` (``type`` unset), single-host pools get no placement policy.
    Every pool runs the GKE metadata server, is tainted ``google.com/tpu=present:NoSchedule``, states its
    reservation affinity, and has secure boot on.

    Provisioning: on-demand/spot/reservation pools hold ``hosts`` nodes (auto-repair and auto-upgrade on);
    flex-start and queued pools autoscale per zone between 0 and ``hosts`` with auto-repair off and
    ``NO_RESERVATION``.

    Resource ids: ``pool``; ``workload-policy`` (multi-host tpu7x only).
    """

    def __init__(self, scope: Construct, id: str, props: TpuSlicePoolProps) -> None:
        super().__init__(scope, id)
        props.require_cluster("TpuSlicePool", "add_slice_pool")
        self.props = props
        plan = props.plan
        mode = props.provisioning
        np = container_node_pool
        self.workload_policy: compute_resource_policy.ComputeResourcePolicy | None = None
        placement = None
        if plan.placement == "compact":
            placement = np.ContainerNodePoolPlacementPolicy(type="COMPACT", tpu_topology=plan.topology)
        elif plan.placement == "workload-policy":
            self.workload_policy = compute_resource_policy.ComputeResourcePolicy(
                self, "workload-policy",
                name=f"{props.name}-wp",
                project=props.project,
                region=props.region,
                workload_policy=compute_resource_policy.ComputeResourcePolicyWorkloadPolicy(
                    type="HIGH_THROUGHPUT", accelerator_topology=plan.topology),
            )

        dynamic = mode in ("flex-start", "queued")
        if mode == "reservation":
            values = [str(props.reservation) if props.reservation_project is None
                      else f"projects/{props.reservation_project}/reservations/{props.reservation}"]
            affinity = np.ContainerNodePoolNodeConfigReservationAffinity(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=values)
        else:
            affinity = np.ContainerNodePoolNodeConfigReservationAffinity(consume_reservation_type="NO_RESERVATION")

        node_config: dict[str, Any] = {}
        if mode == "spot":
            node_config["spot"] = True
        if mode == "flex-start":
            node_config["flex_start"] = True
            if props.max_run_duration_s is not None:
                node_config["max_run_duration"] = f"{props.max_run_duration_s}s"
        sizing: dict[str, Any]
        if dynamic:
            # Per-zone limits (not total_*): flex-start TPU pools need them (provider quirk, FACTS.md section 2).
            sizing = {"initial_node_count": 0,
                      "autoscaling": np.ContainerNodePoolAutoscaling(
                          min_node_count=0, max_node_count=plan.hosts, location_policy="ANY")}
        else:
            sizing = {"node_count": plan.hosts}

        self.pool = np.ContainerNodePool(
            self, "pool",
            name=props.name,
            project=props.project,
            cluster=props.cluster,  # type: ignore[arg-type]
            location=props.location,
            node_locations=[props.zone],
            placement_policy=placement,
            queued_provisioning=np.ContainerNodePoolQueuedProvisioning(enabled=True) if mode == "queued" else None,
            management=np.ContainerNodePoolManagement(auto_repair=not dynamic, auto_upgrade=True),
            upgrade_settings=np.ContainerNodePoolUpgradeSettings(max_surge=0, max_unavailable=1, strategy="SURGE"),
            node_config=hardened_node_config(
                props, plan.machine_type,
                reservation_affinity=affinity,
                taint=[np.ContainerNodePoolNodeConfigTaint(key=TPU_RESOURCE, value="present", effect="NO_SCHEDULE")],
                **node_config,
            ),
            **sizing,
        )
        if self.workload_policy is not None:
            # The binding makes placement_policy.type required, but with a workload policy it must stay
            # unset (setting it causes a diff on every apply): write the block raw.
            self.pool.add_override("placement_policy", {"policy_name": self.workload_policy.name})
        _props.apply_overrides(self.pool, props.overrides)

    @property
    def node_selector(self) -> dict[str, str]:
        """Labels a pod selects to land on this pool (queued pools add ``cloud.google.com/gke-queued``)."""
        selector = dict(self.props.plan.node_selector)
        if self.props.provisioning == "queued":
            selector[QUEUED_LABEL] = "true"
        return selector
