"""GkeCluster: a private, Workload-Identity GKE cluster (Standard or Autopilot) with the Ray Operator add-on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import date, datetime, time, timedelta
from typing import Any

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.cluster.cluster_parts import GkeSpec, MaintenanceWindowSpec
from raytpu.core.specs.field_rules import region_problems
from raytpu.core.specs.slices.gke_versions import hcl_version_at_least, version_key, version_problems
from raytpu.core.tpu.catalog import RAY_OPERATOR_MIN_GKE_VERSION
from raytpu.modules.head_pool import HeadPool, HeadPoolOptions, HeadPoolProps
from raytpu.modules.network import Network
from raytpu.modules.parts import _props
from raytpu.modules.parts._node_pool import NODE_OAUTH_SCOPES
from raytpu.modules.parts.cdk import (
    Construct,
    Precondition,
    TerraformResourceLifecycle,
    container_cluster,
    data_google_container_engine_versions,
)
from raytpu.modules.tpu_slice_pool import TpuSlicePool, TpuSlicePoolOptions, TpuSlicePoolProps
from raytpu.modules.workload_identity import WorkloadIdentity, WorkloadIdentityProps

WINDOW_ANCHOR = date(2025, 1, 4)
"""The date part of the window's start and end times, a Saturday: GKE takes the time of day and the duration
from them and the days from the recurrence (its own example starts a ``BYDAY=SA,SU`` window on 2000-01-01)."""


def maintenance_policy(window: MaintenanceWindowSpec) -> container_cluster.ContainerClusterMaintenancePolicy:
    """The cluster's recurring maintenance window (``recurring_window``: RFC 3339 start/end, RFC 5545 rule)."""
    hour, minute = (int(p) for p in window.start_utc.split(":"))
    start = datetime.combine(WINDOW_ANCHOR, time(hour, minute))
    end = start + timedelta(hours=window.hours)
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return container_cluster.ContainerClusterMaintenancePolicy(
        recurring_window=container_cluster.ContainerClusterMaintenancePolicyRecurringWindow(
            start_time=start.strftime(stamp), end_time=end.strftime(stamp), recurrence=window.recurrence))


@dataclass(frozen=True, kw_only=True)
class GkeClusterOptions:
    """What a caller chooses for the cluster: its spec, the create version (default the channel's), the version floor a
    precondition enforces, the nodes' service account, GCS FUSE and Ray logging/monitoring (on by default), and
    ``overrides`` of ``google_container_cluster``. Why each: docs/FACTS.md#terraform-modules."""

    spec: GkeSpec
    min_master_version: str | None = None
    version_floor: tuple[str, str] = (RAY_OPERATOR_MIN_GKE_VERSION, "the Ray Operator add-on")
    node_service_account: str | None = None
    gcs_fuse: bool = True
    ray_cluster_logging: bool = True
    ray_cluster_monitoring: bool = True
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        errors.raise_found(self._problems())

    def _problems(self) -> list[InvalidInput]:
        """These options' problems; a subclass adds its own fields' to ``super()._problems()``."""
        found = [] if self.min_master_version is None else version_problems("min_master_version",
                                                                            self.min_master_version)
        # the floor is named min_master_version too: it is the version the cluster is held at
        found += version_problems("min_master_version", self.version_floor[0])
        return found + _props.override_problems("overrides", self.overrides)


@dataclass(frozen=True, kw_only=True)
class GkeClusterProps(GkeClusterOptions):
    """Props of :class:`GkeCluster`: its options, the project (and so its identity pool), the region, and the Network it
    joins (whose spec's ``master_cidr`` is the control plane's private /28)."""

    project: str
    location: str
    network: Network

    def _problems(self) -> list[InvalidInput]:
        return [*super()._problems(), *region_problems("location", self.location)]


def _fields(options: Any) -> dict[str, Any]:
    """An options dataclass's fields, shallow (to extend it into props)."""
    return {f.name: getattr(options, f.name) for f in fields(options)}


