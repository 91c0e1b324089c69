"""``raytpu local serve --workload NAME`` for a team's own Serve app (``serve_app``): the RayService's serveConfigV2
(:func:`raytpu.core.manifests.team_serving.serve_config`) with the team's code as the emulated RayJobs get it
(:func:`raytpu.local.running.submission.team_runtime`: the same zip in the run folder as ``working_dir``), every run's
checkpoints under ``<run folder>/checkpoints`` as ``RAYTPU_STORAGE``; deployed by a driver process
(:mod:`raytpu.workloads.team_serve_local`). No vLLM: the kit's ``.venv`` runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.manifests import team_serving
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.local.slice.state import LocalCluster, Progress

if TYPE_CHECKING:
    from raytpu.teamcode.prepared import TeamCode

LOCAL_PROXY = "HeadOnly"
"""One proxy on the head at 127.0.0.1, as the LLM path's local deploy (:mod:`raytpu.workloads.serve`)."""


def local_config(cluster: LocalCluster, work: WorkloadSpec, code: TeamCode, api_key_file: str | None,
                 secrets_file: str | None = None) -> dict[str, object]:
    """serveConfigV2 of ``work`` on ``cluster``: GKE's, ``code``'s zip and checkpoints in the run folder; the workload's
    ``env`` as on GKE, its secrets through ``secrets_file`` (:mod:`raytpu.workloads.local_secrets`: never in the
    runtime env, which Ray logs), loaded by every worker of the app at its start."""
    from raytpu.local.running.submission import team_runtime
    from raytpu.workloads import local_secrets

    handed = ({local_secrets.ENV: secrets_file, local_secrets.SETUP_HOOK_ENV: local_secrets.setup_hook()}
              if secrets_file else None)
    runtime = team_runtime(cluster, work, work.name, code, handed) or {}
    runtime["env_vars"] = {**runtime.get("env_vars", {}),
                           **team_serving.team_env(work, work.name, str(cluster.run_dir))}
    config = team_serving.serve_config(work, runtime, os.path.abspath(api_key_file) if api_key_file else None)
    return {**config, "proxy_location": LOCAL_PROXY}


def deploy_team_app(cluster: LocalCluster, work: WorkloadSpec, code: TeamCode, timeout_s: float,
                    api_key_file: str | None, progress: Progress) -> str:
    """Deploys ``work``'s app on ``cluster`` and returns its URL; RuntimeFailure with Serve's reason when it fails
    (a deployment too large for a host is named there). Its secrets come from this process's environment (exit 2
    naming ``<code.field>.secrets.NAME`` when one is unset, before anything is deployed); their file stays while
    the app serves, until ``raytpu local down``."""
    from raytpu.core.specs.runtime import run_env
    from raytpu.workloads import local_secrets
    from raytpu.workloads.team_serve_local import CONFIG_ENV

    values = run_env.local_secret_values(work.secrets, os.environ, code.field)
    progress(f"deploying {work.name} ({work.serve_app}) onto {cluster.address}")
    handed = local_secrets.write(values) if values else None
    if handed:
        local_secrets.keep(str(cluster.run_dir), handed)
    env = {**cluster.driver_env(), CONFIG_ENV: json.dumps(local_config(cluster, work, code, api_key_file, handed))}
    cmd = [sys.executable, "-m", "raytpu.workloads.team_serve_local", "--deploy-timeout-s", f"{timeout_s:g}"]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s + 60,
                              start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeFailure(f"local.serve: {work.name} did not deploy within {timeout_s + 60:g}s",
                             "a larger --timeout-s") from exc
    for line in done.stderr.splitlines():  # Serve's own log of the deploy, through the command's sink
        progress(line)
    found = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    if done.returncode != 0 or "endpoint" not in found:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        said = next((line.removeprefix("error: ") for line in reversed(lines) if line.startswith("error: ")),
                    lines[-1])  # the deploy's own error line (workloads/support/_entry.py), else its last word
        problem, _, valid = said.partition("; valid: ")
        raise RuntimeFailure(f"local.serve: {work.name} did not deploy: {problem}", valid or "its log above")
    return found["endpoint"].strip()
