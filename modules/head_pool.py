"""HeadPool: the small CPU node pool Ray head pods (and other CPU pods) run on, on Standard clusters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.cluster.cluster_parts import HeadPoolSpec
from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB
from raytpu.modules.parts import _props
from raytpu.modules.parts._node_pool import JoinedCluster, NodePoolOptions, hardened_node_config, joined_to
from raytpu.modules.parts.cdk import Construct, container_node_pool

HEAD_POOL_LABEL = "raytpu/pool"
"""Kubernetes node label of the head pool's nodes (value ``ray-head``)."""


@dataclass(frozen=True, kw_only=True)
class HeadPoolOptions(NodePoolOptions):
    """What a caller chooses for the head pool: machine type and bounds, name, and zones (default the cluster's; stacks
    pass the slices' zones so heads sit beside their TPUs); plus the fields of :class:`NodePoolOptions`."""

    spec: HeadPoolSpec = field(default_factory=HeadPoolSpec)
    name: str = "ray-head"
    zones: Sequence[str] = ()

    def _problems(self) -> list[InvalidInput]:
        return [*super()._problems(), *_props.resource_name_problems("name", self.name, max_len=40),
                *(p for zone in self.zones for p in _props.zone_problems("zones", zone))]


@dataclass(frozen=True, kw_only=True)
class HeadPoolProps(HeadPoolOptions):
    """Props of :class:`HeadPool`: its options and the cluster it joins (``GkeCluster.add_head_pool``)."""

    cluster: JoinedCluster


class HeadPool(Construct):
    """An autoscaling CPU node pool labelled ``raytpu/pool=ray-head``. Resource id: ``pool``."""

    def __init__(self, scope: Construct, id: str, props: HeadPoolProps) -> None:
        super().__init__(scope, id)
        self.props = props
        spec = props.spec
        np = container_node_pool
        self.pool = np.ContainerNodePool(
            self, "pool",
            **joined_to(props.name, props.cluster),
            node_locations=list(props.zones) or None,
            initial_node_count=spec.min_nodes,
            autoscaling=np.ContainerNodePoolAutoscaling(min_node_count=spec.min_nodes, max_node_count=spec.max_nodes),
            management=np.ContainerNodePoolManagement(auto_repair=True, auto_upgrade=True),
            node_config=hardened_node_config(props, spec.machine_type, DEFAULT_DISK_SIZE_GIB,
                                             labels={HEAD_POOL_LABEL: "ray-head"}),
        )
        _props.apply_overrides(self.pool, props.overrides)
