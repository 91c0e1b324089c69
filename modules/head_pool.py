"""HeadPool: the small CPU node pool Ray head pods (and other CPU pods) run on, on Standard clusters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from raytpu import errors
from raytpu.modules import _props
from raytpu.modules._node_pool import NodePoolProps, hardened_node_config
from raytpu.modules.cdk import Construct, container_node_pool

HEAD_POOL_LABEL = "raytpu/pool"
"""Kubernetes node label of the head pool's nodes (value ``ray-head``)."""


@dataclass(frozen=True, kw_only=True)
class HeadPoolProps(NodePoolProps):
    """Props of :class:`HeadPool`.

    Attributes:
        name: Node pool name; default ``ray-head``.
        machine_type: CPU machine type; default ``n2-standard-8`` (a Ray head with dashboard and GCS).
        min_nodes: Autoscaling minimum per zone; default 1.
        max_nodes: Autoscaling maximum per zone; default 3.
        zones: Zones of the pool; default: none given, i.e. the cluster's zones (stacks pass the slices'
            zones so heads sit beside their TPUs).
        (and the fields of :class:`NodePoolProps`: disk, service account, labels, cluster, overrides)
    """

    name: str = "ray-head"
    machine_type: str = "n2-standard-8"
    min_nodes: int = 1
    max_nodes: int = 3
    zones: Sequence[str] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        _props.check_name("name", self.name, max_len=40)
        _props.check_range("min_nodes", self.min_nodes, 0, 1000)
        _props.check_range("max_nodes", self.max_nodes, 1, 1000)
        if self.min_nodes > self.max_nodes:
            raise errors.invalid_value("min_nodes", self.min_nodes, f"is above max_nodes ({self.max_nodes})",
                                       f"0 to {self.max_nodes}")
        for zone in self.zones:
            _props.check_zone("zones", zone)


class HeadPool(Construct):
    """An autoscaling CPU node pool labelled ``raytpu/pool=ray-head``. Resource id: ``pool``."""

    def __init__(self, scope: Construct, id: str, props: HeadPoolProps) -> None:
        super().__init__(scope, id)
        props.require_cluster("HeadPool", "add_head_pool")
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
            node_config=hardened_node_config(props, props.machine_type, labels={HEAD_POOL_LABEL: "ray-head"}),
        )
        _props.apply_overrides(self.pool, props.overrides)
