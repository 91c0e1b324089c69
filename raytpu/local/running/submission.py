"""``raytpu submit --local``: a job workload of the config on the running emulated slice through Ray's Job Submission
API, followed as on a stack. A ``batch`` there runs its engine's CPU twin with ``--cpu-model``'s folder (as
``raytpu demo --data``) and replaces an existing ``output`` only with ``--overwrite``."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raytpu.core.common import errors, timeline
from raytpu.core.specs.runtime import data
from raytpu.local.running import jobs as jobs
from raytpu.local.slice import state as state
from raytpu.local.slice.from_config import job_workload
from raytpu.local.slice.phases import emulated_phases
from raytpu.runs.following import FollowedRun, Streams
from raytpu.teamcode.prepared import TeamCode

if TYPE_CHECKING:
    from raytpu.core.specs.spec import WorkloadSpec
    from raytpu.teamcode.requirements import Lock


CPU_MODEL_VALID = ("a local model folder (config.json, weights, tokenizer) vLLM's CPU build loads, e.g. the tiny "
                   "model's: `python -m raytpu.workloads.tiny_llm` prints its path")


def has_vllm() -> bool:
    """vLLM is importable here (without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def batch_args(work: WorkloadSpec, *, cpu_model: str | None, overwrite: bool, prefix: str = "") -> list[str]:
    """The batch program's flags for ``work`` on the emulated slice (``--cpu-model ABSPATH [--overwrite]``); none
    for another kind. InvalidInput (exit 2) before anything starts: either flag given for another kind, a batch
    workload without ``--cpu-model`` or with one that is not a folder, a local ``input`` that does not exist, an
    ``output`` that is, holds or sits in it, or holds something without ``--overwrite`` (fields under ``prefix``)."""
    if not work.kind.batches:
        errors.raise_found([errors.InvalidInput(flag, f"is for a batch workload; {work.name} is a {work.kind.name} "
                                                      "workload", f"no {flag} for it, or a batch workload")
                            for flag, given in (("--cpu-model", cpu_model is not None), ("--overwrite", overwrite))
                            if given])
        return []
    if cpu_model is None:
        raise errors.missing("--cpu-model", "for a batch workload on the emulated slice (no TPU: vLLM's CPU build "
                             "runs the engine)", CPU_MODEL_VALID)
    if not os.path.isdir(cpu_model):
        raise errors.invalid_value("--cpu-model", cpu_model, "is not a folder", CPU_MODEL_VALID)
    assert work.input is not None and work.output is not None  # the spec requires both for kind batch
    found = data.run_problems(work.input, work.output, overwrite, prefix)
    if not os.path.isfile(os.path.join(cpu_model, "config.json")):  # before the cluster is looked for (issue 68)
        found.append(errors.invalid_value("--cpu-model", cpu_model, "is a folder without config.json (no model)",
                                          CPU_MODEL_VALID))
    errors.raise_found(found)
    if not has_vllm():  # the job runs this interpreter (jobs.workload_command), as `local serve` does
        raise errors.RuntimeFailure(f"local.batch: vLLM is not installed in {sys.executable}'s environment",
                                    "the serve environment (`make serve` builds .venv-serve; then `.venv-serve/bin/"
                                    "raytpu local up --slice SLICE` and `.venv-serve/bin/raytpu submit NAME --local`)")
    return ["--cpu-model", os.path.abspath(cpu_model), *(["--overwrite"] if overwrite else [])]


def team_runtime(cluster: state.LocalCluster, work: WorkloadSpec, run_name: str, code: TeamCode,
                 secrets: dict[str, str] | None = None, in_file: Collection[str] = ()) -> dict[str, Any] | None:
    """A team's code on the emulated slice as on GKE: ``code``'s content-addressed zip as ``working_dir`` (in
    ``<run dir>/code/``, standing in for the bucket's mount), the ``RAYTPU_*`` variables, the workload's ``env``,
    ``secrets`` (the local secrets file's path: :mod:`raytpu.workloads.local_secrets`), this interpreter first on
    ``PATH``; with a lock, the venv of it. The ``env`` names in ``in_file`` travel in that file instead (values Ray
    would expand)."""
    if not work.runs_team_code:
        return None
    from raytpu.core.common import names
    from raytpu.core.specs.runtime import user_code

    mount = str(cluster.run_dir)
    runtime: dict[str, Any] = {"env_vars": {
        **{k: v for k, v in (work.env or {}).items() if k not in in_file}, **(secrets or {}),
        **user_code.raytpu_env(work.plan, slices=work.slices_per_run,
                            storage=names.run_storage(run_name, mount, work.team), run=run_name),
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])}}
    if code.zip is not None:
        path = Path(mount) / names.code_zip_object(code.zip.object_name)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}")
            partial.write_bytes(code.zip.data)
            partial.replace(path)
        runtime["working_dir"] = names.working_dir_uri(code.zip.object_name, mount)
    if code.lock is not None:
        lock = lock_runtime(cluster, code.lock)
        runtime = {**runtime, **lock, "env_vars": {**runtime["env_vars"], **lock["env_vars"]}}
    return runtime


