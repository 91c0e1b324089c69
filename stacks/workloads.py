"""WorkloadsStack: KubeRay objects (and Autopilot ComputeClasses) applied onto a ClusterStack's outputs."""

from __future__ import annotations

from dataclasses import dataclass

from raytpu import errors, kuberay
from raytpu.config import Config, Slice
from raytpu.modules.cdk import (
    Construct,
    Fn,
    GcsBackend,
    TerraformStack,
    data_google_client_config,
    google_provider,
    kubernetes_provider,
)
from raytpu.modules.compute_class import ComputeClass, ComputeClassProps, TpuPriority, compute_class_name
from raytpu.modules.ray_workload import RayWorkload, RayWorkloadProps
from raytpu.modules.workload_identity import (
    KubernetesNamespace,
    KubernetesNamespaceProps,
    KubernetesServiceAccount,
    KubernetesServiceAccountProps,
)
from raytpu.stacks.cluster import ClusterStack


@dataclass(frozen=True, kw_only=True)
class WorkloadsStackProps:
    """Props of :class:`WorkloadsStack`.

    Attributes:
        cluster: The ClusterStack whose outputs configure the kubernetes provider.
        config: Config whose ``workloads`` are applied; default: the cluster stack's config.
    """

    cluster: ClusterStack
    config: Config | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cluster, ClusterStack):
            raise errors.invalid_value("cluster", self.cluster, "is not a ClusterStack", "a ClusterStack")


def tpu_priorities(item: Slice, project: str) -> tuple[TpuPriority, ...]:
    """The ComputeClass priorities of a slice: its provisioning, then each of its ``fallback`` modes in order
    (e.g. reservation, then spot). Queued slices get none: they use ProvisioningRequests, not compute classes."""
    plan = item.plan()
    if item.provisioning == "queued":
        return ()

    def priority(mode: str) -> TpuPriority:
        if mode == "reservation":
            return TpuPriority(plan=plan, reservation=item.reservation, reservation_project=project)
        return TpuPriority(plan=plan, spot=mode == "spot", flex_start=mode == "flex-start")

    return tuple(priority(mode) for mode in (item.provisioning, *item.fallback))


class WorkloadsStack(TerraformStack):
    """The Kubernetes side: a kubernetes provider from the cluster stack's endpoint and CA (access token
    from ``google_client_config``), the Workload Identity KSA, one ComputeClass per slice on Autopilot,
    and one KubeRay object per ``config.workloads`` entry (:func:`raytpu.kuberay.workload_manifests`).

    Construct ids (API): ``namespace``, ``ksa``, ``compute-class-<slice>``, ``workload-<name>``.
    """

    def __init__(self, scope: Construct, id: str, props: WorkloadsStackProps) -> None:
        super().__init__(scope, id)
        self.props = props
        cluster = props.cluster
        # The RayJobs load the core zip the cluster stack uploads (cluster.core_zip). A resource's
        # depends_on cannot name a resource of another stack, so the order is the stacks': deploying this
        # stack waits for the cluster stack, object included (the outputs read below imply it; stated here).
        self.add_dependency(cluster)
        config = props.config or cluster.config
        self.config = config
        google_provider.GoogleProvider(self, "google", project=config.project, region=config.region)
        client = data_google_client_config.DataGoogleClientConfig(self, "client")
        kubernetes_provider.KubernetesProvider(
            self, "kubernetes",
            host=f"https://{cluster.cluster.endpoint}",
            cluster_ca_certificate=Fn.base64decode(cluster.cluster.ca_certificate),
            token=client.access_token,
        )
        if config.storage.state_bucket:
            GcsBackend(self, bucket=config.storage.state_bucket, prefix=f"raytpu/{id}")

        self.namespace = KubernetesNamespace(self, "namespace", KubernetesNamespaceProps(name=cluster.namespace))
        self.service_account = KubernetesServiceAccount(self, "ksa", KubernetesServiceAccountProps(
            name=cluster.ksa_name, namespace=self.namespace.name, gsa_email=cluster.identity.email))
        self.compute_classes: dict[str, ComputeClass] = {}
        if cluster.mode == "autopilot":
            for item in cluster.slices:
                priorities = tpu_priorities(item, config.project)
                if priorities:
                    self.compute_classes[item.name] = ComputeClass(
                        self, f"compute-class-{item.name}",
                        ComputeClassProps(name=compute_class_name(item.name), priorities=priorities))
        manifests = kuberay.workload_manifests(
            config, service_account=self.service_account.name, bucket=cluster.bucket.name,
            namespace=self.namespace.name,
            compute_classes={n: c.props.name for n, c in self.compute_classes.items()} or None,
        )
        self.workloads = [RayWorkload(self, f"workload-{m['metadata']['name']}", RayWorkloadProps(manifest=m))
                          for m in manifests]
