"""Capacity where GKE offers it (issue 27, items 1, 6 and 10): the dated zone table ``raytpu.core.tpu.catalog.OFFERED``
and the warnings ``raytpu validate`` prints from it, the flex-start TPU version floor, the zone and run duration every
Autopilot ComputeClass priority carries, and the queued-provisioning refusal's reason.

Sources: GKE "About flex-start provisioning mode" (https://cloud.google.com/kubernetes-engine/docs/concepts/dws:
TPUs from 1.33.0-gke.1712000; v6e asia-northeast1-b, us-east5-a, us-east5-b; v5e us-west4-a; v5p us-east5-a; "TPU v3
and v4 are not supported"); Cloud TPU "TPU regions and zones" (https://cloud.google.com/tpu/docs/regions-zones);
GoogleCloudPlatform/compute-class-api ``types.go`` ``Priority.Location.Zones``, ``Priority.MaxRunDurationSeconds``;
GoogleCloudPlatform/cluster-autoscaler ``pkg/computeclass/crd/ccc/ccc.go`` ``buildRuleFromPriority`` and
``pkg/provisioningrequests/scaleup/orchestrator.go``; GKE API ``NodePool.QueuedProvisioning.enabled`` (a queued pool's
nodes come only through a ProvisioningRequest, which the kit does not make: issue 40 item 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raytpu.core.common.errors import InvalidInputs
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec

pytestmark = pytest.mark.unit

FLEX_DOCS = "https://cloud.google.com/kubernetes-engine/docs/concepts/dws"


def a_slice(generation: str = "v6e", topology: str = "2x4", zone: str = "us-east5-b", **fields: Any) -> SliceSpec:
    return SliceSpec.create(name="s", generation=generation, topology=topology, zone=zone, **fields)


# (case, slice fields, what each warning must say; [] = no warning)
ZONE_CASES = [
    ("v6e-flex-in-documented-zone", dict(provisioning="flex-start"), []),
    ("v6e-flex-in-us-central1-b", dict(zone="us-central1-b", provisioning="flex-start"),
     ["GKE offers v6e flex-start only in asia-northeast1-b, us-east5-a, us-east5-b"]),
    ("v6e-on-demand-in-us-central1-b", dict(zone="us-central1-b"), []),
    ("v5e-flex-in-us-central1-a", dict(generation="v5e", topology="2x2", zone="us-central1-a",
                                       provisioning="flex-start"),
     ["GKE offers v5e flex-start only in us-west4-a"]),
    ("tpu7x-flex-unlisted", dict(generation="tpu7x", topology="2x2x1", zone="us-central1-c",
                                 provisioning="flex-start"),
     ["lists no tpu7x zones"]),
    ("v5p-outside-documented-zones", dict(generation="v5p", topology="2x2x1", zone="us-west1-a"),
     ["us-west1-a is not among the zones Google's TPU regions and zones page lists for v5p (us-east5-a, "
      "us-central1-a"]),
    ("flex-fallback-in-wrong-zone", dict(zone="us-central1-b", provisioning="spot", fallback=("flex-start",)),
     ["GKE offers v6e flex-start only in"]),
]


@pytest.mark.parametrize(("case", "fields", "expected"), ZONE_CASES, ids=[c[0] for c in ZONE_CASES])
def test_validate_warns_where_the_generation_or_its_mode_is_not_documented(case: str, fields: dict[str, Any],
                                                                          expected: list[str]) -> None:
    from raytpu.core.specs.spec_warnings import zone_warnings

    found = zone_warnings(a_slice(**fields))
    assert len(found) == len(expected) == len([w for w in found if "read 2026-12-03" in w]), found
    for line in expected:
        assert any(line in w for w in found), (line, found)


@pytest.mark.parametrize(("fields", "field"), [
    (dict(provisioning="flex-start"), "provisioning"),
    (dict(provisioning="spot", fallback=("on-demand", "flex-start")), "fallback[1]")])
def test_flex_start_on_a_generation_gke_does_not_support_is_refused(fields: dict[str, Any], field: str) -> None:
    """Issue 39.5: GKE's flex-start page says "TPU v3 and v4 are not supported": refused, not warned (was a
    warning, issue 27); a generation it merely does not list (tpu7x) stays a warning."""
    with pytest.raises(InvalidInputs) as info:
        a_slice(generation="v4", topology="2x2x1", zone="us-central2-b", **fields)
    (problem,) = info.value.problems
    assert problem.field == field and "does not support v4" in problem.problem and FLEX_DOCS in problem.problem
    assert "flex-start for v5e, v5p, v6e" in problem.valid


def test_validate_prints_the_zone_warning_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: an Autopilot v6e flex-start slice in us-central1 validates with a warning that names the
    field, the value and the zones that offer it (the CLI's entry point in process; the process-level contract of
    ``python -m raytpu validate`` is tests/test_cli.py's)."""
    from raytpu import cli

    config = tmp_path / "raytpu.yaml"
    config.write_text("project: my-ml-project\nregion: us-central1\ncluster: {name: demo, mode: autopilot}\n"
                      "slices:\n  - {name: burst, generation: v6e, topology: 2x4, zone: us-central1-b, "
                      "provisioning: flex-start}\n")
    code = cli.main(["validate", str(config)])
    stderr = capsys.readouterr().err
    assert code == 0, stderr
    assert "warning: slices[0].zone: GKE offers v6e flex-start only in asia-northeast1-b, us-east5-a, us-east5-b" \
        in stderr and "not us-central1-b" in stderr and FLEX_DOCS in stderr


