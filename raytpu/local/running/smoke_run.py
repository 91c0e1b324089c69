"""``raytpu local smoke``'s run: the smoke workload on the emulated slice, its verdicts and its timeline, as a RayJob's
submitter would run it on GKE. The command checks its flags, then prints and writes what this returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raytpu.core.common import errors, report, timeline
from raytpu.local.slice.phases import emulated_phases
from raytpu.local.slice.state import LocalCluster, Progress

if TYPE_CHECKING:
    from raytpu.core.common.report import Verdict
    from raytpu.core.common.timeline import Timeline


@dataclass(frozen=True)
class SmokeRun:
    """The verdicts the driver printed (none when it ended without one), the run's timeline, its exit code and the
    tail of its stderr (what to show when there is no verdict)."""

    verdicts: list[Verdict]
    timeline: Timeline
    returncode: int
    stderr: str


def dcn_problems(dcn_slices: int | None, available: int) -> list[errors.InvalidInput]:
    """``--dcn-slices`` against the local cluster's ``available`` slices: 1..available."""
    if dcn_slices is None or 1 <= dcn_slices <= available:
        return []
    return [errors.invalid_value("--dcn-slices", dcn_slices, "is more slices than this local cluster has"
                                 if dcn_slices > 1 else "is not a number of slices",
                                 f"1..{available} (`raytpu local up --slices N` for more)")]


def run_smoke(cluster: LocalCluster, dcn_slices: int | None, timeout_s: float, recorder: timeline.Recorder,
              progress: Progress) -> SmokeRun:
    """Runs the smoke workload over every slice of ``cluster`` (and across ``dcn_slices`` of them over DCN); the
    emulated phases and the driver's stamps go to ``recorder``. ``raytpu.local.running.jobs.run_workload`` is read at
    call time (what a test patches there is what runs)."""
    from raytpu.local.running import jobs

    plan = cluster.slice_plan
    progress(f"smoke check of {len(cluster.slices)} {plan.ray_pod_type} slice(s) at {cluster.address}")
    emulated_phases(recorder, cluster.hosts_recorded_wall())
    recorder.mark("applied", "the smoke driver started on the emulated slice, as a RayJob's submitter starts it",
                  timeline.EMULATED)
    extra = ("--dcn-slices", str(dcn_slices)) if dcn_slices else ()
    done = jobs.run_workload(cluster, "smoke", *extra, timeout_s=timeout_s)
    recorder.take(timeline.parse_stamp_lines(done.stdout))
    verdicts = report.parse_verdict_lines(done.stdout)
    finished = recorder.finish("verdicts read" if verdicts else "the driver ended with no verdict")
    return SmokeRun(verdicts, finished, done.returncode, "\n".join(done.stderr.strip().splitlines()[-20:]))
