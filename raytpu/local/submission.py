"""``raytpu submit --local``: a job workload of the config, with its own spec, on the running emulated slice through
Ray's Job Submission API, followed as on a deployed stack (the driver's log, verdicts, timeline)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from raytpu import followed_run, local
from raytpu.core import errors, timeline
from raytpu.local.from_config import job_workload
from raytpu.local.phases import emulated_phases

if TYPE_CHECKING:
    from raytpu.core.spec import WorkloadSpec


def submit_local(work: WorkloadSpec, *, directory: str | Path | None, run_id: str | None, timeout_s: float,
                 report_path: str | None) -> int:
    """Runs ``work`` on the local cluster recorded in ``directory`` (default run dir); returns the exit code. The
    package's names (``local.submit_job``) are read at call time: what the package exports is what runs."""
    from raytpu.cluster import gke

    if not work.kind.is_job:
        raise errors.invalid_value("WORKLOAD", work.name, f"is a {work.kind.object_kind}; --local runs RayJobs",
                                   "a job workload (smoke, train)")
    cluster = local.LocalCluster.load(local.run_dir(directory))
    if cluster is None:
        raise errors.RuntimeFailure(f"local: no local cluster recorded in {local.run_dir(directory)}",
                                    "start one with `raytpu local up`")
    run_name = f"{work.name}-{run_id or gke.run_id()}"
    # the run dir stands in for the pods' GCS FUSE mount: <run dir>/checkpoints/<run name>, as on GKE
    extra = work.kind.run_args(run_name, mount_path=cluster.run_dir)
    recorder = timeline.Recorder.for_command()
    emulated_phases(recorder, cluster.hosts_recorded_wall())
    recorder.mark("applied", f"{run_name} submitted through Ray's Job Submission API (the emulated RayJob)",
                  timeline.EMULATED)
    lines: list[str] = []
    try:
        status = local.submit_job(cluster, work.kind.name, *extra, timeout_s=timeout_s, sink=followed_run.echo(lines),
                            work=job_workload(cluster, work))
    finally:
        recorder.take(timeline.parse_stamp_lines("\n".join(lines)))
        followed_run.show_timeline(recorder.finish(), run_name, report_path, None)
    followed_run.show_verdicts(work.kind, lines)
    if status != "SUCCEEDED":
        raise errors.RuntimeFailure(f"{run_name}: Ray job ended {status}", "see its driver log above")
    print(f"Ray job {run_name}: {status}", file=sys.stderr)
    return 0