def test_catalog_zones_are_the_offered_table() -> None:
    from raytpu.core.tpu.catalog import GENERATIONS, OFFERED

    assert {g.name: g.zones for g in GENERATIONS.values()} == OFFERED.any_mode
    assert OFFERED.flex_start_source == FLEX_DOCS


# (case, plans, cluster mode, provisioning modes, expected floor)
FLOOR_CASES = [
    ("flex-start-v6e", [("v6e", "2x4")], "standard", ("flex-start",), ("1.33.0-gke.1712000", "flex-start TPUs")),
    ("flex-start-fallback", [("v6e", "2x4")], "autopilot", ("spot", "flex-start"),
     ("1.33.0-gke.1712000", "flex-start TPUs")),
    ("spot-only", [("v6e", "2x4")], "standard", ("spot",), ("1.31.2-gke.1115000", "v6e on Standard")),
    ("tpu7x-above-flex", [("tpu7x", "2x2x1")], "standard", ("flex-start",), ("1.34.0-gke.2201000",
                                                                              "tpu7x on Standard")),
]


@pytest.mark.parametrize(("case", "plans", "mode", "modes", "expected"), FLOOR_CASES, ids=[c[0] for c in FLOOR_CASES])
def test_version_floor_holds_flex_start_tpus_at_gkes_floor(case: str, plans: list[tuple[str, str]], mode: str,
                                                          modes: tuple[str, ...], expected: tuple[str, str]) -> None:
    from raytpu.core.specs.slices.gke_versions import version_floor
    from raytpu.core.specs.slices.provisioning import MODES
    from raytpu.core.tpu.plan import plan_slice

    assert version_floor([plan_slice(*p) for p in plans], mode,
                         provisioning=[MODES[m] for m in modes]) == expected


