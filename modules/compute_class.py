"""ComputeClass: Autopilot's way to ask for TPU slices (a ``cloud.google.com/v1`` ComputeClass object)."""

from __future__ import annotations

from raytpu.modules import _props
from raytpu.modules.cdk import Construct, kubernetes_manifest
from raytpu.modules.compute_class_props import WHEN_UNSATISFIABLE, ComputeClassProps

__all__ = ["WHEN_UNSATISFIABLE", "ComputeClass", "ComputeClassProps"]


class ComputeClass(Construct):
    """An Autopilot ComputeClass listing a slice's TPU priorities. Resource id: ``manifest``.

    Needs a kubernetes provider configured for the cluster (see ``WorkloadsStack``)."""

    def __init__(self, scope: Construct, id: str, props: ComputeClassProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.manifest = kubernetes_manifest.Manifest(self, "manifest", manifest=props.manifest())
        _props.apply_overrides(self.manifest, props.overrides)
