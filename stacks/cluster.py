"""ClusterStack: network, GKE cluster, TPU node pools (Standard), identities and the bucket, from a ClusterSpec."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from raytpu.cluster.outputs import StackOutputs
from raytpu.core import core_zip
from raytpu.core.common import names
from raytpu.core.specs.cluster import grants, teams
from raytpu.core.specs.runtime import compile_cache, xla_cache
from raytpu.core.specs.serving import node_disk
from raytpu.core.specs.slices import notice
from raytpu.core.specs.slices.gke_versions import version_floor
from raytpu.core.specs.slices.provisioning import Provisioning
from raytpu.core.specs.spec import ClusterSpec, SliceSpec
from raytpu.modules.bucket import Bucket, BucketObject, BucketObjectProps, BucketProps
from raytpu.modules.gke_cluster import GkeCluster, GkeClusterProps
from raytpu.modules.head_pool import HeadPool, HeadPoolOptions
from raytpu.modules.image_registry import ImageRegistry, ImageRegistryProps
from raytpu.modules.kueue_install import KUEUE_PORTS, KueueInstall, KueueInstallProps
from raytpu.modules.network import Network, NetworkProps
from raytpu.modules.parts.cdk import (
    Aspects,
    Construct,
    Fn,
    GcsBackend,
    LocalBackend,
    TerraformOutput,
    TerraformStack,
    ephemeral_google_client_config,
    google_provider,
    helm_provider,
)
from raytpu.modules.project_services import ProjectServices, ProjectServicesProps, RequireApis
from raytpu.modules.smoke_alerting import SmokeAlerting, SmokeAlertingProps
from raytpu.modules.tpu_slice_pool import TpuSlicePool, TpuSlicePoolOptions
from raytpu.modules.workload_identity import (
    NodeServiceAccount,
    NodeServiceAccountProps,
    WorkloadIdentity,
    WorkloadIdentityProps,
)
from raytpu.modules.workload_policy import WorkloadPolicy, WorkloadPolicyProps

_CORE_ZIP_DIR: Path | None = None
TERRAFORM_VERSIONS = ">=1.10.0"
"""Terraform versions a stack with an ephemeral access token needs (the workloads stack; the cluster stack with
``teams``, for Helm): ephemeral resources came in 1.10. Source:
https://developer.hashicorp.com/terraform/language/resources/ephemeral"""


def core_zip_file() -> Path:
    """The core zip in a file named like its object (``raytpu-<version>.zip``), in a temporary directory removed at
    exit, from which the asset is copied at synth: same sources, same bytes, same path in the synth output."""
    global _CORE_ZIP_DIR
    if _CORE_ZIP_DIR is None:
        _CORE_ZIP_DIR = Path(tempfile.mkdtemp(prefix="raytpu-core-"))
        atexit.register(shutil.rmtree, _CORE_ZIP_DIR, True)
    data = core_zip.core_zip_bytes()
    path = _CORE_ZIP_DIR / hashlib.sha256(data).hexdigest()[:16] / Path(names.core_zip_object()).name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def declare_backend(stack: TerraformStack, id: str, spec: ClusterSpec) -> None:
    """The stack's Terraform state: GCS with ``storage.state_bucket``, else the project root's
    ``terraform.<id>.tfstate`` named relative to the stack's directory, so the JSON is the same wherever the checkout
    lives. Source: docs/FACTS.md#terraform-stacks."""
    if spec.storage.state_bucket:
        GcsBackend(stack, bucket=spec.storage.state_bucket, prefix=f"raytpu/{id}")
    else:
        LocalBackend(stack, path=f"../../../terraform.{id}.tfstate")


def _cache_prefixes(spec: ClusterSpec) -> tuple[str, ...]:
    """The bucket folders compile caches write: JAX's (the default and each workload's own) and vLLM's."""
    jax = {f for w in spec.workloads if (f := compile_cache.folder_in_bucket(w.compile_cache)) is not None}
    return tuple(sorted(f"{f.strip('/')}/" for f in jax | {compile_cache.DEFAULT_FOLDER, xla_cache.PREFIX}))


def _modes(slices: Iterable[SliceSpec]) -> list[Provisioning]:
    """Every provisioning mode the slices use, fallbacks included (their GKE version floors apply)."""
    return [m for s in slices for m in s.modes]


def _long_notice(slices: Iterable[SliceSpec]) -> bool:
    """Whether a slice raises the shutdown window above GKE's default (its GKE version floor applies)."""
    return any(s.notice_s > notice.NOTICE_S for s in slices)


@dataclass(frozen=True, kw_only=True)
class ClusterStackProps:
    """Props of :class:`ClusterStack`: ``spec``, the cluster spec every resource is derived from.
    Public API: ``from raytpu import ClusterStackProps``."""

    spec: ClusterSpec


