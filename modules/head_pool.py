"""HeadPool: the small CPU node pool Ray head pods (and other CPU pods) run on, on Standard clusters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytpu import errors
from raytpu.modules import _props
from raytpu.modules.cdk import Construct, container_node_pool

HEAD_POOL_LABEL = "raytpu/pool"
"""Kubernetes node label of the head pool's nodes (value ``ray-head``)."""


@dataclass(frozen=True, kw_only=True)
class HeadPoolProps:
    """Props of :class:`HeadPool`.

    Attributes:
        name: Node pool name; default ``ray-head``.
        machine_type: CPU machine type; default ``n2-standard-8`` (a Ray head with dashboard and GCS).
        min_nodes: Autoscaling minimum per zone; default 1.
        max_nodes: Autoscaling maximum per zone; default 3.
        zones: Zones of the pool; default: none given, i.e. the cluster's zones (stacks pass the slices'
            zones so heads sit beside their TPUs).
        disk_size_gib: Boot disk per node; default 100.
        service_account: Email the nodes run as; default: the Compute Engine default service account.
        labels: GCP resource labels; ``managed-by: raytpu`` is always added.
        cluster: The cluster's id; default none, set by :meth:`GkeCluster.add_head_pool`.
        location: The cluster's location; default none, set by :meth:`GkeCluster.add_head_pool`.
        project: GCP project id; default none, set by :meth:`GkeCluster.add_head_pool`.
        overrides: Escape hatch: raw fields of ``google_container_node_pool`` by path.
    """

    name: str = "ray-head"
    machine_type: str = "n2-standard-8"
    min_nodes: int = 1
    max_nodes: int = 3
    zones: Sequence[str] = ()
    disk_size_gib: int = 100
    service_account: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    cluster: str | None = None
    location: str | None = None
    project: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _props.check_name("name", self.name, max_len=40)
        _props.check_range("min_nodes", self.min_nodes, 0, 1000)
        _props.check_range("max_nodes", self.max_nodes, 1, 1000)
        if self.min_nodes > self.max_nodes:
            raise errors.invalid_value("min_nodes", self.min_nodes, f"is above max_nodes ({self.max_nodes})",
                                       f"0 to {self.max_nodes}")
        for zone in self.zones:
            _props.check_zone("zones", zone)
        _props.check_range("disk_size_gib", self.disk_size_gib, 10, 65536, " GiB")
        _props.check_labels("labels", self.labels)
        _props.check_overrides("overrides", self.overrides)


class HeadPool(Construct):
    """An autoscaling CPU node pool labelled ``raytpu/pool=ray-head``. Resource id: ``pool``."""

    def __init__(self, scope: Construct, id: str, props: HeadPoolProps) -> None:
        super().__init__(scope, id)
        for name in ("cluster", "location", "project"):
            if getattr(props, name) is None:
                raise errors.missing(name, "to create a HeadPool directly",
                                     "set it, or create the pool with GkeCluster.add_head_pool")
        self.props = props
        np = container_node_pool
        self.pool = np.ContainerNodePool(
            self, "pool",
            name=props.name,
            project=props.project,
            cluster=props.cluster,  # type: ignore[arg-type]
            location=props.location,
            node_locations=list(props.zones) or None,
            initial_node_count=props.min_nodes,
            autoscaling=np.ContainerNodePoolAutoscaling(min_node_count=props.min_nodes,
                                                        max_node_count=props.max_nodes),
            management=np.ContainerNodePoolManagement(auto_repair=True, auto_upgrade=True),
            node_config=np.ContainerNodePoolNodeConfig(
                machine_type=props.machine_type,
                image_type="COS_CONTAINERD",
                disk_size_gb=props.disk_size_gib,
                service_account=props.service_account,
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
                metadata={"disable-legacy-endpoints": "true"},
                labels={HEAD_POOL_LABEL: "ray-head"},
                resource_labels=_props.with_default_labels(props.labels),
                workload_metadata_config=np.ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
                shielded_instance_config=np.ContainerNodePoolNodeConfigShieldedInstanceConfig(
                    enable_secure_boot=True, enable_integrity_monitoring=True),
            ),
        )
        _props.apply_overrides(self.pool, props.overrides)
