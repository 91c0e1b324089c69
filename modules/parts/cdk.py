"""The one place the CDK framework (CDK Terrain, ``cdktn``) and its provider bindings are imported, so moving to another
CDKTF-compatible framework edits this file only (docs/FACTS.md#terraform-modules). Importing it starts the jsii runtime
(node), so only construct modules and stacks import it."""

from __future__ import annotations

import os
from typing import TypeVar

# jsii prints a large banner on every start under Node 20, which cdktf-cli 0.21 (the pinned CLI) needs.
# Node 20 works for synth (cdktf-cli 0.21.0 declares node >= 18.12); keep stderr readable. A user can still unset it.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import jsii
from cdktn import (
    App,
    Aspects,
    AssetType,
    DataResource,
    Fn,
    GcsBackend,
    IAspect,
    ITerraformDependable,
    LocalBackend,
    Precondition,
    TerraformAsset,
    TerraformDataSource,
    TerraformLocal,
    TerraformOutput,
    TerraformResource,
    TerraformResourceLifecycle,
    TerraformStack,
    Token,
)
from cdktn_provider_google import (
    artifact_registry_repository,
    artifact_registry_repository_iam_member,
    compute_firewall,
    compute_network,
    compute_resource_policy,
    compute_router,
    compute_router_nat,
    compute_subnetwork,
    container_cluster,
    container_node_pool,
    data_google_client_config,
    data_google_container_engine_versions,
    ephemeral_google_client_config,
    logging_metric,
    monitoring_alert_policy,
    project_iam_member,
    project_service,
    service_account,
    service_account_iam_member,
    storage_bucket,
    storage_bucket_iam_member,
    storage_bucket_object,
)
from cdktn_provider_google import provider as google_provider
from cdktn_provider_helm import provider as helm_provider
from cdktn_provider_helm import release as helm_release
from cdktn_provider_kubernetes import data_kubernetes_resource
from cdktn_provider_kubernetes import manifest as kubernetes_manifest
from cdktn_provider_kubernetes import namespace_v1 as kubernetes_namespace
from cdktn_provider_kubernetes import provider as kubernetes_provider
from cdktn_provider_kubernetes import service_account_v1 as kubernetes_service_account
from constructs import Construct, IConstruct

FRAMEWORK = "cdktn"
"""Name of the CDK framework in use (recorded in bench output)."""

_T = TypeVar("_T")


def aspect(cls: type[_T]) -> type[_T]:
    """Declares a class an aspect (``visit(node)``, applied with ``Aspects.of(scope).add``): jsii needs the interface
    named to call back into Python."""
    return jsii.implements(IAspect)(cls)

__all__ = [
    "FRAMEWORK",
    "App",
    "Aspects",
    "AssetType",
    "Construct",
    "DataResource",
    "Fn",
    "GcsBackend",
    "IAspect",
    "IConstruct",
    "ITerraformDependable",
    "LocalBackend",
    "Precondition",
    "TerraformAsset",
    "TerraformDataSource",
    "TerraformLocal",
    "TerraformOutput",
    "TerraformResource",
    "TerraformResourceLifecycle",
    "TerraformStack",
    "Token",
    "artifact_registry_repository",
    "artifact_registry_repository_iam_member",
    "aspect",
    "compute_firewall",
    "compute_network",
    "compute_resource_policy",
    "compute_router",
    "compute_router_nat",
    "compute_subnetwork",
    "container_cluster",
    "container_node_pool",
    "data_google_client_config",
    "data_google_container_engine_versions",
    "data_kubernetes_resource",
    "ephemeral_google_client_config",
    "google_provider",
    "helm_provider",
    "helm_release",
    "kubernetes_manifest",
    "kubernetes_namespace",
    "kubernetes_provider",
    "kubernetes_service_account",
    "logging_metric",
    "monitoring_alert_policy",
    "project_iam_member",
    "project_service",
    "service_account",
    "service_account_iam_member",
    "storage_bucket",
    "storage_bucket_iam_member",
    "storage_bucket_object",
]