def lock_runtime(cluster: state.LocalCluster, lock: Lock) -> dict[str, Any]:
    """The team's driver and workers in the venv of ``lock`` (built once per lock in the run folder): Ray's
    ``py_executable``, and that venv's ``bin`` first on ``PATH`` (an entrypoint's ``python``)."""
    from raytpu.teamcode import envs

    python, _built = envs.ensure(Path(cluster.run_dir), lock)
    return {"py_executable": str(python), "env_vars": {"PATH": os.pathsep.join(
        [str(python.parent), os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])}}


def attempt_id(run_name: str, attempt: int) -> str:
    """The submission id of a run's ``attempt`` (1 first): the run's name, then ``<run>-retry<N>``. Its
    ``RAYTPU_RUN`` and checkpoints stay the run's, as a retried RayJob keeps its name
    (docs/FACTS.md#kuberay-retries)."""
    return run_name if attempt == 1 else f"{run_name}-retry{attempt - 1}"


def submit_local(work: WorkloadSpec, *, directory: str | Path | None, run_id: str | None, timeout_s: float,
                 streams: Streams, cpu_model: str | None = None, overwrite: bool = False,
                 code: TeamCode | None = None, overridden: dict[str, Any] | None = None) -> int:
    """Runs ``work`` on the local cluster in ``directory`` (default run dir), its lines and its end to ``streams``;
    returns the exit code. ``code``: the workload's team code as the command read it once (None only for a workload
    without ``code``). Names such as ``jobs.submit_job`` are read through their module at call time, so what a test
    patches there is what runs."""
    if code is None:
        assert work.code is None, f"{work.name}: its code folder is read once by the command (TeamCode)"
        code = TeamCode("")
    prefix = code.field
    if not work.kind.is_job:
        from raytpu.core.specs.kinds import KINDS

        job_kinds = ", ".join(k.name for k in KINDS.values() if k.is_job)
        raise errors.invalid_value("WORKLOAD", work.name, f"is a {work.kind.object_kind} (kind {work.kind.name}); "
                                   f"--local runs RayJobs, and `raytpu local serve --workload {work.name}` (with the "
                                   "same --config) deploys this one on the emulated slice",
                                   f"a workload of a job kind ({job_kinds}), or `raytpu local serve --workload "
                                   f"{work.name}`")
    program_args = batch_args(work, cpu_model=cpu_model, overwrite=overwrite, prefix=prefix)
    from raytpu.core.specs.runtime import run_env

    secrets = run_env.local_secret_values(work.secrets, os.environ, prefix)  # exit 2 before anything starts
    if work.dataset is not None:
        errors.raise_found([p.at(prefix) for p in data.local_input_problems("dataset", work.dataset)])
    cluster = state.LocalCluster.load(state.run_dir(directory))
    if cluster is None:
        raise errors.RuntimeFailure(f"local: no local cluster recorded in {state.run_dir(directory)}",
                                    "start one with `raytpu local up`")
    run_name = f"{work.name}-{run_id or jobs.free_run_id(cluster, work.name)}"
    # the run dir stands in for the pods' GCS FUSE mount: <run dir>/checkpoints[/<team>]/<run name>, as on GKE
    extra = [*work.kind.run_args(run_name, mount_path=cluster.run_dir, team=work.team), *program_args]
    local_work = job_workload(cluster, work)
    from raytpu.workloads import local_secrets
    from raytpu.workloads.support import job_worker_env

    # values Ray would expand ($NAME, ${NAME}: Ray 2.60 ray._private.utils.update_envs) travel as written, beside
    # the secrets, in a private file (Ray logs a runtime env's env_vars), as the pods' env carries them on GKE
    literal = {name: value for name, value in (work.env or {}).items() if "$" in value}
    handed = local_secrets.write({**literal, **secrets}) if secrets or literal else None
    try:
        runtime = team_runtime(cluster, local_work, run_name, code,
                               {local_secrets.ENV: handed, local_secrets.SETUP_HOOK_ENV: job_worker_env.HOOK}
                               if handed else None, in_file=literal)  # every Ray worker of the run loads them
    except BaseException:
        if handed:
            local_secrets.remove(handed)
        raise
    entrypoint = work.entrypoint if work.kind.runs_entrypoint and not work.on_every_host else None
    if handed and entrypoint is not None:  # the team's own driver starts with them in its environment
        entrypoint = f"python -m raytpu.workloads.local_secrets {entrypoint}"
    python = (runtime or {}).get("py_executable", sys.executable)
    if work.on_every_host:  # the kit's driver starts it on every host (each host loads the secrets itself)
        from raytpu.core.manifests.kuberay import EVERY_HOST_PROGRAM

        entrypoint = shlex.join([python, "-m", EVERY_HOST_PROGRAM])
    elif runtime is not None and "py_executable" in runtime and entrypoint is None:  # the driver in the lock's venv
        entrypoint = shlex.join([python, "-m", work.kind.module, *extra])
    from raytpu.config import overrides

    metadata = {overrides.ANNOTATION: json.dumps(overridden, sort_keys=True)} if overridden else None
    recorder = timeline.Recorder.for_command()
    emulated_phases(recorder, cluster.hosts_recorded_wall())
    if work.kind.runs_entrypoint:
        from raytpu.core.specs.runtime import user_code

        recorder.unmeasured(user_code.unmeasured_phases(work.on_every_host))
    recorder.mark("applied", f"{run_name} submitted through Ray's Job Submission API (the emulated RayJob)",
                  timeline.EMULATED)
    lines: list[str] = []
    refused = False
    interrupted: KeyboardInterrupt | None = None
    attempts, ends = 1 + work.backoff_limit, time.monotonic() + timeout_s  # --timeout-s bounds them all
    from raytpu.core.common.interrupt import raise_missed
    from raytpu.local.running.pending import watching

    try:
        for attempt in range(1, attempts + 1):  # as KubeRay's backoffLimit: a FAILED Ray job is run again, anew
            submission_id = attempt_id(run_name, attempt)
            raise_missed()  # a Ctrl-C Python dropped (raytpu.core.common.interrupt) ends it here, before the submission
            with watching(cluster, submission_id, streams.err):  # a placement group that stays pending is said
                status = jobs.submit_job(cluster, work.kind.name, *extra,
                                         timeout_s=max(ends - time.monotonic(), 1.0), sink=streams.keeping(lines),
                                         work=local_work, runtime=runtime, submission_id=submission_id,
                                         metadata=metadata, entrypoint=entrypoint)
            if status != "FAILED" or attempt == attempts:
                break
            streams.err(f"Ray job {submission_id}: {status} (attempt {attempt} of {attempts}); retrying as "
                        f"{attempt_id(run_name, attempt + 1)}")
    except errors.InvalidInput as exc:
        refused = attempt == 1  # (a run id in use) nothing ran: no timeline, no report
        if refused and run_id is None and isinstance(exc, jobs.RunIdTaken):  # a submit that same second took it
            return submit_local(work, directory=directory, run_id=None, timeout_s=timeout_s, streams=streams,
                                cpu_model=cpu_model, overwrite=overwrite, code=code, overridden=overridden)
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the run is stopped below, its timeline never "finished"
        interrupted = exc
    finally:
        if handed:
            local_secrets.remove(handed)
        if not refused and interrupted is None:
            recorder.take(timeline.parse_stamp_lines("\n".join(lines)))
            streams.ended(FollowedRun(run_name, recorder.finish(), None, tuple(lines)))
    if interrupted is not None:
        return stop_interrupted(cluster, submission_id, interrupted, streams)
    streams.verdicts(work.kind, lines)
    if status != "SUCCEEDED":
        tried = f" after {attempt} attempts" if attempt > 1 else ""
        from raytpu.teamcode import failures

        raise errors.RuntimeFailure(
            failures.failed_problem(f"{run_name}: Ray job ended {status}{tried}", lines),
            failures.failed_valid(lines, prefix, has_requirements=work.requirements is not None))
    streams.err(f"Ray job {submission_id}: {status}")
    return 0


