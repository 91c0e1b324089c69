"""RayWorkload: one KubeRay object (RayCluster, RayJob, RayService) applied with ``kubernetes_manifest``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu import errors
from raytpu.modules import _props
from raytpu.modules.cdk import Construct, kubernetes_manifest

KUBERAY_KINDS = ("RayCluster", "RayJob", "RayService")


@dataclass(frozen=True, kw_only=True)
class RayWorkloadProps:
    """Props of :class:`RayWorkload`.

    Attributes:
        manifest: The object, as built by :func:`raytpu.kuberay.workload_manifests` (values may be tokens).
        field_manager: Server-side-apply field manager; default ``raytpu``.
        overrides: Escape hatch: raw fields of the ``kubernetes_manifest`` resource by path.
    """

    manifest: Mapping[str, Any]
    field_manager: str = "raytpu"
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        api = self.manifest.get("apiVersion")
        kind = self.manifest.get("kind")
        if api != "ray.io/v1" or kind not in KUBERAY_KINDS:
            raise errors.invalid_value("manifest", f"{api}/{kind}", "is not a KubeRay object",
                                       "apiVersion ray.io/v1, kind " + ", ".join(KUBERAY_KINDS))
        if not self.manifest.get("metadata", {}).get("name"):
            raise errors.missing("manifest.metadata.name", "", "the object's name")
        _props.check_overrides("overrides", self.overrides)

    @property
    def kind(self) -> str:
        """The object's kind."""
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        """The object's name."""
        return str(self.manifest["metadata"]["name"])


class RayWorkload(Construct):
    """Applies one KubeRay object. Resource id: ``manifest``."""

    def __init__(self, scope: Construct, id: str, props: RayWorkloadProps) -> None:
        super().__init__(scope, id)
        self.props = props
        km = kubernetes_manifest
        self.manifest = km.Manifest(
            self, "manifest",
            manifest=dict(props.manifest),
            field_manager=km.ManifestFieldManager(name=props.field_manager, force_conflicts=False),
        )
        _props.apply_overrides(self.manifest, props.overrides)