class ClusterStack(TerraformStack):
    """Everything below Kubernetes: APIs, VPC, GKE (Standard or Autopilot), a node pool per slice copy and the head pool
    (Standard), the service accounts, the bucket with the core zip RayJobs load as ``py_modules`` (GCS FUSE), the image
    registry and its builder; with ``teams``, Kueue (Helm, provider from the cluster's endpoint) and each team's
    Google service account. One output per field of :class:`raytpu.cluster.outputs.StackOutputs`; a GCS backend with
    ``storage.state_bucket``. Construct ids (API): ``apis``, ``network``, ``node-identity``, ``gke``, ``storage``,
    ``storage/core-zip``, ``images``, ``gke/workload-identity``, ``gke/head-pool``, ``gke/slice-<slice>-<i>``,
    ``kueue`` and ``gke/team-<team>-identity`` (with ``teams``). Public API: ``from raytpu import ClusterStack``."""

    def __init__(self, scope: Construct, id: str, props: ClusterStackProps) -> None:
        super().__init__(scope, id)
        self.props = props
        spec = props.spec
        if spec.teams:  # Helm's access token is ephemeral (set before any child: constructs refuses it after)
            self.node.set_context("targetVersions", {"terraform": TERRAFORM_VERSIONS})
        self.spec = spec
        """The cluster's spec, with the slices (:meth:`add_slice`) and workloads added since."""
        gke = spec.cluster
        labels = dict(gke.labels)
        google_provider.GoogleProvider(self, "google", project=spec.project, region=spec.region)
        declare_backend(self, id, spec)
        # A fresh project has these APIs off: enable each, and make every resource wait for the ones it calls.
        self.apis = ProjectServices(self, "apis", ProjectServicesProps(project=spec.project))
        Aspects.of(self).add(RequireApis(self.apis))

        self.network = Network(self, "network", NetworkProps(
            name=gke.name, project=spec.project, region=spec.region, spec=spec.network,
            webhook_ports=KUEUE_PORTS if spec.teams else ()))
        self.node_identity = NodeServiceAccount(self, "node-identity", NodeServiceAccountProps(
            project=spec.project, account_id=names.service_account_id(gke.name, "node")))
        self.cluster = GkeCluster(self, "gke", GkeClusterProps(
            spec=gke, project=spec.project, location=spec.region, network=self.network,
            version_floor=version_floor((s.plan for s in spec.slices), gke.mode,
                                        multislice=any(w.multislice for w in spec.workloads),
                                        provisioning=_modes(spec.slices), long_notice=_long_notice(spec.slices)),
            node_service_account=self.node_identity.email,
        ))
        self.bucket = Bucket(self, "storage", BucketProps(
            name=spec.bucket, project=spec.project, location=spec.region, labels=labels,
            cache_prefixes=_cache_prefixes(spec), checkpoint_prefixes=(f"{grants.CHECKPOINTS_FOLDER}/",)))
        self.core_zip: BucketObject = self.bucket.add_object("core-zip", BucketObjectProps(
            name=names.core_zip_object(), source=str(core_zip_file()), content_type="application/zip",
            keep_replaced=True))
        self.identity = self.cluster.add_workload_identity("workload-identity", WorkloadIdentityProps(
            project=spec.project, account_id=names.service_account_id(gke.name, "ray"),
            namespace=spec.namespace, ksa_name=spec.ksa_name, bucket=self.bucket.name,
            data_buckets=spec.storage.data_buckets, legacy_ksa=gke.legacy_ksa,
            write_folders=grants.pod_write_folders(spec.bucket, [w for w in spec.workloads if w.team is None],
                                                   _cache_prefixes(spec)),
            write_excluded=tuple(f for team in spec.teams for f in team.write_folders)))
        self.team_identities: dict[str, WorkloadIdentity] = {}
        """Each team's Google service account (``teams``), by team name."""
        for team in spec.teams:
            self.team_identities[team.name] = self.cluster.add_workload_identity(
                f"team-{team.name}-identity", WorkloadIdentityProps(
                    project=spec.project, account_id=teams.service_account_id(gke.name, team.name),
                    namespace=team.namespace, ksa_name=spec.ksa_name, bucket=self.bucket.name,
                    data_buckets=spec.storage.data_buckets, display_name=f"raytpu team {team.name}",
                    write_folders=team.write_folders, read_folders=team.read_folders))
        self.kueue: KueueInstall | None = None
        self.head_pool: HeadPool | None = None
        if gke.head_pool is not None:
            self.head_pool = self.cluster.add_head_pool("head-pool", HeadPoolOptions(
                spec=gke.head_pool, zones=tuple(sorted({s.zone for s in spec.slices})),
                service_account=self.node_identity.email, labels=labels))
        self.pools: dict[str, list[TpuSlicePool]] = {}
        self.workload_policies: dict[str, WorkloadPolicy] = {}
        """Autopilot: the workload policy of each multi-host tpu7x slice, by slice name."""
        for item in spec.slices:
            self._add_pools(item)
        if spec.teams:
            self._install_kueue()
        # the kit's images, built into the cluster's region by `raytpu images build` (raytpu.images.build)
        self.images = ImageRegistry(self, "images", ImageRegistryProps(
            project=spec.project, location=spec.region, repository_id=f"{gke.name}-images",
            builder_account_id=names.service_account_id(gke.name, "img"), pullers=(self.node_identity.email,),
            bucket=self.bucket.name, labels=labels))
        self.alerting: SmokeAlerting | None = None
        if spec.alerting is not None:
            self.alerting = SmokeAlerting(self, "smoke-alerting", SmokeAlertingProps(
                project=spec.project, cluster_name=gke.name, namespace=spec.namespace,
                notification_channels=spec.alerting.notification_channels))
        values = {"endpoint": self.cluster.endpoint, "ca_certificate": self.cluster.ca_certificate,
                  "cluster_name": self.cluster.name, "location": spec.region, "project": spec.project,
                  "namespace": spec.namespace, "service_account": spec.ksa_name, "bucket": self.bucket.name,
                  "registry": self.images.path, "builder_service_account": self.images.builder_email}
        descriptions = StackOutputs.descriptions()
        for name in StackOutputs.names():
            TerraformOutput(self, name, value=values[name], description=descriptions[name],
                            sensitive=False)

    def add_slice(self, item: SliceSpec) -> list[TpuSlicePool]:
        """Adds a slice kind to the cluster and its spec: on Standard ``item.count`` node pools (``<name>-<i>``),
        returned; on Autopilot none (the workloads stack makes its ComputeClass); raises the version floor if its
        generation needs it. InvalidInputs under ``slices[<i>]`` when it does not fit (name taken, zone outside the
        region, mode forbids)."""
        self.spec = self.spec.with_slice(item)
        self.cluster.require_version(*version_floor((s.plan for s in self.spec.slices), self.spec.cluster.mode,
                                                 multislice=any(w.multislice for w in self.spec.workloads),
                                                 provisioning=_modes(self.spec.slices),
                                                 long_notice=_long_notice(self.spec.slices)))
        return self._add_pools(item)

    def fit_boot_disks(self, item: SliceSpec) -> None:
        """Grows slice ``item``'s pools' boot disks to hold its engines' weights (:func:`node_disk.boot_disk_gib`):
        for a workload added (``WorkloadsStack.add_workload``) after its slice's pools were made."""
        size = node_disk.boot_disk_gib(item, self.spec.workloads, self.spec.bucket)
        for pool in self.pools.get(item.name, []):
            pool.grow_boot_disk(size)

    def _install_kueue(self) -> None:
        """Kueue by Helm onto this cluster, after its node pools (the controller needs a node; uninstalled first)."""
        gke = self.spec.cluster
        # the kubernetes provider's shape in the workloads stack: the DNS endpoint's certificate is publicly trusted.
        # Source: hashicorp/helm 3.3.0 provider `kubernetes` object (docs/FACTS.md#kueue-helm-provider)
        client = ephemeral_google_client_config.EphemeralGoogleClientConfig(self, "client")
        ca = None if gke.control_plane == "dns" else Fn.base64decode(self.cluster.ca_certificate)
        helm_provider.HelmProvider(self, "helm", kubernetes=helm_provider.HelmProviderKubernetes(
            host=f"https://{self.cluster.endpoint}", token=client.access_token, cluster_ca_certificate=ca))
        pools = [p.pool for pools in self.pools.values() for p in pools]
        head = [self.head_pool.pool] if self.head_pool is not None else []
        self.kueue = KueueInstall(self, "kueue", KueueInstallProps(), after=[self.cluster.cluster, *head, *pools])

    def _add_pools(self, item: SliceSpec) -> list[TpuSlicePool]:
        gke = self.spec.cluster
        pools: list[TpuSlicePool] = []
        if not gke.autopilot:
            for i in range(item.count):
                pools.append(self.cluster.add_slice_pool(f"slice-{item.name}-{i}", TpuSlicePoolOptions(
                    slice=item, index=i, service_account=self.node_identity.email, labels=dict(gke.labels),
                    disk_size_gib=node_disk.boot_disk_gib(item, self.spec.workloads, self.spec.bucket))))
        elif item.plan.placement == "workload-policy":
            # Autopilot places a multi-host tpu7x slice by a pre-created workload policy that its pods select
            # (cloud.google.com/placement-policy-name; raytpu.core.manifests.kuberay.tpu_placement).
            self.workload_policies[item.name] = WorkloadPolicy(
                self, f"workload-policy-{item.name}", WorkloadPolicyProps(
                    cluster_name=gke.name, owner=item.name, project=self.spec.project, region=item.region,
                    topology=item.plan.topology))
        self.pools[item.name] = pools
        if self.kueue is not None:
            self.kueue.wait_for(*(p.pool for p in pools))
        return pools
