"""A spot slice's preemption notice: the shutdown windows GKE takes and the rule on a slice (pods: manifests)."""

from __future__ import annotations

from collections.abc import Iterable

from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.core.specs.slices.provisioning import Provisioning

NOTICE_S = 30
"""Compute Engine stops a preempted VM this long after its notice, unless the slice raises it.
Source: https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms (termination and graceful shutdown)."""
NOTICE_CHOICES = (30, 120)
"""The shutdown windows a spot slice may set; 0 (no graceful shutdown) is GKE's third value.
Source: compute-class-api 8067eae ``KubeletConfig.ShutdownGracePeriodSeconds`` (Enum 0;30;120)."""
LONG_NOTICE_MIN_GKE_VERSION = "1.35.0-gke.1171000"
"""The control plane a window above 30 s needs (stated for Standard, applied to both modes).
Source: https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms ("Termination and graceful shutdown")."""
CRITICAL_PODS_S = 15
"""The window's end kept for system pods, as GKE's default 30 s window keeps it.
Source: https://cloud.google.com/kubernetes-engine/docs/how-to/preemptible-vms
(docs/FACTS.md#preemption-notice-budget)."""


def notice_problems(notice_s: object, modes: Iterable[Provisioning]) -> list[InvalidInput]:
    """A slice's ``preemption_notice_s``: one of :data:`NOTICE_CHOICES`, on spot capacity only.
    Source: GKE and the ComputeClass API, Spot VMs only (docs/FACTS.md#preemption-notice-window)."""
    if notice_s is None:
        return []
    if not isinstance(notice_s, int) or isinstance(notice_s, bool) or notice_s not in NOTICE_CHOICES:
        return [errors.invalid_choice("preemption_notice_s", notice_s, NOTICE_CHOICES,
                                      " (GKE's node shutdown window takes 30 or 120 seconds)")]
    others = [m.name for m in modes if m.name != "spot"]
    if others:
        return [errors.forbidden("preemption_notice_s", notice_s, f"with {', '.join(others)} capacity (GKE sets a "
                                 "node's shutdown window on Spot VMs only)",
                                 "remove preemption_notice_s, or use provisioning: spot without fallback")]
    return []
