"""ProjectServices: the Google APIs a stack calls, enabled in its project, and :class:`RequireApis`, which makes every
resource and data source wait for the APIs it calls (a fresh project has them off). Service Usage itself cannot be
enabled this way. Source: https://developer.hashicorp.com/terraform/language/meta-arguments/depends_on
(docs/FACTS.md#terraform-constructs, docs/FACTS.md#terraform-modules)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from raytpu.modules.parts.cdk import (
    Construct,
    IConstruct,
    TerraformDataSource,
    TerraformResource,
    aspect,
    project_service,
)

API_REASONS: Mapping[str, str] = {
    "compute.googleapis.com": "the VPC, subnet, Cloud Router and NAT, firewall and TPU workload policies",
    "container.googleapis.com": "the GKE cluster, its node pools and the release channel's versions",
    "iam.googleapis.com": "the node and Ray service accounts and the Workload Identity binding",
    "cloudresourcemanager.googleapis.com": "the node service account's project roles (google_project_iam_member "
                                           "reads and writes the project's IAM policy)",
    "storage.googleapis.com": "the checkpoint bucket, its IAM grants and the core zip object",
    "logging.googleapis.com": "the cluster's system and workload logs (logging_config) and the smoke metric",
    "monitoring.googleapis.com": "the cluster's system metrics and Managed Prometheus (monitoring_config) and the "
                                 "smoke alert policy",
    "artifactregistry.googleapis.com": "the image repository and its IAM grants; nodes pull the kit's images from it",
    "cloudbuild.googleapis.com": "no resource here: `raytpu images build` creates Cloud Build builds in the project",
}
"""Every API the cluster stack calls, with why (a GKE cluster calls container and compute; its logs and metrics go to
Cloud Logging and Monitoring: https://cloud.google.com/kubernetes-engine/docs/how-to/configure-metrics)."""

API_OF_PREFIX: Mapping[str, str] = {
    "google_compute_": "compute.googleapis.com",
    "google_container_": "container.googleapis.com",
    "google_service_account": "iam.googleapis.com",
    "google_project_iam_": "cloudresourcemanager.googleapis.com",
    "google_storage_": "storage.googleapis.com",
    "google_logging_": "logging.googleapis.com",
    "google_monitoring_": "monitoring.googleapis.com",
    "google_artifact_registry_": "artifactregistry.googleapis.com",
}
"""Terraform type prefix (resource or data source) -> the API its calls go to."""

ALSO: Mapping[str, tuple[str, ...]] = {
    "google_container_cluster": ("logging.googleapis.com", "monitoring.googleapis.com"),
}
"""APIs a type needs beyond its own: GKE ships the cluster's logs and metrics to them (``logging_config``,
``monitoring_config``)."""


def apis_of(kind: str) -> tuple[str, ...]:
    """The APIs a resource or data source of Terraform type ``kind`` calls; none known: () (a resource an app adds to
    the stack from another API is left as it is: whoever adds it enables its API)."""
    own = tuple(api for prefix, api in API_OF_PREFIX.items() if kind.startswith(prefix))
    return own + ALSO.get(kind, ())


@dataclass(frozen=True, kw_only=True)
class ProjectServicesProps:
    """Props of :class:`ProjectServices`: the project, and API -> why it is needed (default :data:`API_REASONS`)."""

    project: str
    apis: Mapping[str, str] = field(default_factory=lambda: dict(API_REASONS))


class ProjectServices(Construct):
    """One ``google_project_service`` per API with ``disable_on_destroy = false`` (the default would turn the API off
    for the whole project on destroy). Source: terraform-provider-google 8.x ``google_project_service``
    (docs/FACTS.md#terraform-constructs).

    Resource ids: the API's first label (``container``, ``compute``...)."""

    def __init__(self, scope: Construct, id: str, props: ProjectServicesProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.services: dict[str, project_service.ProjectService] = {
            api: project_service.ProjectService(self, api.split(".")[0], project=props.project, service=api,
                                                disable_on_destroy=False)
            for api in props.apis
        }

    def address(self, api: str) -> str:
        """The Terraform address of ``api``'s resource (``google_project_service.<name>``), as ``depends_on`` wants."""
        return f"{project_service.ProjectService.TF_RESOURCE_TYPE}.{self.services[api].friendly_unique_id}"


@aspect
class RequireApis:
    """An aspect: every ``google_*`` resource and data source under its scope depends on the APIs it calls
    (:func:`apis_of`), including ones added after the stack was built (``ClusterStack.add_slice``)."""

    def __init__(self, services: ProjectServices) -> None:
        self.services = services

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, (TerraformResource, TerraformDataSource)):
            return
        wanted = [self.services.address(api) for api in apis_of(node.terraform_resource_type)
                  if api in self.services.services]
        present = list(node.depends_on or [])
        node.depends_on = present + [w for w in wanted if w not in present]
