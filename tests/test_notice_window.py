"""A spot slice's notice window and every TPU host's transparent hugepages (issue 40 item 4, issue 41 item 4).

Rules, with their sources (evidence: docs/FACTS.md#preemption-notice-window):

- GKE's kubelet ``shutdownGracePeriodSeconds`` takes 0, 30 or 120, on Spot VMs only, and its critical-pods share is
  at most the window (compute-class-api 8067eae ``KubeletConfig``, ``Priority`` XValidation; the GKE API's
  ``NodeKubeletConfig``: "only valid for Spot VMs. Allowed values: 0, 30, 120").
- A window above 30 s needs a control plane at 1.35.0-gke.1171000 or later (GKE's Spot VMs page); 30 s is GKE's
  default, so the kit states no kubelet field for it (the fields arrived with GKE 1.35: compute-class-api 33b4e26).
- A ComputeClass's ``nodeSystemConfig`` (Autopilot and Standard) needs GKE 1.32.1-gke.1729000 (GKE's node system
  config page); ``linuxNodeConfig.transparentHugepageEnabled`` takes ALWAYS, MADVISE, NEVER, UNSPECIFIED.
"""

from __future__ import annotations

from typing import Any

import pytest
from crd import operator_errors, schema_errors, webhook_errors
from image_refs import FIXTURE_IMAGES

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.manifests import kuberay, preemption
from raytpu.core.specs import kinds
from raytpu.core.specs.cluster.cluster_parts import GkeSpec
from raytpu.core.specs.slices import notice
from raytpu.core.specs.slices.gke_versions import (
    COMPUTE_CLASS_MIN_GKE_VERSION,
    long_notice_check,
    version_floor,
    version_key,
)
from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec
from raytpu.modules.parts import node_system
from raytpu.modules.parts.compute_class_props import ComputeClassProps

pytestmark = pytest.mark.unit


def _slice(provisioning: str = "spot", fallback: tuple[str, ...] = (), **fields: Any) -> SliceSpec:
    extra: dict[str, Any] = {"reservation": "my-res"} if provisioning == "reservation" else {}
    return SliceSpec.create(name="train", generation="v6e", topology="4x4", zone="us-east5-b",
                            provisioning=provisioning, fallback=fallback, **extra, **fields)


@pytest.mark.parametrize(("notice", "grace", "drain"), [(30, 15, 10), (120, 105, 100)])
def test_the_pods_grace_and_rays_drain_follow_the_window(notice: int, grace: int, drain: int) -> None:
    """Pods get the window less the 15 s GKE keeps for system pods; Ray drains the grace less its 5 s stop."""
    assert (preemption.pod_grace_s(notice), preemption.drain_s(notice)) == (grace, drain)
    assert preemption.prestop_drain(drain).count(f"{drain}") >= 2
    assert f"signal.alarm({drain + 2})" in preemption.prestop_drain(drain)


@pytest.mark.parametrize(("fields", "field", "says"), [
    ({"preemption_notice_s": 60}, "preemption_notice_s", "30, 120"),
    ({"preemption_notice_s": 0}, "preemption_notice_s", "30, 120"),
    ({"preemption_notice_s": True}, "preemption_notice_s", "30, 120"),
    ({"preemption_notice_s": "120"}, "preemption_notice_s", "30, 120"),
    ({"provisioning": "on-demand", "preemption_notice_s": 120}, "preemption_notice_s", "provisioning: spot"),
    ({"provisioning": "flex-start", "preemption_notice_s": 30}, "preemption_notice_s", "provisioning: spot"),
    ({"provisioning": "reservation", "preemption_notice_s": 120}, "preemption_notice_s", "provisioning: spot"),
    ({"fallback": ("on-demand",), "preemption_notice_s": 120}, "preemption_notice_s", "without fallback"),
    ({"transparent_hugepages": "always"}, "transparent_hugepages", "true or false"),
    ({"transparent_hugepages": 1}, "transparent_hugepages", "true or false"),
])
def test_a_bad_notice_or_hugepage_setting_names_its_field(fields: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidInputs) as caught:
        _slice(**fields)
    problem = next(p for p in caught.value.problems if p.field == field)
    assert says in problem.valid, problem


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_a_120_s_notice_reaches_every_reclaimable_tpu_pod_and_the_objects_still_validate(mode: str) -> None:
    """A train RayJob (Ray 2.60: drains on SIGTERM) and a RayService (Ray 2.56: the preStop drains) on a 120 s spot
    slice: grace 105, drain 100 (0 on 2.56, whose preStop drains for 100 s); KubeRay's schema, its webhook and its
    operator still accept them."""
    item = _slice(preemption_notice_s=120)
    works = tuple(WorkloadSpec(name=k, kind=kinds.kind(k), slice=item,
                               model="org/model" if k == "serve" else None) for k in ("train", "serve"))
    spec = ClusterSpec(project="my-ml-project", region="us-east5", cluster=GkeSpec(name="ray-tpu", mode=mode),
                       slices=(item,), workloads=works)
    for work in works:
        obj = kuberay.workload_manifest(spec, work, images=FIXTURE_IMAGES, service_account="ksa", bucket="b")
        assert schema_errors(obj) == [] and webhook_errors(obj) == [] and operator_errors(obj) == [], obj["kind"]
        worker = kuberay.ray_cluster_of(obj)["workerGroupSpecs"][0]["template"]["spec"]
        ray = worker["containers"][0]
        env = {e["name"]: e.get("value") for e in ray["env"]}
        assert worker["terminationGracePeriodSeconds"] == 105
        if obj["kind"] == "RayJob":
            assert env[preemption.DRAIN_ENV] == "100"
            assert ray["lifecycle"]["preStop"]["exec"]["command"][-1] == preemption.PRESTOP_SIGNAL
        else:
            assert env[preemption.DRAIN_ENV] == "0"
            assert ray["lifecycle"]["preStop"]["exec"]["command"][-1] == preemption.prestop_drain(100)


