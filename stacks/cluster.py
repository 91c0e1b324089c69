"""ClusterStack: network, GKE cluster, TPU node pools (Standard), identities and the bucket, from a Config."""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raytpu import errors, gke, kuberay
from raytpu.config import Config, Slice
from raytpu.modules.bucket import Bucket, BucketObject, BucketObjectProps, BucketProps
from raytpu.modules.cdk import Construct, GcsBackend, TerraformOutput, TerraformStack, google_provider
from raytpu.modules.gke_cluster import AuthorizedNetwork, GkeCluster, GkeClusterProps, min_gke_version
from raytpu.modules.head_pool import HeadPool, HeadPoolProps
from raytpu.modules.network import Network, NetworkProps
from raytpu.modules.tpu_slice_pool import TpuSlicePool, TpuSlicePoolProps
from raytpu.modules.workload_identity import NodeServiceAccount, NodeServiceAccountProps, WorkloadIdentityProps
from raytpu.plan import SlicePlan

_CORE_ZIP_DIR: Path | None = None


def core_zip_file() -> Path:
    """The core zip (:func:`raytpu.gke.core_zip_bytes`) in a file named like its object
    (``raytpu-<version>.zip``), in a temporary directory removed when the process exits: the asset is
    copied from it when the app synthesizes. Same sources, same bytes, same path in the synth output."""
    global _CORE_ZIP_DIR
    if _CORE_ZIP_DIR is None:
        _CORE_ZIP_DIR = Path(tempfile.mkdtemp(prefix="raytpu-core-"))
        atexit.register(shutil.rmtree, _CORE_ZIP_DIR, True)
    data = gke.core_zip_bytes()
    path = _CORE_ZIP_DIR / hashlib.sha256(data).hexdigest()[:16] / Path(kuberay.core_zip_object()).name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def _account_id(cluster: str, suffix: str) -> str:
    """A 6-30 character service account id derived from the cluster name."""
    return f"raytpu-{cluster[:18].rstrip('-')}-{suffix}"


@dataclass(frozen=True, kw_only=True)
class ClusterStackProps:
    """Props of :class:`ClusterStack`.

    Attributes:
        config: The validated ``raytpu.yaml``; every resource is derived from it.
        namespace: Namespace of Ray objects and of the Kubernetes service account Ray pods run as; default
            ``ray`` (the workloads stack creates it).
        ksa_name: Name of that Kubernetes service account; default ``ray``.
    """

    config: Config
    namespace: str = "ray"
    ksa_name: str = "ray"

    def __post_init__(self) -> None:
        if not isinstance(self.config, Config):
            raise errors.invalid_value("config", self.config, "is not a Config", "raytpu.config.load(path)")