# (case, slice fields, expected spec.priorities minus the tpu shape)
PRIORITY_CASES = [
    ("flex-start-with-duration", dict(provisioning="flex-start", max_run_duration_s=7200),
     [{"flexStart": {"enabled": True}, "maxRunDurationSeconds": 7200, "location": {"zones": ["us-east5-b"]}}]),
    ("flex-start-default-duration", dict(provisioning="flex-start"),
     [{"flexStart": {"enabled": True}, "location": {"zones": ["us-east5-b"]}}]),
    ("spot-then-flex-start", dict(zone="us-east5-a", provisioning="spot", fallback=("flex-start",)),
     [{"spot": True, "location": {"zones": ["us-east5-a"]}},
      {"flexStart": {"enabled": True}, "location": {"zones": ["us-east5-a"]}}]),
    # the run duration is the slice's: every priority carries it (compute-class-api Priority.MaxRunDurationSeconds)
    ("flex-start-then-spot", dict(provisioning="flex-start", max_run_duration_s=600, fallback=("spot",)),
     [{"flexStart": {"enabled": True}, "maxRunDurationSeconds": 600, "location": {"zones": ["us-east5-b"]}},
      {"spot": True, "maxRunDurationSeconds": 600, "location": {"zones": ["us-east5-b"]}}]),
    ("on-demand", dict(), [{"location": {"zones": ["us-east5-b"]}}]),
    ("on-demand-with-duration", dict(max_run_duration_s=86400),
     [{"maxRunDurationSeconds": 86400, "location": {"zones": ["us-east5-b"]}}]),
    ("spot-with-duration", dict(provisioning="spot", max_run_duration_s=30 * 86400),
     [{"spot": True, "maxRunDurationSeconds": 30 * 86400, "location": {"zones": ["us-east5-b"]}}]),
    ("reservation-with-duration", dict(provisioning="reservation", reservation="team-res", max_run_duration_s=3600),
     [{"reservations": {"affinity": "Specific", "specific": [{"name": "team-res", "project": "my-ml-project"}]},
       "maxRunDurationSeconds": 3600, "location": {"zones": ["us-east5-b"]}}]),
]


@pytest.mark.parametrize(("case", "fields", "expected"), PRIORITY_CASES, ids=[c[0] for c in PRIORITY_CASES])
def test_compute_class_priorities_hold_the_slice_zone_and_run_duration(
        case: str, fields: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    from raytpu.modules.parts.compute_class_props import ComputeClassProps

    priorities = ComputeClassProps(slice=a_slice(**fields), project="my-ml-project").priorities()
    assert [{k: v for k, v in p.items() if k != "tpu"} for p in priorities] == expected
    assert all(p["tpu"] == {"type": "tpu-v6e-slice", "count": 8, "topology": "2x4"} for p in priorities)


def test_queued_refusal_states_that_the_kit_makes_no_provisioning_request() -> None:
    """Issue 40 item 12: a queued pool gets nodes only through a ProvisioningRequest (GKE API
    ``NodePool.QueuedProvisioning.enabled``) and the kit makes none: that is the reason, not the head's PodSet."""
    from raytpu.core.specs import kinds
    with pytest.raises(InvalidInputs) as info:
        WorkloadSpec(name="train", kind=kinds.kind("train"), slice=a_slice(provisioning="queued"))
    problem = next(p for p in info.value.problems if p.field == "slice")
    assert "gets nodes only through a ProvisioningRequest" in problem.problem
    assert "the kit makes none" in problem.problem and "Pending" in problem.problem
    assert "PodSet" not in problem.problem and "head" not in problem.problem
    assert "on-demand" in problem.valid and "queued" not in problem.valid


@pytest.mark.parametrize(("kind", "run_s", "warned"), [
    ("train", 3600, True), ("train", 24 * 3600, False), ("train", None, False), ("serve", 600, False)])
def test_a_job_outlasting_its_flex_start_run_duration_is_warned(kind: str, run_s: int | None, warned: bool) -> None:
    """Issue 39.5: train's RayJob may run 24 h (activeDeadlineSeconds); a flex-start slice deleted after 1 h cuts
    it. A RayService has its own flex-start warning (serving_warnings)."""
    from raytpu.core.specs import kinds
    from raytpu.core.specs.spec_warnings import deadline_warnings

    item = a_slice(topology="4x4", provisioning="flex-start", max_run_duration_s=run_s)
    work = WorkloadSpec(name="w", kind=kinds.kind(kind), slice=item)
    found = deadline_warnings(work)
    assert bool(found) is warned, found
    if warned:
        assert "86400 s (activeDeadlineSeconds)" in found[0] and "max_run_duration_s 3600" in found[0]
