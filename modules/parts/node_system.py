"""A TPU slice's node system config: its shutdown window and transparent hugepages, as a Standard pool's provider
fields and as an Autopilot ComputeClass's ``priorityDefaults.nodeSystemConfig``. Free of the CDK framework, so the
unit tier checks it without starting jsii (docs/FACTS.md#preemption-notice-window)."""

from __future__ import annotations

from typing import Any

from raytpu.core.specs.slices import notice
from raytpu.core.specs.spec import SliceSpec

THP_ALWAYS = "TRANSPARENT_HUGEPAGE_ENABLED_ALWAYS"
"""Transparent hugepages for all anonymous memory: what JAX asks of TPU v5e and newer hosts.
Source: jax 0.10.2 ``_src/cloud_tpu_init.py`` (``hardware_utils.transparent_hugepages_enabled``)."""
THP_MADVISE = "TRANSPARENT_HUGEPAGE_ENABLED_MADVISE"
"""The kernel's default, set when a slice turns hugepages off (the provider's field is Computed: left unset, a pool
set to always would stay so). Source: GKE API ``LinuxNodeConfig.TransparentHugepageEnabled``."""


def thp_setting(item: SliceSpec) -> str:
    """The slice's ``transparent_hugepage_enabled``: always, unless ``transparent_hugepages: false``."""
    return THP_ALWAYS if item.transparent_hugepages else THP_MADVISE


def shutdown_window(item: SliceSpec) -> tuple[int, int] | None:
    """(the node's shutdown window, the system pods' share of it) when the slice raises ``preemption_notice_s`` above
    GKE's default; else none: a stated 30 s is GKE's default for Spot VMs, and its fields would tie the cluster to
    GKE 1.35 for nothing. A Standard pool's ``node_config.kubelet_config`` ``shutdown_grace_period_seconds`` and
    ``shutdown_grace_period_critical_pods_seconds``.
    Source: cdktn-provider-google 21.1.0 ``ContainerNodePoolNodeConfigKubeletConfig``; compute-class-api 33b4e26
    (2026-01-06) ``KubeletConfig.ShutdownGracePeriodSeconds`` (docs/FACTS.md#preemption-notice-window)."""
    if item.notice_s <= notice.NOTICE_S:
        return None
    return item.notice_s, notice.CRITICAL_PODS_S


def compute_class_config(item: SliceSpec) -> dict[str, Any]:
    """A ComputeClass's ``priorityDefaults.nodeSystemConfig``: hugepages, and the window when the slice raises it (its
    every priority is then spot, as the CRD requires of a default window: "shutdownGracePeriodSeconds is only
    supported for Spot"). Source: compute-class-api 8067eae ``PriorityDefaults``, ``ComputeClassSpec`` XValidation."""
    config: dict[str, Any] = {"linuxNodeConfig": {"transparentHugepageEnabled": thp_setting(item)}}
    window = shutdown_window(item)
    if window is not None:
        config["kubeletConfig"] = {"shutdownGracePeriodSeconds": window[0],
                                   "shutdownGracePeriodCriticalPodsSeconds": window[1]}
    return config
