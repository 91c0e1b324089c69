"""Talking to a deployed stack (its :class:`~raytpu.outputs.StackOutputs`): ``kubectl`` for applying and
watching KubeRay objects, and the kit's core zip.

kubectl. Every call goes through :class:`Kubectl`, which runs the ``kubectl`` found on ``PATH``; the
context is ``--context`` if given, else the one ``gcloud container clusters get-credentials`` creates
(``gke_<project>_<location>_<cluster>``) when it exists, else an error naming that gcloud command. GKE
cannot be reached from the test machine, so the tests put a recording ``kubectl`` script on ``PATH``.
Standard library only.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raytpu.errors import RuntimeFailure
from raytpu.outputs import StackOutputs

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class Kubectl:
    """A thin ``kubectl`` wrapper: apply manifests, read objects and logs, with one context and namespace."""

    def __init__(self, namespace: str = "default", context: str | None = None, binary: str = "kubectl",
                 runner: Runner = subprocess.run) -> None:
        self.namespace = namespace
        self.context = context
        self.binary = binary
        self._run_process = runner

    def _base(self) -> list[str]:
        path = shutil.which(self.binary)
        if path is None:
            raise RuntimeFailure(f"kubectl: {self.binary!r} not found on PATH; valid: install kubectl "
                                 "(e.g. `gcloud components install kubectl`)")
        return [path, *(["--context", self.context] if self.context else [])]

    def run(self, args: list[str], stdin: str | None = None, namespaced: bool = True,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs ``kubectl [--context C] [-n NS] ARGS``; RuntimeFailure with its stderr when it fails."""
        cmd = [*self._base(), *(["-n", self.namespace] if namespaced else []), *args]
        result = self._run_process(cmd, input=stdin, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeFailure(f"kubectl {' '.join(args[:2])}: failed (exit {result.returncode}): "
                                 f"{detail[-1] if detail else 'no output'}; valid: a reachable cluster and "
                                 "the Ray Operator add-on (check `kubectl get crd rayjobs.ray.io`)")
        return result

    def contexts(self) -> list[str]:
        """Context names in the kubeconfig."""
        return self.run(["config", "get-contexts", "-o", "name"], namespaced=False).stdout.split()

    def apply(self, manifests: Iterable[Mapping[str, Any]]) -> list[str]:
        """``kubectl apply -f -`` of a ``v1`` List of ``manifests``; returns the ``kind/name`` lines."""
        document = {"apiVersion": "v1", "kind": "List", "items": [dict(m) for m in manifests]}
        out = self.run(["apply", "-f", "-"], stdin=json.dumps(document, indent=2) + "\n")
        return [line for line in out.stdout.splitlines() if line.strip()]

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object as JSON, or None when it does not exist."""
        result = self.run(["get", kind, name, "-o", "json"], check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            self.run(["get", kind, name, "-o", "json"])  # raises with the error
        data = json.loads(result.stdout)
        return data if isinstance(data, dict) else None

    def logs(self, target: str, tail: int = -1) -> str:
        """``kubectl logs TARGET`` (e.g. ``job/<rayjob>``, the K8sJobMode submitter); empty on failure."""
        result = self.run(["logs", target, f"--tail={tail}"], check=False)
        return result.stdout if result.returncode == 0 else ""


def gke_context(outputs: StackOutputs) -> str:
    """The kubeconfig context name ``gcloud container clusters get-credentials`` creates for the stack's cluster."""
    return f"gke_{outputs.project}_{outputs.location}_{outputs.cluster_name}"


def connect(outputs: StackOutputs, context: str | None = None, runner: Runner = subprocess.run) -> Kubectl:
    """A Kubectl for the stack's cluster: ``context``, else the gcloud-named context.

    Raises:
        RuntimeFailure: the gcloud-named context is not in the kubeconfig (names the command to create it).
    """
    chosen = context
    if chosen is None:
        chosen = gke_context(outputs)
        if chosen not in Kubectl(outputs.namespace, runner=runner).contexts():
            command = (f"gcloud container clusters get-credentials {outputs.cluster_name} --location "
                       f"{outputs.location} --project {outputs.project}")
            raise RuntimeFailure(f"kubectl: no context {chosen!r} for cluster {outputs.cluster_name!r}; valid: run "
                                 f"`{command}` or pass --context")
    return Kubectl(outputs.namespace, chosen, runner=runner)


# --------------------------------------------------------------------------------------------- RayJob status

TERMINAL_DEPLOYMENT = ("Complete", "Failed")
TERMINAL_JOB = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass(frozen=True)
class JobState:
    """A RayJob's status as read from ``kubectl get rayjob -o json``."""

    name: str
    deployment: str = ""
    job: str = ""
    message: str = ""
    reason: str = ""
    exists: bool = True

    @property
    def done(self) -> bool:
        """The job will not change any more (a job not found yet may still appear: not done)."""
        return self.exists and (self.deployment in TERMINAL_DEPLOYMENT or self.job in TERMINAL_JOB)

    @property
    def succeeded(self) -> bool:
        """The Ray job finished with SUCCEEDED."""
        return self.job == "SUCCEEDED" and self.deployment != "Failed"

    def describe(self) -> str:
        """``Running/RUNNING`` plus the reason and message when KubeRay gives one."""
        if not self.exists:
            return "not found"
        text = f"{self.deployment or 'New'}/{self.job or '-'}"
        extra = ": ".join(x for x in (self.reason, self.message) if x)
        return f"{text} ({extra})" if extra else text


def job_state(name: str, obj: Mapping[str, Any] | None) -> JobState:
    """The JobState of RayJob ``name`` from its JSON (None: it does not exist)."""
    if obj is None:
        return JobState(name, exists=False)
    status = obj.get("status") or {}
    return JobState(name, deployment=str(status.get("jobDeploymentStatus", "")),
                    job=str(status.get("jobStatus", "")), message=str(status.get("message", ""))[:300],
                    reason=str(status.get("reason", "")))


def wait_for_jobs(kubectl: Kubectl, names: Iterable[str], *, timeout_s: float, poll_s: float = 10.0,
                  progress: Callable[[str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> dict[str, JobState]:
    """Polls RayJobs until each is done or ``timeout_s`` passes; returns the last state of each.

    Progress lines (``[  12s] smoke-train-0: Running/RUNNING``) go to ``progress`` (default stderr) when a
    job's state changes; with no change for a minute, the pending jobs are listed again.
    """
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    pending = list(dict.fromkeys(names))
    states: dict[str, JobState] = {}
    start = clock()
    last_said = start
    while True:
        changed = []
        for name in list(pending):
            state = job_state(name, kubectl.get("rayjob", name))
            if states.get(name) != state:
                changed.append(name)
            states[name] = state
            if state.done:
                pending.remove(name)
        elapsed = clock() - start
        heartbeat = clock() - last_said >= 60
        for name in (pending if heartbeat and not changed else changed):
            say(f"[{elapsed:5.0f}s] {name}: {states[name].describe()}")
        if changed or heartbeat:
            last_said = clock()
        if not pending or elapsed >= timeout_s:
            return states
        sleep(min(poll_s, max(timeout_s - elapsed, 0.1)))


def service_ready(obj: Mapping[str, Any] | None) -> bool:
    """A RayService is serving: condition ``Ready`` is True (KubeRay >= 1.3) or ``serviceStatus: Running``."""
    status = (obj or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status")) == "True"
    return status.get("serviceStatus") == "Running"


def wait_for_service(kubectl: Kubectl, name: str, *, timeout_s: float, poll_s: float = 10.0,
                     progress: Callable[[str], None] | None = None,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> bool:
    """Polls RayService ``name`` until it is ready (True) or ``timeout_s`` passes (False)."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    start = clock()
    last = ""
    while True:
        obj = kubectl.get("rayservice", name)
        ready = service_ready(obj)
        status = (obj or {}).get("status") or {}
        now = "ready" if ready else str(status.get("serviceStatus") or "not ready")
        if now != last:
            say(f"[{clock() - start:5.0f}s] {name}: {now}")
            last = now
        if ready:
            return True
        if clock() - start >= timeout_s:
            return False
        sleep(min(poll_s, max(timeout_s - (clock() - start), 0.1)))


def run_id(now: float | None = None) -> str:
    """A short, time-ordered suffix for RayJob names (base 36 seconds since the epoch: 6 characters)."""
    value = int(time.time() if now is None else now)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while value:
        value, rem = divmod(value, 36)
        out = digits[rem] + out
    return out or "0"


# --------------------------------------------------------------------------------------------- the core zip

CORE_MODULES = ("__init__.py", "catalog.py", "errors.py", "kinds.py", "kuberay.py", "plan.py", "provisioning.py",
                "py.typed", "report.py", "spec.py")
"""Top-level files of ``raytpu`` in the jobs' core zip: the pure-Python core a Ray job may import. The
CLI, ``gke``/``local`` and the CDK subpackages (``stacks``, ``modules``) never run inside a Ray job."""

CORE_PACKAGES = ("workloads",)
"""Subpackages of ``raytpu`` in the core zip, whole (``*.py`` and ``py.typed``; no ``__pycache__``)."""

CORE_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
"""The timestamp of every zip entry (the earliest a zip can hold), so the same sources give the same bytes."""


def core_zip_files(root: str | Path | None = None) -> list[tuple[str, Path]]:
    """``(name in the zip, source file)`` of every core file, sorted by name; ``root`` is the ``raytpu``
    package directory (default: the imported package's). Symlinked subpackages (the source tree's
    ``workloads``) are followed."""
    if root is None:
        import raytpu

        root = Path(raytpu.__file__).resolve().parent
    root = Path(root)
    files = {f"raytpu/{name}": root / name for name in CORE_MODULES if (root / name).is_file()}
    for package in CORE_PACKAGES:
        base = root / package
        for dirpath, dirnames, filenames in os.walk(base, followlinks=True):
            rel = Path(dirpath).relative_to(base)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            for name in filenames:
                if name.endswith((".py", ".typed")) and not name.startswith("."):
                    files[(Path("raytpu") / package / rel / name).as_posix()] = Path(dirpath) / name
    return sorted(files.items())


def core_zip_bytes(root: str | Path | None = None) -> bytes:
    """The core zip for ``py_modules``, deterministically: the same sources give the same bytes on every
    machine (sorted entries, fixed timestamps and modes, stored uncompressed: deflate output differs
    between zlib builds). One top-level directory, ``raytpu/``, as Ray's ``py_modules`` expects of a zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, path in core_zip_files(root):
            info = zipfile.ZipInfo(name, date_time=CORE_ZIP_DATE)
            info.create_system = 3  # Unix, whatever builds it
            info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def build_core_zip(dest: str | Path) -> Path:
    """Writes :func:`core_zip_bytes` (the core and its workloads; no CLI, no CDK code) to ``dest``."""
    dest = Path(dest)
    dest.write_bytes(core_zip_bytes())
    return dest


def upload_target(py_modules: str | None, bucket: str) -> str:
    """Where ``--upload-core`` copies the zip: ``py_modules`` if it is a ``gs://`` URI, else the bucket's default."""
    from raytpu.kuberay import core_zip_uri

    return py_modules if py_modules and py_modules.startswith("gs://") else core_zip_uri(bucket)


def upload_core(uri: str, runner: Runner = subprocess.run) -> None:
    """Builds the core zip and copies it to ``uri`` with ``gcloud storage cp`` (RuntimeFailure on error)."""
    import tempfile

    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise RuntimeFailure("gcloud: not found on PATH; valid: install the Google Cloud CLI, or upload "
                             f"the core zip to {uri} yourself and drop --upload-core")
    with tempfile.TemporaryDirectory() as tmp:
        path = build_core_zip(Path(tmp) / Path(uri).name)
        result = runner([gcloud, "storage", "cp", str(path), uri], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise RuntimeFailure(f"gcloud storage cp: failed (exit {result.returncode}): "
                             f"{detail[-1] if detail else 'no output'}; valid: write access to {uri}")