STOP_S = 120.0
"""How long an interrupted submit waits for its run to stop and free the slice (Ray stops a job's driver with SIGTERM,
then SIGKILL after ``RAY_JOB_STOP_WAIT_TIME_S``, 3 s by default).
Source: Ray 2.60 ``JobSupervisor.DEFAULT_RAY_JOB_STOP_WAIT_TIME_S``."""


def stop_interrupted(cluster: state.LocalCluster, submission_id: str, interrupt: KeyboardInterrupt,
                     streams: Streams, timeout_s: float = STOP_S) -> int:
    """After Ctrl-C or SIGTERM: stops the Ray job ``submission_id`` and waits until its placement groups are gone
    (``raytpu runs cancel``'s stop); returns 130 (:mod:`raytpu.core.common.interrupt`). A job that was never
    submitted (the signal came first) is said so."""
    from raytpu.core.common.interrupt import stop_on_interrupt
    from raytpu.local.running import runs
    from raytpu.runs.run_list import Run

    def stop() -> bool:
        client = runs.jobs_client(cluster)
        try:
            client.get_job_info(submission_id)
        except RuntimeError:  # Ray 2.60 JobSubmissionClient.get_job_info: the job does not exist
            return False
        run = Run(run=submission_id, object="Ray job", kind="", workload="", slice="", state="", age_s=None,
                  started_at="", done=False)
        runs.cancel(cluster, client, run, timeout_s=timeout_s, progress=streams.err)
        return True

    cancel = f"raytpu runs cancel {submission_id} --local --dir {shlex.quote(str(cluster.run_dir))}"
    return stop_on_interrupt(interrupt, submission_id, stop, cancel, streams.err)

