"""Talking to a deployed stack: its outputs file, and ``kubectl`` for applying and watching KubeRay objects.

Stack outputs. Two shapes are read (``raytpu submit/smoke --outputs FILE``):

- what ``cdktf deploy --outputs-file FILE`` (or ``cdktn deploy``) writes: ``{"<stack id>": {"<output>": value}}``;
  the stack is picked by ``--stack``: the cluster stack's id (``<cluster name>-cluster``), or just the
  cluster name;
- what ``terraform output -json`` prints in the stack's directory (``cdktf.out/stacks/<id>``):
  ``{"<output>": {"value": value, ...}}`` (no stack level; ``--stack`` is then only a label).

Output names are matched loosely (case, ``_``/``-`` ignored, and a construct-path prefix such as
``cluster_cluster_name`` still ends in ``cluster_name``). Required: ``cluster_name``, ``location``,
``bucket``, ``service_account`` (or ``ksa``; the Kubernetes service account). Optional: ``project``,
``namespace`` (default ``default``), ``kube_context``.

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
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raytpu import errors
from raytpu.errors import InvalidInput, RuntimeFailure

DEFAULT_OUTPUTS = "outputs.json"
"""Where ``cdktf deploy --outputs-file outputs.json`` (the documented deploy command) writes outputs."""

_FIELDS = {
    "cluster_name": ("cluster_name", "cluster"),
    "location": ("location", "cluster_location"),
    "bucket": ("bucket", "bucket_name"),
    "service_account": ("service_account", "ksa", "kubernetes_service_account", "ksa_name"),
    "project": ("project", "project_id"),
    "namespace": ("namespace", "ksa_namespace"),
    "kube_context": ("kube_context", "context"),
}
_REQUIRED = ("cluster_name", "location", "bucket", "service_account")


def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


@dataclass(frozen=True)
class StackOutputs:
    """What a workload needs from a deployed cluster stack."""

    stack: str
    cluster_name: str
    location: str
    bucket: str
    service_account: str
    project: str | None = None
    namespace: str = "default"
    kube_context: str | None = None

    @property
    def gke_context(self) -> str | None:
        """The kubeconfig context name ``gcloud container clusters get-credentials`` creates."""
        if not self.project:
            return None
        return f"gke_{self.project}_{self.location}_{self.cluster_name}"

    @property
    def credentials_command(self) -> str:
        """The gcloud command that creates that context."""
        project = f" --project {self.project}" if self.project else ""
        return f"gcloud container clusters get-credentials {self.cluster_name} --location {self.location}{project}"


def _unwrap(value: Any) -> Any:
    """``terraform output -json`` wraps each value as ``{"value": v, "type": t, "sensitive": s}``."""
    if isinstance(value, dict) and "value" in value and set(value) <= {"value", "type", "sensitive"}:
        return value["value"]
    return value


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested outputs (cdktf nests outputs of nested constructs by construct id) as ``a_b_c`` keys."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}_{key}" if prefix else key
        value = _unwrap(value)
        if isinstance(value, dict):
            out.update(_flatten(value, name))
        else:
            out[name] = value
    return out


def parse_outputs(data: Any, stack: str, source: str = "outputs") -> StackOutputs:
    """Reads ``data`` (either shape described in the module docstring) for ``stack``.

    Raises:
        InvalidInput: no such stack in a cdktf outputs file, or a required output is missing.
    """
    if not isinstance(data, dict) or not data:
        raise InvalidInput("outputs", f"{source} holds no stack outputs",
                           "the JSON `cdktf deploy --outputs-file FILE` or `terraform output -json` writes")
    values: dict[str, Any]
    if all(isinstance(_unwrap(v), dict) for v in data.values()) and not any(
            isinstance(v, dict) and "value" in v for v in data.values()):
        key = stack if stack in data else f"{stack}-cluster"
        if key not in data:
            raise errors.invalid_choice("--stack", stack, sorted(data), f" (stacks in {source})")
        values = {k: _unwrap(v) for k, v in data[key].items()}
    else:
        values = {k: _unwrap(v) for k, v in data.items()}
    normalised = {_norm(k): v for k, v in _flatten(values).items()}
    found: dict[str, Any] = {}
    for field, aliases in _FIELDS.items():
        for alias in aliases:
            key = _norm(alias)
            hit = normalised.get(key)
            if hit is None:
                hit = next((v for k, v in normalised.items() if k.endswith(key)), None)
            if hit is not None:
                found[field] = str(hit)
                break
    missing = [f for f in _REQUIRED if f not in found]
    if missing:
        raise errors.missing(f"outputs.{missing[0]}", f"in {source} for stack {stack!r} (missing: "
                             f"{', '.join(missing)}; found: {', '.join(sorted(values)) or 'nothing'})",
                             "outputs " + ", ".join(_REQUIRED) + " of the cluster stack")
    return StackOutputs(stack=stack, **found)


def read_outputs(path: str | Path, stack: str) -> StackOutputs:
    """Reads a stack outputs file; InvalidInput (exit 2) when it is missing or unreadable."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidInput("--outputs", f"cannot read {str(path)!r} ({exc.strerror})",
                           "the file `cdktf deploy --outputs-file FILE` wrote (default "
                           f"{DEFAULT_OUTPUTS}), or `terraform output -json > FILE`") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput("--outputs", f"{str(path)!r} is not JSON ({exc.msg} at line {exc.lineno})",
                           "the JSON `cdktf deploy --outputs-file` writes") from None
    return parse_outputs(data, stack, str(path))


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


def connect(outputs: StackOutputs, context: str | None = None, runner: Runner = subprocess.run) -> Kubectl:
    """A Kubectl for the stack's cluster: ``context``, else the outputs' or the gcloud-named context.

    Raises:
        RuntimeFailure: the gcloud-named context is not in the kubeconfig (names the command to create it).
    """
    chosen = context or outputs.kube_context
    if chosen is None and outputs.gke_context is not None:
        probe = Kubectl(outputs.namespace, runner=runner)
        if outputs.gke_context not in probe.contexts():
            raise RuntimeFailure(f"kubectl: no context {outputs.gke_context!r} for cluster "
                                 f"{outputs.cluster_name!r}; valid: run `{outputs.credentials_command}` or pass "
                                 "--context")
        chosen = outputs.gke_context
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

CORE_MODULES = ("__init__.py", "catalog.py", "config.py", "errors.py", "kuberay.py", "plan.py", "py.typed",
                "report.py")
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
