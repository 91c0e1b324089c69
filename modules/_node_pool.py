"""What every node pool of the kit shares: its common props and its hardened node config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu import errors
from raytpu.modules import _props
from raytpu.modules.cdk import container_node_pool

NODE_OAUTH_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
"""Access is governed by IAM (Workload Identity), not by scopes."""


@dataclass(frozen=True, kw_only=True)
class NodePoolProps:
    """Props every node pool shares (bases of HeadPoolProps and TpuSlicePoolProps).

    Attributes:
        disk_size_gib: Boot disk per node; default 100.
        service_account: Email the nodes run as; default: the Compute Engine default service account.
        labels: GCP resource labels of the nodes; ``managed-by: raytpu`` is always added.
        cluster: The cluster's id; default none, set by the GkeCluster ``add_*`` method that creates the pool.
        location: The cluster's location; default none, set likewise.
        project: GCP project id; default none, set likewise.
        overrides: Escape hatch: raw fields of ``google_container_node_pool`` by path.
    """

    disk_size_gib: int = 100
    service_account: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    cluster: str | None = None
    location: str | None = None
    project: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _props.check_range("disk_size_gib", self.disk_size_gib, 10, 65536, " GiB")
        _props.check_labels("labels", self.labels)
        _props.check_overrides("overrides", self.overrides)

    def require_cluster(self, construct: str, add_method: str) -> None:
        """Raises unless cluster, location and project are set (a pool created outside GkeCluster)."""
        for name in ("cluster", "location", "project"):
            if getattr(self, name) is None:
                raise errors.missing(name, f"to create a {construct} directly",
                                     f"set it, or create the pool with GkeCluster.{add_method}")


def hardened_node_config(props: NodePoolProps, machine_type: str,
                         **extra: Any) -> container_node_pool.ContainerNodePoolNodeConfig:
    """Node config of every pool: COS, GKE metadata server, secure boot, no legacy metadata endpoints."""
    np = container_node_pool
    return np.ContainerNodePoolNodeConfig(
        machine_type=machine_type,
        image_type="COS_CONTAINERD",
        disk_size_gb=props.disk_size_gib,
        service_account=props.service_account,
        oauth_scopes=list(NODE_OAUTH_SCOPES),
        metadata={"disable-legacy-endpoints": "true"},
        resource_labels=_props.with_default_labels(props.labels),
        workload_metadata_config=np.ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
        shielded_instance_config=np.ContainerNodePoolNodeConfigShieldedInstanceConfig(
            enable_secure_boot=True, enable_integrity_monitoring=True),
        **extra,
    )
