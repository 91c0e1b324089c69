"""ComputeClass: Autopilot's way to ask for TPU slices (a ``cloud.google.com/v1`` ComputeClass object)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu import errors
from raytpu.kuberay import COMPUTE_CLASS_LABEL, compute_class_name
from raytpu.modules import _props
from raytpu.modules.cdk import Construct, kubernetes_manifest
from raytpu.plan import SlicePlan

WHEN_UNSATISFIABLE = ("DoNotScaleUp", "ScaleUpAnyway")
__all__ = ["COMPUTE_CLASS_LABEL", "ComputeClass", "ComputeClassProps", "TpuPriority", "compute_class_name"]


@dataclass(frozen=True, kw_only=True)
class TpuPriority:
    """One entry of a ComputeClass's ``spec.priorities``: the slice shape and how to obtain it.

    Attributes:
        plan: The slice's SlicePlan (accelerator type, chips per node, topology).
        spot: Use Spot capacity; default false.
        reservation: Consume this specific reservation; default none.
        reservation_project: Project owning ``reservation``; default: the cluster's project (required
            when ``reservation`` is set).
        flex_start: Use DWS flex-start capacity; default false.
    """

    plan: SlicePlan
    spot: bool = False
    reservation: str | None = None
    reservation_project: str | None = None
    flex_start: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.plan, SlicePlan):
            raise errors.invalid_value("plan", self.plan, "is not a SlicePlan", "raytpu.plan.plan_slice(...)")
        chosen = [n for n in ("spot", "reservation", "flex_start") if getattr(self, n)]
        if len(chosen) > 1:
            raise errors.forbidden(chosen[1], getattr(self, chosen[1]), f"together with {chosen[0]}",
                                   "one of spot, reservation, flex_start per priority")
        if self.reservation and not self.reservation_project:
            raise errors.missing("reservation_project", "with a reservation", "the project owning the reservation")

    def to_json(self) -> dict[str, Any]:
        """The priority as it appears in the ComputeClass spec."""
        plan = self.plan
        entry: dict[str, Any] = {"tpu": {"type": plan.gke_accelerator, "count": plan.chips_per_host,
                                         "topology": plan.topology}}
        if self.spot:
            entry["spot"] = True
        if self.reservation:
            entry["reservations"] = {"affinity": "Specific",
                                     "specific": [{"name": self.reservation, "project": self.reservation_project}]}
        if self.flex_start:
            entry["flexStart"] = {"enabled": True}
        return entry


@dataclass(frozen=True, kw_only=True)
class ComputeClassProps:
    """Props of :class:`ComputeClass`.

    Attributes:
        name: The ComputeClass's name (cluster-scoped).
        priorities: TPU shapes in order of preference (at least one).
        when_unsatisfiable: ``DoNotScaleUp`` (default: pods wait for a listed shape) or ``ScaleUpAnyway``.
        labels: Kubernetes labels of the object; ``app.kubernetes.io/managed-by: raytpu`` is always added.
        overrides: Escape hatch: raw fields of the ``kubernetes_manifest`` resource by path.
    """

    name: str
    priorities: tuple[TpuPriority, ...]
    when_unsatisfiable: str = "DoNotScaleUp"
    labels: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _props.check_name("name", self.name)
        if not self.priorities:
            raise errors.missing("priorities", "(at least one)", "TpuPriority(plan=...)")
        _props.check_choice("when_unsatisfiable", self.when_unsatisfiable, WHEN_UNSATISFIABLE)
        _props.check_overrides("overrides", self.overrides)

    def manifest(self) -> dict[str, Any]:
        """The ComputeClass object as a plain dict."""
        return {
            "apiVersion": "cloud.google.com/v1",
            "kind": "ComputeClass",
            "metadata": {"name": self.name,
                         "labels": {"app.kubernetes.io/managed-by": "raytpu", **self.labels}},
            "spec": {
                "priorities": [p.to_json() for p in self.priorities],
                "nodePoolAutoCreation": {"enabled": True},
                "whenUnsatisfiable": self.when_unsatisfiable,
            },
        }


class ComputeClass(Construct):
    """An Autopilot ComputeClass listing TPU priorities. Resource id: ``manifest``.

    Needs a kubernetes provider configured for the cluster (see ``WorkloadsStack``).
    """

    def __init__(self, scope: Construct, id: str, props: ComputeClassProps) -> None:
        super().__init__(scope, id)
        self.props = props
        self.manifest = kubernetes_manifest.Manifest(self, "manifest", manifest=props.manifest())
        _props.apply_overrides(self.manifest, props.overrides)