def test_the_node_window_is_set_only_when_the_slice_raises_it() -> None:
    """30 s is GKE's default for Spot VMs, and the kubelet shutdown fields arrived with GKE 1.35 (compute-class-api
    33b4e26, 2026-01-06): stating 30 sets none of them, so it ties the cluster to no newer version."""
    assert node_system.shutdown_window(_slice()) is None
    assert node_system.shutdown_window(_slice(preemption_notice_s=30)) is None
    assert node_system.shutdown_window(_slice(preemption_notice_s=120)) == (120, 15)


def test_a_compute_class_states_no_window_for_gkes_default_notice() -> None:
    """The ComputeClass of a spot slice that states 30 s carries hugepages only, like one that states nothing."""
    stated = ComputeClassProps(slice=_slice(preemption_notice_s=30), project="p").manifest()["spec"]
    unstated = ComputeClassProps(slice=_slice(), project="p").manifest()["spec"]
    assert stated["priorityDefaults"] == unstated["priorityDefaults"] == {"nodeSystemConfig": {
        "linuxNodeConfig": {"transparentHugepageEnabled": "TRANSPARENT_HUGEPAGE_ENABLED_ALWAYS"}}}


def test_the_control_plane_check_names_the_floor_and_what_is_valid() -> None:
    """The pool's and the ComputeClass's precondition over the cluster's own ``master_version`` (its verdicts are
    judged by Terraform in tests/test_synth.py)."""
    check = long_notice_check("google_container_cluster.gke.master_version")
    assert check["condition"].startswith("${try(") and check["condition"].endswith(", false)}")
    assert "google_container_cluster.gke.master_version)" in check["condition"]
    assert check["error_message"] == (
        "The cluster's control plane runs a version older than 1.35.0-gke.1171000, which a preemption notice above "
        "30 s needs; valid: upgrade the control plane to 1.35.0-gke.1171000 or newer (gcloud container clusters "
        "upgrade --master), or remove the slice's preemption_notice_s.")


def test_hugepages_are_always_unless_turned_off() -> None:
    assert node_system.thp_setting(_slice("on-demand")) == "TRANSPARENT_HUGEPAGE_ENABLED_ALWAYS"
    assert node_system.thp_setting(_slice("on-demand", transparent_hugepages=False)) == (
        "TRANSPARENT_HUGEPAGE_ENABLED_MADVISE")


def test_a_compute_class_carries_hugepages_and_a_spot_slices_window_in_its_priority_defaults() -> None:
    """``priorityDefaults.nodeSystemConfig`` applies to every priority; the window is there only for a slice whose
    every mode is spot (the CRD refuses a default window otherwise), so the priorities themselves are unchanged."""
    spot = ComputeClassProps(slice=_slice(preemption_notice_s=120), project="p").manifest()["spec"]
    assert spot["priorityDefaults"] == {"nodeSystemConfig": {
        "linuxNodeConfig": {"transparentHugepageEnabled": "TRANSPARENT_HUGEPAGE_ENABLED_ALWAYS"},
        "kubeletConfig": {"shutdownGracePeriodSeconds": 120, "shutdownGracePeriodCriticalPodsSeconds": 15}}}
    assert all(p.get("spot") for p in spot["priorities"])
    mixed = ComputeClassProps(slice=_slice("reservation", ("spot",), transparent_hugepages=False),
                              project="p").manifest()["spec"]
    assert mixed["priorityDefaults"] == {"nodeSystemConfig": {
        "linuxNodeConfig": {"transparentHugepageEnabled": "TRANSPARENT_HUGEPAGE_ENABLED_MADVISE"}}}
    assert all("nodeSystemConfig" not in p for p in mixed["priorities"])


def test_the_version_floor_names_the_longer_window_and_autopilots_node_system_config() -> None:
    plans = [_slice().plan]
    assert version_floor(plans, "standard", long_notice=True) == (notice.LONG_NOTICE_MIN_GKE_VERSION,
                                                                  "a preemption notice above 30 s")
    assert version_floor(plans, "autopilot", long_notice=True)[0] == notice.LONG_NOTICE_MIN_GKE_VERSION
    floor = version_floor(plans, "autopilot")[0]
    assert version_key(floor) >= version_key(COMPUTE_CLASS_MIN_GKE_VERSION)
    assert version_key(version_floor(plans, "standard")[0]) < version_key(notice.LONG_NOTICE_MIN_GKE_VERSION)
