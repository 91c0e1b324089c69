"""A serving workload deployed onto the emulated slice as its Ray Serve LLM app's CPU twin (vLLM's CPU build), shared by
``raytpu local serve``, ``raytpu demo --serve`` and the serving bench. Standard library at import."""

from __future__ import annotations

import importlib.util
import os
import sys

from raytpu.core.common import timeline
from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.specs.spec import WorkloadSpec
from raytpu.local.running.jobs import run_workload
from raytpu.local.slice.state import LocalCluster, Progress


def _echo(line: str) -> None:
    sys.stderr.write(f"{line}\n")


def _progress(line: str) -> None:
    sys.stderr.write(f"raytpu local: {line}\n")
    sys.stderr.flush()


def require_vllm() -> None:
    """RuntimeFailure naming the serve environment where vLLM is not importable (this interpreter's)."""
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeFailure(f"local.serve: vLLM is not installed in {sys.executable}'s environment",
                             "the serve environment (`make serve` builds .venv-serve; then `.venv-serve/bin/raytpu "
                             "local up --slice serve` and `.venv-serve/bin/raytpu local serve`)")


def deploy_serve(cluster: LocalCluster, work: WorkloadSpec, timeout_s: float, api_key_file: str | None = None,
                 recorder: timeline.Recorder | None = None, progress: Progress = _progress,
                 echo: Progress = _echo) -> tuple[str, str]:
    """Runs the serve workload on ``cluster`` (``progress`` lines and its log, ``echo``, on stderr); returns (endpoint
    URL, model). Its timeline stamps (the app ``RUNNING``) go to ``recorder`` when given."""
    require_vllm()
    progress(f"deploying {work.name} (CPU twin) onto {cluster.address}")
    key_args = ("--api-key-file", os.path.abspath(api_key_file)) if api_key_file else ()
    done = run_workload(cluster, "serve", "--deploy-timeout-s", f"{timeout_s:g}", *key_args,
                        timeout_s=timeout_s + 60, echo=echo, work=work)
    if recorder is not None:
        recorder.take(timeline.parse_stamp_lines(done.stdout))
    found = dict(line.split(": ", 1) for line in done.stdout.splitlines()
                 if ": " in line and not line.startswith(timeline.MARK))
    if done.returncode != 0 or not {"endpoint", "model"} <= found.keys():
        raise RuntimeFailure(f"local.serve: the serve workload exited {done.returncode} without an endpoint",
                             "its log above")
    return found["endpoint"].strip(), found["model"].strip()
