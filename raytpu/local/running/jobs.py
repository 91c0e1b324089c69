"""Workloads on a local cluster, run as a RayJob's entrypoint runs them, the spec in ``RAYTPU_WORKLOAD``: as a driver
process (:func:`run_workload`) or through Ray's Job Submission API (:func:`submit_job`)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from raytpu.core.common import names
from raytpu.core.common.errors import InvalidInput, RuntimeFailure, excerpt
from raytpu.core.common.interrupt import interrupts_held, raise_missed
from raytpu.core.common.names import MANAGED_BY, SLICE_LABEL, WORKLOAD_LABEL
from raytpu.core.specs.kinds import kind
from raytpu.core.specs.runtime import compile_cache
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.local.slice.connection import check_head, speak_auth
from raytpu.local.slice.emulation import ENV_EMULATED
from raytpu.local.slice.procs import signal_group
from raytpu.local.slice.state import LocalCluster, Progress

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient


def workload_command(kind_name: str, *extra: str) -> list[str]:
    """``python -m raytpu.workloads.<program> ...``: what the RayJob entrypoint of kind ``kind_name`` runs."""
    return [sys.executable, "-m", kind(kind_name).module, *extra]


def compile_env(cluster: LocalCluster, work: WorkloadSpec) -> dict[str, str]:
    """JAX's compilation cache of a job on the emulated slice: in the run folder (standing in for the bucket's
    mount), one per interpreter and slice shape, shared by every host and run, as on GKE."""
    if work.kind.takes_model:
        return {}
    return compile_cache.job_env(work.compile_cache, mount=str(cluster.run_dir), image=f"emulated:{sys.prefix}",
                                 generation=work.plan.generation, topology=work.plan.topology,
                                 slices=work.slices_per_run, team=work.runs_team_code)


def run_workload(cluster: LocalCluster, kind_name: str, *extra: str, timeout_s: float = 600.0,
                 echo: Progress | None = None, work: WorkloadSpec | None = None,
                 on_stdout: Progress | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a workload as a driver process, as a RayJob entrypoint would (spec ``work`` in ``RAYTPU_WORKLOAD``, default
    :meth:`LocalCluster.workload`); stderr lines go to ``echo`` as they come, stdout is captured (each line also to
    ``on_stdout`` as it comes: a stamp line can start the next step early). RuntimeFailure past ``timeout_s``
    (killed)."""
    cmd = workload_command(kind_name, *extra)
    spec = work or cluster.workload(kind_name)
    env = cluster.driver_env() | compile_env(cluster, spec) | spec.workload_env()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    err_lines: list[str] = []
    out_parts: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line)
            if echo is not None:
                echo(line.rstrip("\n"))

    # one reader per pipe: `communicate` would read stderr too and take lines from under `pump` (seen under load:
    # a failed smoke run's stderr came back empty)
    def pump_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out_parts.append(line)
            if on_stdout is not None:
                on_stdout(line.rstrip("\n"))

    readers = [threading.Thread(target=pump, daemon=True), threading.Thread(target=pump_out, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        signal_group(proc.pid, signal.SIGKILL)  # the driver leads its own session: its whole group goes
        proc.wait()
        raise RuntimeFailure(f"local.{kind_name}: the workload ran past {timeout_s:g}s and was killed") from exc
    for reader in readers:
        reader.join(timeout=30)
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out_parts), "".join(err_lines))


class RunIdTaken(InvalidInput):
    """A job of that submission id exists on the cluster (nothing was submitted)."""


def jobs_client_class() -> type[JobSubmissionClient]:
    """Ray's job client, Ray loaded whole (call :func:`speak_auth` first): a Ctrl-C waits until it has loaded. One
    raised while Ray's compiled core module loads was dropped there (the run went on, submitted) or left ``ray``
    half-imported (the stop's own import of it failed: exit 1) (issue 68).
    Source: Ray 2.60 ``ray/__init__.py`` (``import ray._raylet``: a Cython module whose init imports Python modules)."""
    with interrupts_held():
        from ray.job_submission import JobSubmissionClient
    return JobSubmissionClient


