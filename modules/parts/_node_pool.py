"""What every node pool of the kit shares: its common options and its hardened node config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.cluster.cluster_parts import GkeSpec
from raytpu.core.specs.field_rules import label_problems
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import container_node_pool

NODE_OAUTH_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
"""Access is governed by IAM (Workload Identity), not by scopes."""


class JoinedClusterProps(Protocol):
    """What a node pool reads of its cluster's props (:class:`raytpu.modules.gke_cluster.GkeClusterProps`)."""

    @property
    def project(self) -> str: ...
    @property
    def location(self) -> str: ...
    @property
    def spec(self) -> GkeSpec: ...


class JoinedCluster(Protocol):
    """The cluster a node pool joins (:class:`raytpu.modules.gke_cluster.GkeCluster`), as the pool reads it: a
    protocol, so the pools' modules need not import the cluster's module, which imports them."""

    @property
    def props(self) -> JoinedClusterProps: ...
    @property
    def cluster(self) -> Any: ...  # its google_container_cluster (the pool reads its ``id``)



def joined_to(name: str, cluster: JoinedCluster) -> dict[str, Any]:
    """The arguments of ``google_container_node_pool`` that name a pool and the cluster it joins (alike for every
    pool of the kit)."""
    return {"name": name, "project": cluster.props.project, "cluster": cluster.cluster.id,
            "location": cluster.props.location}

@dataclass(frozen=True, kw_only=True)
class NodePoolOptions:
    """Options every node pool shares: the nodes' service account (default Compute Engine's), labels (``managed-by:
    raytpu`` always added) and ``overrides`` of ``google_container_node_pool``."""

    service_account: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        errors.raise_found(self._problems())

    def _problems(self) -> list[InvalidInput]:
        """This options' problems; a subclass adds its own fields' to ``super()._problems()``."""
        return [*label_problems("labels", self.labels), *_props.override_problems("overrides", self.overrides)]


def hardened_node_config(options: NodePoolOptions, machine_type: str, disk_size_gib: int,
                         **extra: Any) -> container_node_pool.ContainerNodePoolNodeConfig:
    """Node config of every pool: COS, GKE metadata server, secure boot, no legacy metadata endpoints."""
    np = container_node_pool
    return np.ContainerNodePoolNodeConfig(
        machine_type=machine_type,
        image_type="COS_CONTAINERD",
        disk_size_gb=disk_size_gib,
        service_account=options.service_account,
        oauth_scopes=list(NODE_OAUTH_SCOPES),
        metadata={"disable-legacy-endpoints": "true"},
        resource_labels=_props.with_default_labels(options.labels),
        workload_metadata_config=np.ContainerNodePoolNodeConfigWorkloadMetadataConfig(mode="GKE_METADATA"),
        shielded_instance_config=np.ContainerNodePoolNodeConfigShieldedInstanceConfig(
            enable_secure_boot=True, enable_integrity_monitoring=True),
        **extra,
    )