class GkeCluster(Construct):
    """A private regional GKE cluster ready for Ray on TPU: Ray Operator add-on, Workload Identity, private nodes,
    Dataplane V2 (NetworkPolicy), GCS FUSE; Standard clusters drop the default pool, so add pools with
    :meth:`add_slice_pool` and :meth:`add_head_pool`. What is always on: docs/FACTS.md#terraform-modules.

    Resource ids: ``cluster``."""

    def __init__(self, scope: Construct, id: str, props: GkeClusterProps) -> None:
        super().__init__(scope, id)
        self.props = props
        spec = props.spec
        standard = not spec.autopilot
        network = props.network
        cc = container_cluster
        addons = cc.ContainerClusterAddonsConfig(
            ray_operator_config=[cc.ContainerClusterAddonsConfigRayOperatorConfig(
                enabled=True,
                ray_cluster_logging_config=cc.ContainerClusterAddonsConfigRayOperatorConfigRayClusterLoggingConfig(
                    enabled=props.ray_cluster_logging),
                ray_cluster_monitoring_config=(
                    cc.ContainerClusterAddonsConfigRayOperatorConfigRayClusterMonitoringConfig(
                        enabled=props.ray_cluster_monitoring)),
            )],
            gcs_fuse_csi_driver_config=cc.ContainerClusterAddonsConfigGcsFuseCsiDriverConfig(enabled=props.gcs_fuse),
        )
        mode_fields: dict[str, Any]
        if standard:
            mode_fields = {
                "remove_default_node_pool": True,
                "initial_node_count": 1,
                "enable_shielded_nodes": True,
                # Dataplane V2 enforces NetworkPolicy itself; the Calico add-on stays off. Both fields are
                # ConflictsWith enable_autopilot in the provider (resource_container_cluster.go); Autopilot has
                # Dataplane V2 and intranode visibility on by default.
                "network_policy": cc.ContainerClusterNetworkPolicy(enabled=False),
                "enable_intranode_visibility": True,
                "node_config": cc.ContainerClusterNodeConfig(
                    image_type="COS_CONTAINERD",
                    service_account=props.node_service_account,
                    oauth_scopes=list(NODE_OAUTH_SCOPES),
                    metadata={"disable-legacy-endpoints": "true"},
                    shielded_instance_config=cc.ContainerClusterNodeConfigShieldedInstanceConfig(
                        enable_secure_boot=True, enable_integrity_monitoring=True),
                    workload_metadata_config=cc.ContainerClusterNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
                ),
            }
        else:
            mode_fields = {"enable_autopilot": True}
            if props.node_service_account:
                mode_fields["cluster_autoscaling"] = cc.ContainerClusterClusterAutoscaling(
                    auto_provisioning_defaults=cc.ContainerClusterClusterAutoscalingAutoProvisioningDefaults(
                        service_account=props.node_service_account, oauth_scopes=list(NODE_OAUTH_SCOPES)))
        self.cluster = cc.ContainerCluster(
            self, "cluster",
            name=spec.name,
            project=props.project,
            location=props.location,
            network=network.vpc.id,
            subnetwork=network.subnet.id,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy=cc.ContainerClusterIpAllocationPolicy(
                cluster_secondary_range_name=network.pods_range_name,
                services_secondary_range_name=network.services_range_name,
            ),
            private_cluster_config=cc.ContainerClusterPrivateClusterConfig(
                enable_private_nodes=True,
                enable_private_endpoint=False,
                master_ipv4_cidr_block=network.props.spec.master_cidr,
                master_global_access_config=cc.ContainerClusterPrivateClusterConfigMasterGlobalAccessConfig(
                    enabled=True),
            ),
            master_authorized_networks_config=cc.ContainerClusterMasterAuthorizedNetworksConfig(
                gcp_public_cidrs_access_enabled=False,
                cidr_blocks=[cc.ContainerClusterMasterAuthorizedNetworksConfigCidrBlocks(
                    cidr_block=n.cidr, display_name=n.name) for n in spec.master_authorized_networks],
            ),
            control_plane_endpoints_config=cc.ContainerClusterControlPlaneEndpointsConfig(
                dns_endpoint_config=cc.ContainerClusterControlPlaneEndpointsConfigDnsEndpointConfig(
                    allow_external_traffic=spec.control_plane == "dns")),
            master_auth=cc.ContainerClusterMasterAuth(
                client_certificate_config=cc.ContainerClusterMasterAuthClientCertificateConfig(
                    issue_client_certificate=False)),
            workload_identity_config=cc.ContainerClusterWorkloadIdentityConfig(
                workload_pool=f"{props.project}.svc.id.goog"),
            datapath_provider="ADVANCED_DATAPATH",
            release_channel=cc.ContainerClusterReleaseChannel(channel=spec.release_channel),
            min_master_version=props.min_master_version,
            addons_config=addons,
            logging_config=cc.ContainerClusterLoggingConfig(enable_components=["SYSTEM_COMPONENTS", "WORKLOADS"]),
            monitoring_config=cc.ContainerClusterMonitoringConfig(
                enable_components=["SYSTEM_COMPONENTS"],
                managed_prometheus=cc.ContainerClusterMonitoringConfigManagedPrometheus(enabled=True),
            ),
            maintenance_policy=maintenance_policy(spec.maintenance_window),
            enable_legacy_abac=False,
            resource_labels=_props.with_default_labels(spec.labels),
            deletion_protection=spec.deletion_protection,
            **mode_fields,
        )
        self.versions = data_google_container_engine_versions.DataGoogleContainerEngineVersions(
            self, "versions", project=props.project, location=props.location)
        self.require_version(*props.version_floor)
        _props.apply_overrides(self.cluster, props.overrides)

    def require_version(self, floor: str, needed_by: str) -> None:
        """Fails the plan unless the release channel's default version (the version GKE creates the cluster
        at; ``google_container_engine_versions``) is ``floor`` or newer; the message names both."""
        version_key(floor)
        channel = self.props.spec.release_channel
        default = self.versions.release_channel_default_version.lookup(channel)
        self.cluster.lifecycle = TerraformResourceLifecycle(precondition=[Precondition(
            condition=f"${{{hcl_version_at_least(default, floor)}}}",
            error_message=f"GKE's {channel} release channel creates clusters at a version older than {floor}, "
                          f"which {needed_by} needs; valid: " + ("a faster release_channel (RAPID), or " if
                                                                 channel != "RAPID" else "") +
                          f"wait until {channel}'s default version reaches {floor}.")])

    @property
    def name(self) -> str:
        """The cluster's name (a token)."""
        return self.cluster.name

    @property
    def endpoint(self) -> str:
        """Where clients reach the API (a token): the DNS-based endpoint (``control_plane: dns``) or the IP."""
        if self.props.spec.control_plane == "dns":
            return self.cluster.control_plane_endpoints_config.dns_endpoint_config.endpoint
        return self.cluster.endpoint

    @property
    def ca_certificate(self) -> str:
        """The CA clients verify the API with: the cluster CA, base64-encoded PEM (a token), for the IP endpoint;
        empty for the DNS-based one, whose certificate is publicly trusted."""
        if self.props.spec.control_plane == "dns":
            return ""
        return self.cluster.master_auth.cluster_ca_certificate

    @property
    def workload_pool(self) -> str:
        """The Workload Identity pool, ``<project>.svc.id.goog``."""
        return f"{self.props.project}.svc.id.goog"

    def _require_standard(self, what: str) -> None:
        if self.props.spec.autopilot:
            raise errors.forbidden("mode", self.props.spec.mode, f"for {what} (Autopilot has no node pools)",
                                   "mode='standard', or a ComputeClass for Autopilot TPUs")

    def add_slice_pool(self, id: str, options: TpuSlicePoolOptions) -> TpuSlicePool:
        """Adds a TPU node pool (one copy of a slice) to this Standard cluster and returns it."""
        self._require_standard("add_slice_pool")
        return TpuSlicePool(self, id, TpuSlicePoolProps(**_fields(options), cluster=self))

    def add_head_pool(self, id: str, options: HeadPoolOptions) -> HeadPool:
        """Adds the CPU pool for Ray heads to this Standard cluster and returns it."""
        self._require_standard("add_head_pool")
        return HeadPool(self, id, HeadPoolProps(**_fields(options), cluster=self))

    def add_workload_identity(self, id: str, props: WorkloadIdentityProps) -> WorkloadIdentity:
        """Adds a Google service account bound to a KSA of this cluster; the binding waits for the cluster
        (the identity pool exists only once a Workload Identity cluster does)."""
        return WorkloadIdentity(self, id, props, after=[self.cluster])