def free_run_id(cluster: LocalCluster, workload: str) -> str:
    """A default run id no job of ``workload`` on the cluster has (:func:`raytpu.core.common.names.run_id`, moved on
    a second at a time past the taken ones: two submissions in one second get two runs)."""
    run_id = names.run_id()
    try:
        check_head(cluster)
        speak_auth(cluster)
    except RuntimeFailure:  # a dead head: submit_job says so, with what to run
        return run_id
    taken = {job.submission_id for job in jobs_client_class()(cluster.dashboard).list_jobs() if job.submission_id}
    while f"{workload}-{run_id}" in taken:
        run_id = names.next_run_id(run_id)
    return run_id


def submit_job(cluster: LocalCluster, kind_name: str, *extra: str, timeout_s: float = 600.0,
               sink: Progress | None = None, poll_s: float = 1.0, slices: int | None = None,
               work: WorkloadSpec | None = None, entrypoint: str | None = None,
               runtime: dict[str, Any] | None = None, submission_id: str | None = None,
               metadata: dict[str, str] | None = None) -> str:
    """Submits a workload through Ray's Job Submission API (as KubeRay's submitter does), streams its driver log to
    ``sink`` and returns its final status; RuntimeFailure past ``timeout_s``. The spec travels in ``RAYTPU_WORKLOAD``:
    ``work`` (:func:`raytpu.local.slice.from_config.job_workload`), default :meth:`LocalCluster.workload` over
    ``slices``; ``entrypoint`` replaces the kind's program (``kind: job``), ``runtime`` adds to the runtime env; its
    metadata carries a RayJob's labels (``raytpu runs``); ``submission_id`` names it."""
    check_head(cluster)  # a client of a dead dashboard retries for a while, then raises
    speak_auth(cluster)  # the client sends the cluster's token, to this cluster's address
    client = jobs_client_class()(cluster.dashboard)
    spec = work or cluster.workload(kind_name, slices)
    labels = {**MANAGED_BY, WORKLOAD_LABEL: spec.kind.name, SLICE_LABEL: spec.slice.name, **(metadata or {})}
    env = dict((runtime or {}).get("env_vars") or {}) | compile_env(cluster, spec) | spec.workload_env() \
        | {ENV_EMULATED: "1"}
    try:
        with interrupts_held():  # submitted or not, never unknown: a Ctrl-C waits for Ray's answer (issue 68)
            job_id = client.submit_job(entrypoint=entrypoint or shlex.join(workload_command(kind_name, *extra)),
                                       runtime_env={**(runtime or {}), "env_vars": env},
                                       submission_id=submission_id, metadata=labels)
    except RuntimeError as exc:  # Ray 2.60 JobManager.submit_job: "Job with submission_id ... already exists"
        if submission_id and "already exists" in str(exc):
            raise RunIdTaken("--run-id", f"{excerpt(submission_id)} names a job this cluster has run (a new run "
                             "never reuses a name)", "a --run-id of no existing run (`raytpu runs --local`)") from exc
        raise
    from requests.exceptions import ConnectionError as Unreachable  # what Ray's client raises on a dead dashboard

    try:
        status = follow_job(client, job_id, sink or (lambda _line: None), timeout_s=timeout_s, poll_s=poll_s)
    except Unreachable as exc:  # the slice went away mid-run (`raytpu local down`, a crash)
        raise RuntimeFailure(f"local.{kind_name}: job {job_id}: the emulated slice stopped answering while its run was "
                             f"followed (its dashboard {cluster.dashboard})",
                             f"`raytpu local status --dir {cluster.run_dir}`, then `raytpu local up` and submit "
                             "again") from exc
    if status is None:
        client.stop_job(job_id)
        raise RuntimeFailure(f"local.{kind_name}: job {job_id} still running after {timeout_s:g}s",
                             "a larger --timeout-s")
    return status


def follow_job(client: JobSubmissionClient, job_id: str, sink: Progress, *, timeout_s: float,
               poll_s: float = 1.0) -> str | None:
    """Streams job ``job_id``'s driver log to ``sink`` until it ends; its final status, or None when ``timeout_s``
    passes first (the job is left running)."""
    shown = 0
    deadline = time.monotonic() + timeout_s
    while True:
        raise_missed()  # a Ctrl-C Python dropped (raytpu.core.common.interrupt) ends the follow at the next look
        status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        for line in logs[shown:].splitlines():
            sink(line)
        shown = len(logs)
        if status.is_terminal():
            return str(status.value)
        if time.monotonic() > deadline:
            return None
        time.sleep(poll_s)
