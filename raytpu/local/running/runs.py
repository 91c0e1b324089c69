"""``raytpu runs --local``: the local cluster's Job Submission API jobs, their driver's log, a training rank's output
(:data:`TRAIN_LOG_GLOB`: not in the driver's log), and cancel."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from raytpu.core.common import errors, names
from raytpu.local.slice.connection import speak_auth
from raytpu.local.slice.state import LocalCluster
from raytpu.runs.run_list import Run, carried_overrides, carried_spec, iso

if TYPE_CHECKING:
    from ray.job_submission import JobDetails, JobSubmissionClient

Sink = Callable[[str], None]

TRAIN_LOG_GLOB = "session_*/logs/train/ray-train-app-worker-*.log"
"""A Ray Train worker's log under a node's temp dir: the training function's prints as JSON records (``world_rank``,
``job_id``). Source: Ray 2.60 ``LoggingManager`` (docs/FACTS.md#client-runs)."""
POLL_S = 0.5


def jobs_client(cluster: LocalCluster) -> JobSubmissionClient:
    """The cluster's Job Submission API, with its token."""
    speak_auth(cluster)
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(cluster.dashboard)
    except (ConnectionError, RuntimeError, AuthenticationError) as exc:  # not up, or its token file is gone
        raise errors.RuntimeFailure(f"local: the cluster's Job Submission API at {cluster.dashboard} did not answer "
                                    f"({errors.excerpt(exc)})", "`raytpu local status`; `raytpu local up` "
                                    "after a `down`") from exc


def to_run(job: JobDetails, now: float) -> Run:
    """One submitted job as a :class:`Run`: kind and slice from the labels in its metadata (``submit --local``
    writes them), else from its spec."""
    labels, spec = job.metadata or {}, carried_spec((job.runtime_env or {}).get("env_vars"))
    started = job.start_time / 1000 if job.start_time else None
    return Run(run=str(job.submission_id), object="Ray job",
               kind=labels.get(names.WORKLOAD_LABEL) or str(spec.get("kind", "")),
               workload=str(spec.get("name", "")),
               slice=labels.get(names.SLICE_LABEL) or _slice_name(spec.get("slice")),
               state=str(job.status.value), age_s=None if started is None else round(now - started, 1),
               started_at=iso(started), done=job.status.is_terminal(), overrides=carried_overrides(labels))


def _slice_name(carried: object) -> str:
    return str(carried.get("name", "")) if isinstance(carried, dict) else ""


def list_runs(client: JobSubmissionClient, now: float | None = None) -> list[Run]:
    """Every job submitted through the Job Submission API, oldest first; a running one whose placement group is
    pending says what it waits for (:func:`waits`)."""
    from ray.job_submission import JobType

    at = time.time() if now is None else now
    jobs = [job for job in client.list_jobs() if job.type == JobType.SUBMISSION and job.submission_id]
    waiting = waits(client.get_address(), [str(job.job_id) for job in jobs
                                           if job.job_id and not job.status.is_terminal()], at)
    runs = [replace(to_run(job, at), waiting_for=waiting.get(str(job.job_id))) for job in jobs]
    return sorted(runs, key=lambda r: (r.started_at, r.run))


def waits(dashboard: str, job_ids: list[str], now: float) -> dict[str, str]:
    """``{job id: waiting line}`` of the running jobs ``job_ids`` (:func:`raytpu.local.running.pending.job_waits`: one
    state API call, two when one waits; none when no job runs); {} when the look fails: the listing goes on."""
    from raytpu.local.running import pending

    if not job_ids:
        return {}
    try:
        return pending.job_waits(pending.StateApi(dashboard), job_ids, now)
    except Exception:  # the runs are listed without their notes
        return {}


def driver_log(client: JobSubmissionClient, run: Run, *, follow: bool, timeout_s: float, sink: Sink) -> None:
    """The driver's log (Job Submission API); ``follow``: streamed until the job ends (or ``timeout_s``)."""
    from raytpu.local.running.jobs import follow_job

    if not follow:
        for line in client.get_job_logs(run.run).splitlines():
            sink(line)
        return
    if follow_job(client, run.run, sink, timeout_s=timeout_s, poll_s=POLL_S) is None:
        raise errors.RuntimeFailure(f"{run.run}: still running after {timeout_s:g}s (left running)",
                                    "a larger --timeout-s")


def train_logs(cluster: LocalCluster) -> list[Path]:
    """Every Ray Train worker application log of the cluster's nodes."""
    temps = dict.fromkeys([cluster.temp_dir, *(node.temp for node in cluster.nodes if node.temp)])
    return sorted({path.resolve() for temp in temps for path in Path(temp).glob(TRAIN_LOG_GLOB)})  # session_latest
    # is a link to the session folder: one file, found twice


def rank_records(lines: Iterable[str], job_id: str) -> Iterable[tuple[int, str]]:
    """``(world rank, message)`` of each record of job ``job_id`` (the Ray job id) among a train log's lines."""
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(record, dict) and record.get("job_id") == job_id and "world_rank" in record:
            yield int(record["world_rank"]), str(record.get("message", ""))


class _Tail:
    """New complete lines of a set of growing files, read from where the last look stopped."""

    def __init__(self) -> None:
        self.offsets: dict[Path, int] = {}

    def read(self, paths: Iterable[Path]) -> list[str]:
        lines: list[str] = []
        for path in paths:
            with path.open("rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                data = handle.read()
            complete = data[:data.rfind(b"\n") + 1]
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            lines += complete.decode("utf-8", errors="replace").splitlines()
        return lines


def rank_log(cluster: LocalCluster, client: JobSubmissionClient, run: Run, rank: int, *, follow: bool,
             timeout_s: float, sink: Sink) -> None:
    """Rank ``rank``'s output from the nodes' train logs; ``follow``: until the job ends. InvalidInput (exit 2)
    naming the ranks the job had when it has ended and rank ``rank`` never wrote."""
    tail, seen, shown = _Tail(), set(), False
    deadline = time.monotonic() + timeout_s
    while True:
        info = client.get_job_info(run.run)
        ended = info.status.is_terminal()
        for world_rank, message in rank_records(tail.read(train_logs(cluster)), str(info.job_id or "")):
            seen.add(world_rank)
            if world_rank == rank:
                shown = True
                sink(message)
        if ended or not follow:
            break
        if time.monotonic() > deadline:
            raise errors.RuntimeFailure(f"{run.run}: still running after {timeout_s:g}s (left running)",
                                        "a larger --timeout-s")
        time.sleep(POLL_S)
    if not shown and ended:
        raise errors.invalid_choice("--rank", rank, sorted(seen) or ["(none: the run wrote no Ray Train worker log)"],
                                    f" (no output of that rank in {run.run})")


def cancel(cluster: LocalCluster, client: JobSubmissionClient, run: Run, *, timeout_s: float, progress: Sink) -> None:
    """Stops the job (Job Submission API ``stop_job``), then waits until it has ended and every placement group it
    created is removed (State API): the slice is free. RuntimeFailure past ``timeout_s``. A stop Ray did not deliver
    (no supervisor actor yet: a job just submitted) is asked again until it is.
    Source: Ray 2.60 ``JobManager.stop_job`` (fire and forget; False when the job's supervisor actor is not found)."""
    from ray.util.state import list_placement_groups

    deadline = time.monotonic() + timeout_s
    if requested := client.stop_job(run.run):
        progress(f"{run.run}: stop requested")
    while True:
        info = client.get_job_info(run.run)
        if not requested and not info.status.is_terminal() and (requested := client.stop_job(run.run)):
            progress(f"{run.run}: stop requested")
        held = [] if not info.job_id else [
            pg.placement_group_id for pg in list_placement_groups(
                address=cluster.dashboard, filters=[("creator_job_id", "=", info.job_id)],
                raise_on_missing_output=False) if pg.state != "REMOVED"]
        if info.status.is_terminal() and not held:
            progress(f"{run.run}: {info.status.value}; no placement group of it is left (the slice is free)")
            return
        if time.monotonic() > deadline:
            raise errors.RuntimeFailure(f"{run.run}: {info.status.value} with {len(held)} placement group(s) still "
                                        f"held after {timeout_s:g}s", "a larger --timeout-s, or `raytpu local down`")
        time.sleep(POLL_S)
