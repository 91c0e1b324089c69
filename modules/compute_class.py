"""ComputeClass: Autopilot's way to ask for TPU slices (a ``cloud.google.com/v1`` ComputeClass object)."""

from __future__ import annotations

from raytpu.core.specs.slices.gke_versions import long_notice_check
from raytpu.modules.parts import _props, node_system
from raytpu.modules.parts.cdk import Construct, Precondition, TerraformResourceLifecycle, kubernetes_manifest
from raytpu.modules.parts.compute_class_props import WHEN_UNSATISFIABLE, ComputeClassProps

__all__ = ["WHEN_UNSATISFIABLE", "ComputeClass", "ComputeClassProps"]


class ComputeClass(Construct):
    """An Autopilot ComputeClass listing a slice's TPU priorities. Resource id: ``manifest``.

    Needs a kubernetes provider configured for the cluster (see ``WorkloadsStack``)."""

    def __init__(self, scope: Construct, id: str, props: ComputeClassProps) -> None:
        super().__init__(scope, id)
        self.props = props
        lifecycle = None
        if props.master_version is not None and node_system.shutdown_window(props.slice) is not None:
            # GKE refuses the window on an older control plane, whatever the channel's default.
            check = Precondition(**long_notice_check(props.master_version))
            lifecycle = TerraformResourceLifecycle(precondition=[check])
        self.manifest = kubernetes_manifest.Manifest(self, "manifest", manifest=props.manifest(), lifecycle=lifecycle)
        _props.apply_overrides(self.manifest, props.overrides)