class ClusterStack(TerraformStack):
    """Everything below Kubernetes: VPC, GKE (Standard or Autopilot), one node pool per slice copy
    (Standard), the head pool (Standard), the node and workload service accounts, and the bucket.

    Declares the google provider, and a GCS backend when ``storage.state_bucket`` is set. Outputs:
    ``endpoint``, ``ca_certificate``, ``cluster_name``, ``location``, ``project``, ``mode``, ``namespace``,
    ``service_account`` (the KSA), ``gsa_email``, ``bucket`` and ``slice_<name>_plan`` (the SlicePlan JSON).

    The bucket gets the kit's core zip (:func:`core_zip_file`) as object
    :func:`raytpu.kuberay.core_zip_object`, which the workloads stack's RayJobs load as ``py_modules``
    through the GCS FUSE mount (:func:`raytpu.kuberay.py_modules_uri`).

    Construct ids (API): ``network``, ``node-identity``, ``gke``, ``storage``, ``storage/core-zip``,
    ``gke/workload-identity``, ``gke/head-pool``, ``gke/slice-<slice>-<i>``.
    """

    def __init__(self, scope: Construct, id: str, props: ClusterStackProps) -> None:
        super().__init__(scope, id)
        self.props = props
        config = props.config
        cluster = config.cluster
        self.config = config
        self.mode = cluster.mode
        self.namespace = props.namespace
        self.ksa_name = props.ksa_name
        google_provider.GoogleProvider(self, "google", project=config.project, region=config.region)
        if config.storage.state_bucket:
            GcsBackend(self, bucket=config.storage.state_bucket, prefix=f"raytpu/{id}")

        self.network = Network(self, "network", NetworkProps(
            name=cluster.name, project=config.project, region=config.region,
            subnet_cidr=config.network.subnet_cidr, pods_cidr=config.network.pods_cidr,
            services_cidr=config.network.services_cidr,
        ))
        self.node_identity = NodeServiceAccount(self, "node-identity", NodeServiceAccountProps(
            project=config.project, account_id=_account_id(cluster.name, "node")))
        self.cluster = GkeCluster(self, "gke", GkeClusterProps(
            name=cluster.name,
            project=config.project,
            location=config.region,
            network=self.network.vpc.id,
            subnetwork=self.network.subnet.id,
            pods_range_name=self.network.pods_range_name,
            services_range_name=self.network.services_range_name,
            mode=cluster.mode,
            release_channel=cluster.release_channel,
            min_master_version=min_gke_version(config.plans().values(), cluster.mode),
            master_cidr=config.network.master_cidr,
            master_authorized_networks=tuple(AuthorizedNetwork(name=n.name, cidr=n.cidr)
                                             for n in cluster.master_authorized_networks),
            node_service_account=self.node_identity.email,
            labels=dict(cluster.labels),
            deletion_protection=cluster.deletion_protection,
        ))
        self.bucket = Bucket(self, "storage", BucketProps(
            name=config.bucket, project=config.project, location=config.region, labels=dict(cluster.labels)))
        self.core_zip: BucketObject = self.bucket.add_object("core-zip", BucketObjectProps(
            name=kuberay.core_zip_object(), source=str(core_zip_file()), content_type="application/zip"))
        self.identity = self.cluster.add_workload_identity("workload-identity", WorkloadIdentityProps(
            project=config.project, account_id=_account_id(cluster.name, "ray"),
            namespace=props.namespace, ksa_name=props.ksa_name, bucket=self.bucket.name))
        self.head_pool: HeadPool | None = None
        if cluster.mode == "standard":
            head = cluster.head_pool
            sizing: dict[str, Any] = (
                {"machine_type": head.machine_type, "min_nodes": head.min_nodes, "max_nodes": head.max_nodes}
                if head else {})
            self.head_pool = self.cluster.add_head_pool("head-pool", HeadPoolProps(
                zones=tuple(sorted({s.zone for s in config.slices})), service_account=self.node_identity.email,
                labels=dict(cluster.labels), **sizing,
            ))

        self.slices: list[Slice] = []
        self.plans: dict[str, SlicePlan] = {}
        self.pools: dict[str, list[TpuSlicePool]] = {}
        for item in config.slices:
            self.add_slice(item)

        TerraformOutput(self, "endpoint", value=self.cluster.endpoint,
                        description="GKE control plane IP (https)")
        TerraformOutput(self, "ca_certificate", value=self.cluster.ca_certificate,
                        description="cluster CA, base64 PEM")
        TerraformOutput(self, "cluster_name", value=self.cluster.name)
        TerraformOutput(self, "location", value=config.region)
        TerraformOutput(self, "project", value=config.project)
        TerraformOutput(self, "mode", value=cluster.mode)
        TerraformOutput(self, "namespace", value=props.namespace)
        TerraformOutput(self, "service_account", value=props.ksa_name,
                        description="Kubernetes service account of Ray pods (Workload Identity)")
        TerraformOutput(self, "gsa_email", value=self.identity.email)
        TerraformOutput(self, "bucket", value=self.bucket.name)

    def add_slice(self, item: Slice) -> list[TpuSlicePool]:
        """Adds a slice kind: on Standard, ``item.count`` node pools (``<name>-0``, ``<name>-1``...), returned;
        on Autopilot none (the workloads stack creates its ComputeClass). Also adds the output
        ``slice_<name>_plan`` and raises the cluster's minimum version if the generation needs it.

        Raises:
            InvalidInput: the slice's shape is impossible, its name is taken, or a pool prop is invalid.
        """
        if item.name in self.plans:
            raise errors.invalid_value("slice.name", item.name, "is already used by a slice of this stack",
                                       "a unique slice name")
        plan = item.plan()
        self.slices.append(item)
        self.plans[item.name] = plan
        self.cluster.cluster.min_master_version = min_gke_version(self.plans.values(), self.mode)
        pools: list[TpuSlicePool] = []
        if self.mode == "standard":
            for i in range(item.count):
                pools.append(self.cluster.add_slice_pool(f"slice-{item.name}-{i}", TpuSlicePoolProps(
                    name=f"{item.name}-{i}",
                    plan=plan,
                    zone=item.zone,
                    provisioning=item.provisioning,
                    reservation=item.reservation,
                    max_run_duration_s=item.max_run_duration_s,
                    disk_size_gib=item.disk_size_gib or 100,
                    service_account=self.node_identity.email,
                    labels=dict(self.config.cluster.labels),
                )))
        self.pools[item.name] = pools
        TerraformOutput(self, f"slice_{item.name}_plan", value=json.dumps(plan.to_json(), sort_keys=True),
                        description=f"SlicePlan of slice {item.name} (x{item.count}, {item.provisioning})")
        return pools
