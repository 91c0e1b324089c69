"""WorkloadPolicy: the HIGH_THROUGHPUT workload policy placing a multi-host tpu7x slice, one home for the block both a
Standard node pool and an Autopilot cluster stack need."""

from __future__ import annotations

from dataclasses import dataclass

from raytpu.core.common.names import workload_policy_name
from raytpu.modules.parts.cdk import Construct, compute_resource_policy


@dataclass(frozen=True, kw_only=True)
class WorkloadPolicyProps:
    """Props of :class:`WorkloadPolicy`: the cluster's name (a policy's name is unique per project and region), what it
    places (node pool or slice), the project, the slice's region and its topology (``accelerator_topology``)."""

    cluster_name: str
    owner: str
    project: str
    region: str
    topology: str


class WorkloadPolicy(compute_resource_policy.ComputeResourcePolicy):
    """A ``google_compute_resource_policy`` with a HIGH_THROUGHPUT ``workload_policy`` for the slice's topology, named
    :func:`raytpu.core.common.names.workload_policy_name`; the resource itself (address ``scope``/``id``), so no
    existing policy moves. Source: https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-ironwood (Ironwood
    rejects COMPACT)."""

    def __init__(self, scope: Construct, id: str, props: WorkloadPolicyProps) -> None:
        super().__init__(scope, id, name=workload_policy_name(props.cluster_name, props.owner),
                         project=props.project, region=props.region,
                         workload_policy=compute_resource_policy.ComputeResourcePolicyWorkloadPolicy(
                             type="HIGH_THROUGHPUT", accelerator_topology=props.topology))
        self.props = props
