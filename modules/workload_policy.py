"""WorkloadPolicy: the HIGH_THROUGHPUT workload policy that places a multi-host tpu7x slice, one home for the block
both a Standard node pool (:class:`~raytpu.modules.tpu_slice_pool.TpuSlicePool`) and an Autopilot cluster stack
need."""

from __future__ import annotations

from dataclasses import dataclass

from raytpu.core.common.names import workload_policy_name
from raytpu.modules.cdk import Construct, compute_resource_policy


@dataclass(frozen=True, kw_only=True)
class WorkloadPolicyProps:
    """Props of :class:`WorkloadPolicy`.

    Attributes:
        cluster_name: The GKE cluster's name (a resource policy's name is unique per project and region).
        owner: What the policy places: the node pool (Standard) or the slice (Autopilot).
        project: The cluster's project.
        region: The slice's region (a resource policy is regional).
        topology: The slice's TPU topology (``accelerator_topology``).
    """

    cluster_name: str
    owner: str
    project: str
    region: str
    topology: str


class WorkloadPolicy(compute_resource_policy.ComputeResourcePolicy):
    """A ``google_compute_resource_policy`` with a HIGH_THROUGHPUT ``workload_policy`` for the slice's topology,
    named :func:`raytpu.core.common.names.workload_policy_name` (Ironwood rejects COMPACT; Source:
    https://cloud.google.com/kubernetes-engine/docs/how-to/tpu-ironwood).

    It is the resource itself, not a wrapper: its Terraform address is the caller's ``scope``/``id``, so no
    existing policy moves.
    """

    def __init__(self, scope: Construct, id: str, props: WorkloadPolicyProps) -> None:
        super().__init__(scope, id, name=workload_policy_name(props.cluster_name, props.owner),
                         project=props.project, region=props.region,
                         workload_policy=compute_resource_policy.ComputeResourcePolicyWorkloadPolicy(
                             type="HIGH_THROUGHPUT", accelerator_topology=props.topology))
        self.props = props
