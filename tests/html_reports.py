"""Reports of emulated v6e 4x4 slices for the HTML page's tests (issue 42): healthy, one chip slow, one host
missing, each verdict made by the smoke workload's own judge and driver from made-up host results (the helpers of
tests/test_smoke_unit.py), with a timeline as the recorder writes it."""

from __future__ import annotations

from typing import Any

from test_smoke_unit import args, judged, node, result

from raytpu.core import report, timeline
from raytpu.core.plan import SlicePlan, plan_slice
from raytpu.workloads import slices
from raytpu.workloads.smoke import driver

SLOW = (2, 1)
"""The slow chip: host 2's device 1 (chip 9 of the map)."""
MISSING = 2
"""The worker id of the missing host."""


def the_plan() -> SlicePlan:
    return plan_slice("v6e", "4x4")


def healthy(name: str = "slice-ok") -> report.Verdict:
    plan = the_plan()
    verdict = judged(plan, {w: result(plan, w) for w in range(plan.hosts)})
    verdict["slice"] = name
    return verdict


def slow_chip(name: str = "slice-slow") -> report.Verdict:
    plan = the_plan()
    results = {w: result(plan, w) for w in range(plan.hosts)}
    results[SLOW[0]]["matmul_tflops"][SLOW[1]] *= 0.5
    verdict = judged(plan, results)
    verdict["slice"] = name
    return verdict


def missing_host(name: str = "slice-gone") -> report.Verdict:
    plan = the_plan()
    present = [w for w in range(plan.hosts) if w != MISSING]
    inventory = slices.SliceInventory(name, {w: node(plan, name, w) for w in present}, plan.hosts)
    return driver.check_slice(plan, inventory, args())


def a_timeline() -> timeline.Timeline:
    clock = iter([0.0, 0.5, 2.0, 9.5, 31.0, 40.0])
    recorder = timeline.Recorder(monotonic=lambda: next(clock), wall=lambda: 1.7e9)
    recorder.mark("applied", "RayJob applied")
    recorder.mark("scheduled", "every pod bound")
    recorder.absent("nodes_ready", "no nodes on the emulated slice")
    recorder.mark("ray_joined", "4 hosts joined", timeline.EMULATED)
    recorder.mark("reserved", "slice reserved")
    return recorder.finish("verdicts read")


def smoke_document(*verdicts: report.Verdict) -> dict[str, Any]:
    """What ``report.write_reports`` writes to smoke.json for ``verdicts``."""
    return {"format": report.FORMAT, "healthy": report.all_healthy(verdicts), "slices": list(verdicts),
            "stack": "ray-tpu-cluster", "timelines": {"smoke-a": a_timeline()}}
