"""ComputeClassProps: what a ComputeClass object holds (a ``cloud.google.com/v1`` ComputeClass as a plain dict), free
of the CDK framework so the unit tier checks its priorities without starting jsii."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytpu.core.common import errors, names
from raytpu.core.specs.field_rules import choice_problems
from raytpu.core.specs.slices.provisioning import MODES
from raytpu.core.specs.spec import SliceSpec
from raytpu.modules.parts import _props, node_system

WHEN_UNSATISFIABLE = ("DoNotScaleUp", "ScaleUpAnyway")


@dataclass(frozen=True, kw_only=True)
class ComputeClassProps:
    """Props of :class:`ComputeClass`: the slice (its shape, then its provisioning and each ``fallback`` mode in order
    as ``spec.priorities``; its provisioning must offer a priority, not queued), the reservation's project,
    ``when_unsatisfiable`` (``DoNotScaleUp``: pods wait for a listed shape; or ``ScaleUpAnyway``), labels and
    ``overrides`` of the ``kubernetes_manifest``; ``master_version``, the cluster's control-plane version (a token),
    which a window above 30 s is checked against (None: not checked)."""

    slice: SliceSpec
    project: str
    master_version: str | None = None
    when_unsatisfiable: str = "DoNotScaleUp"
    labels: Mapping[str, str] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        found = []
        if self.slice.provisioning.priority is None:
            found.append(errors.forbidden(
                "slice", self.slice.name,
                f"with provisioning: {self.slice.provisioning.name} (no ComputeClass priority)",
                "a slice whose provisioning is one of " +
                ", ".join(m.name for m in MODES.values() if m.priority is not None)))
        found += choice_problems("when_unsatisfiable", self.when_unsatisfiable, WHEN_UNSATISFIABLE)
        found += _props.override_problems("overrides", self.overrides)
        errors.raise_found(found)

    @property
    def name(self) -> str:
        """The ComputeClass's name (cluster-scoped): ``raytpu-<slice>``."""
        return names.compute_class_name(self.slice.name)

    def priorities(self) -> list[dict[str, Any]]:
        """``spec.priorities``: the slice's shape under each of its modes, in order, each in the slice's zone."""
        plan = self.slice.plan
        tpu = {"type": plan.gke_accelerator, "count": plan.chips_per_host, "topology": plan.topology}
        return [mode.compute_class_priority(tpu, self.slice.reservation, self.project, self.slice.zone,
                                            self.slice.max_run_duration_s)
                for mode in self.slice.modes]

    def manifest(self) -> dict[str, Any]:
        """The ComputeClass object as a plain dict."""
        return {
            "apiVersion": "cloud.google.com/v1",
            "kind": "ComputeClass",
            "metadata": {"name": self.name,
                         "labels": {**names.MANAGED_BY, **self.labels}},
            "spec": {
                "priorities": self.priorities(),
                "priorityDefaults": {"nodeSystemConfig": node_system.compute_class_config(self.slice)},
                "nodePoolAutoCreation": {"enabled": True},
                "whenUnsatisfiable": self.when_unsatisfiable,
            },
        }
