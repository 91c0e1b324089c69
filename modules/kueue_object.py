"""KueueObject: one Kueue object of :func:`raytpu.core.manifests.kueue.objects` applied with ``kubernetes_manifest``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors
from raytpu.modules.parts import _props
from raytpu.modules.parts.cdk import Construct, ITerraformDependable, kubernetes_manifest

API_GROUP = "kueue.x-k8s.io"
CLUSTER_SCOPED = ("ResourceFlavor", "Cohort", "WorkloadPriorityClass", "ProvisioningRequestConfig", "AdmissionCheck",
                  "ClusterQueue")
"""Kinds without a namespace. Source: Kueue v0.19.2 CRDs ``spec.scope`` (docs/FACTS.md#kueue-objects)."""
NAMESPACED = ("LocalQueue",)


@dataclass(frozen=True, kw_only=True)
class KueueObjectProps:
    """Props of :class:`KueueObject`: the object (a dict; values may be tokens), the field manager and ``overrides``
    of ``kubernetes_manifest``."""

    manifest: Mapping[str, Any]
    field_manager: str = "raytpu"
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        found = []
        api, kind = self.manifest.get("apiVersion"), self.manifest.get("kind")
        metadata = self.manifest.get("metadata", {})
        if not str(api).startswith(f"{API_GROUP}/") or kind not in (*CLUSTER_SCOPED, *NAMESPACED):
            found.append(errors.invalid_value("manifest", f"{api}/{kind}", "is not a Kueue object the kit applies",
                                              f"apiVersion {API_GROUP}/..., kind " +
                                              ", ".join((*CLUSTER_SCOPED, *NAMESPACED))))
        elif not metadata.get("name"):
            found.append(errors.missing("manifest.metadata.name", "", "the object's name"))
        elif (kind in NAMESPACED) != bool(metadata.get("namespace")):
            found.append(errors.invalid_value("manifest.metadata.namespace", metadata.get("namespace"),
                                              f"does not fit kind {kind}", "a namespace for LocalQueue only"))
        errors.raise_found([*found, *_props.override_problems("overrides", self.overrides)])

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def namespaced(self) -> bool:
        return self.kind in NAMESPACED


class KueueObject(Construct):
    """Applies one Kueue object after ``after`` (what it names must exist first, and it goes first on destroy: Kueue
    holds a ResourceFlavor or ClusterQueue in use; docs/FACTS.md#kueue-objects). Resource id: ``manifest``."""

    def __init__(self, scope: Construct, id: str, props: KueueObjectProps, *,
                 after: Sequence[ITerraformDependable] = ()) -> None:
        super().__init__(scope, id)
        self.props = props
        km = kubernetes_manifest
        self.manifest = km.Manifest(
            self, "manifest", manifest=dict(props.manifest),
            field_manager=km.ManifestFieldManager(name=props.field_manager, force_conflicts=False),
            depends_on=list(after) or None)
        _props.apply_overrides(self.manifest, props.overrides)
