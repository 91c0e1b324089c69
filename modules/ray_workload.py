"""RayWorkload: one KubeRay object (RayCluster, RayJob, RayService) applied with ``kubernetes_manifest``, behind
its NetworkPolicy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors
from raytpu.core.manifests.kube_resources import resource
from raytpu.core.manifests.kuberay import kuberay_remedy
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import (
    Construct,
    DataResource,
    Precondition,
    TerraformResourceLifecycle,
    data_kubernetes_resource,
    kubernetes_manifest,
)

KUBERAY_KINDS = ("RayCluster", "RayJob", "RayService")


@dataclass(frozen=True, kw_only=True)
class RayWorkloadProps:
    """Props of :class:`RayWorkload`: the object (from :func:`raytpu.core.manifests.kuberay.workload_manifests`; values
    may be tokens), the field manager, ``requires`` (CRD fields and the KubeRay version that brought them: a
    precondition names what the live CRD lacks before ``kubernetes_manifest`` plans), ``overrides``, and the object's
    NetworkPolicy, applied before it."""

    manifest: Mapping[str, Any]
    field_manager: str = "raytpu"
    requires: tuple[tuple[str, ...], str] | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    network_policy: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        found = []
        api = self.manifest.get("apiVersion")
        kind = self.manifest.get("kind")
        if api != "ray.io/v1" or kind not in KUBERAY_KINDS:
            found.append(errors.invalid_value("manifest", f"{api}/{kind}", "is not a KubeRay object",
                                              "apiVersion ray.io/v1, kind " + ", ".join(KUBERAY_KINDS)))
        elif not self.manifest.get("metadata", {}).get("name"):
            found.append(errors.missing("manifest.metadata.name", "", "the object's name"))
        found += _props.override_problems("overrides", self.overrides)
        if self.network_policy is not None and self.network_policy.get("kind") != "NetworkPolicy":
            found.append(errors.invalid_value("network_policy", self.network_policy.get("kind"),
                                              "is not a NetworkPolicy",
                                              "the object's NetworkPolicy "
                                              "(raytpu.core.manifests.kuberay.network_policy)"))
        errors.raise_found(found)

    @property
    def kind(self) -> str:
        """The object's kind."""
        return str(self.manifest["kind"])

    @property
    def rolls_by_replacement(self) -> bool:
        """A RayService with upgradeStrategy None: KubeRay applies no change of its Ray cluster spec, so Terraform
        replaces it (NewCluster rolls by itself). Source: KubeRay v1.7.0 ``RayServiceUpgradeNone``."""
        strategy = self.manifest.get("spec", {}).get("upgradeStrategy") or {}
        return self.kind == "RayService" and strategy.get("type") == "None"

    @property
    def name(self) -> str:
        """The object's name."""
        return str(self.manifest["metadata"]["name"])


def hcl_crd_declares(crd_object: str, field_path: str) -> str:
    """A Terraform expression (no ``${}``): the CRD ``crd_object`` (an expression: the live object) declares
    ``field_path`` (``spec.a.b``) in its ``v1`` schema."""
    properties = "".join(f".properties.{part}" for part in field_path.split("."))
    return f'can([for v in {crd_object}.spec.versions : v if v.name == "v1"][0].schema.openAPIV3Schema{properties})'


class RayWorkload(Construct):
    """Applies one KubeRay object. Resource ids: ``manifest``; ``crd`` (the live CRD, with ``requires``);
    ``network-policy`` (with ``network_policy``: the object waits for it, so none of its pods runs unguarded);
    ``cluster-spec`` (:attr:`RayWorkloadProps.rolls_by_replacement`: a changed ``spec.rayClusterConfig`` replaces the
    object, as ``submit --replace`` does)."""

    def __init__(self, scope: Construct, id: str, props: RayWorkloadProps) -> None:
        super().__init__(scope, id)
        self.props = props
        km = kubernetes_manifest
        self.network_policy = None if props.network_policy is None else km.Manifest(
            self, "network-policy", manifest=dict(props.network_policy),
            field_manager=km.ManifestFieldManager(name=props.field_manager, force_conflicts=False))
        # Source: KubeRay v1.7.0 rayservice_controller.go shouldPrepareNewCluster; Terraform's terraform_data
        # (triggers_replace) and lifecycle replace_triggered_by: developer.hashicorp.com/terraform/language/resources
        self.cluster_spec = None if not props.rolls_by_replacement else DataResource(
            self, "cluster-spec", triggers_replace={"rayClusterConfig": props.manifest["spec"]["rayClusterConfig"]})
        # a bare address: cdktn renders a resource given here as "${...}", which Terraform's JSON syntax refuses there
        # (hashicorp/terraform-cdk#3532, #3645)
        replaced_by = None if self.cluster_spec is None else [
            f"{self.cluster_spec.terraform_resource_type}.{self.cluster_spec.friendly_unique_id}"]
        preconditions: list[Precondition] = []
        if props.requires:
            fields_, version = props.requires
            crd = data_kubernetes_resource.DataKubernetesResource(
                self, "crd", api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition",
                metadata=data_kubernetes_resource.DataKubernetesResourceMetadata(
                    name=resource(props.kind).display))
            preconditions = [Precondition(
                condition=f"${{{hcl_crd_declares(crd.fqn + '.object', f)}}}",
                error_message=f"The cluster's KubeRay (GKE's Ray Operator add-on) serves a {props.kind} CRD without "
                              f"{f}, which KubeRay {version} brought; valid: "
                              f"{kuberay_remedy(version, props.kind)}.") for f in fields_]
        lifecycle = TerraformResourceLifecycle(replace_triggered_by=replaced_by, precondition=preconditions or None) \
            if replaced_by or preconditions else None
        self.manifest = km.Manifest(
            self, "manifest",
            manifest=dict(props.manifest),
            field_manager=km.ManifestFieldManager(name=props.field_manager, force_conflicts=False),
            lifecycle=lifecycle,
            depends_on=[self.network_policy] if self.network_policy is not None else None,
        )
        _props.apply_overrides(self.manifest, props.overrides)
