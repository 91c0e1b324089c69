"""Operating a deployed stack (:class:`~raytpu.cluster.outputs.StackOutputs`): connect with google-auth, apply, and
follow RayJobs and RayServices with progress, every call through :class:`raytpu.cluster.kube.kube_client.KubeClient`."""

from __future__ import annotations

import bisect
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raytpu.cluster.kube.kube_client import KubeClient
from raytpu.cluster.outputs import StackOutputs
from raytpu.core.common import errors
from raytpu.core.common.errors import RaytpuError, RuntimeFailure
from raytpu.core.specs.spec import ClusterSpec

Progress = Callable[[str], None]


def connect(outputs: StackOutputs, credentials: Any = None) -> KubeClient:
    """A client of the stack's cluster (its endpoint and CA), authenticated with ``credentials`` (default: ADC)."""
    return KubeClient(outputs.endpoint, outputs.ca_certificate, outputs.namespace, credentials)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- RayJob status

TERMINAL_DEPLOYMENT = ("Complete", "Failed", "ValidationFailed")
"""A RayJob KubeRay will not move on from; ``ValidationFailed`` comes before any ``jobStatus`` and is never requeued.
Source: KubeRay v1.7.0 ``RayJobReconciler.Reconcile`` (``validateRayJob``)."""
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
    failed: int = 0
    backoff_limit: int = 0

    @property
    def done(self) -> bool:
        """The job will not change any more (a job not found yet may still appear: not done); a failed Ray job with
        retries left is not (KubeRay persists ``Retrying`` with the old ``jobStatus``, then starts a new attempt).
        Source: KubeRay v1.7.0 checkBackoffLimitAndUpdateStatusIfNeeded."""
        if self.deployment in TERMINAL_DEPLOYMENT:
            return self.exists
        retries_left = self.deployment == "Retrying" or (self.job == "FAILED" and self.failed < self.backoff_limit)
        return self.exists and self.job in TERMINAL_JOB and not retries_left

    @property
    def attempt(self) -> int:
        """Which attempt this is (1 first): ``status.failed`` counts the failed ones, the last included once Failed."""
        return self.failed + (self.deployment != "Failed")

    @property
    def succeeded(self) -> bool:
        """The Ray job finished with SUCCEEDED."""
        return self.job == "SUCCEEDED" and self.deployment not in ("Failed", "ValidationFailed")

    @property
    def status(self) -> str:
        """``Running/RUNNING``, with ``attempt 2 of 4`` when the RayJob may retry."""
        text = f"{self.deployment or 'New'}/{self.job or '-'}"
        if self.backoff_limit:
            text += f" attempt {min(self.attempt, self.backoff_limit + 1)} of {self.backoff_limit + 1}"
        return text

    def describe(self) -> str:
        """:attr:`status` plus the reason and message when KubeRay gives one."""
        if not self.exists:
            return "not found"
        extra = ": ".join(x for x in (self.reason, self.message) if x)
        return f"{self.status} ({extra})" if extra else self.status


def apply_with_network_policy(client: KubeClient, obj: Mapping[str, Any], spec: ClusterSpec) -> dict[str, Any]:
    """Applies a KubeRay object behind its NetworkPolicy: the policy first (no pod runs unguarded), the object, then the
    policy owned by it, so the garbage collector deletes it with the object (``runs cancel``, kubectl, anything).
    A failed apply of a new object deletes its new policy (:func:`_withdraw`). Returns the server's object.
    Source: https://kubernetes.io/docs/concepts/overview/working-with-objects/owners-dependents"""
    from raytpu.core.manifests import kuberay
    policy = kuberay.network_policy(obj, spec)
    kind, name = obj["kind"], obj["metadata"]["name"]
    existing = client.get(kind, name)  # an update keeps its policy owned throughout
    client.apply(kuberay.owned_by(policy, existing) if existing else policy)
    try:
        applied = client.apply(obj)
    except RaytpuError:
        if existing is None:
            _withdraw(client, policy, kind, name)
        raise
    client.apply(kuberay.owned_by(policy, applied))
    return applied


def _withdraw(client: KubeClient, policy: Mapping[str, Any], kind: str, name: str) -> None:
    """Deletes the policy of an object whose apply failed, unless the object exists after all (a reply lost after the
    server created it: its pods need the policy). Best effort: the apply's own error is the one reported."""
    with contextlib.suppress(RaytpuError):
        if client.get(kind, name) is None:
            client.delete("NetworkPolicy", policy["metadata"]["name"])


def job_state(name: str, obj: Mapping[str, Any] | None) -> JobState:
    """The JobState of RayJob ``name`` from its JSON (None: it does not exist)."""
    if obj is None:
        return JobState(name, exists=False)
    status = obj.get("status") or {}
    return JobState(name, deployment=str(status.get("jobDeploymentStatus", "")),
                    job=str(status.get("jobStatus", "")), message=str(status.get("message", ""))[:300],
                    reason=str(status.get("reason", "")), failed=_count(status.get("failed")),
                    backoff_limit=_count((obj.get("spec") or {}).get("backoffLimit")))


def _count(value: object) -> int:
    """A count KubeRay writes (an int32 that may be absent); 0 when absent or not a whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def follow_jobs(client: KubeClient, names: Iterable[str], *, timeout_s: float,
                progress: Progress | None = None, clock: Callable[[], float] = time.monotonic) -> dict[str, JobState]:
    """Watches RayJobs until each is done or ``timeout_s`` passes; returns the last state of each. One watch per job
    (resumed by the client); a progress line (``[ 12s] smoke-train-0: Running/RUNNING``) on each change."""
    say = progress or _stderr
    start = clock()
    states = {name: JobState(name, exists=False) for name in dict.fromkeys(names)}
    lock = threading.Lock()
    failures: list[BaseException] = []

    def follow(name: str) -> None:
        try:
            for obj in client.watch("RayJob", name, timeout_s=timeout_s):
                state = job_state(name, obj)
                with lock:
                    changed = states[name] != state
                    states[name] = state
                if changed:
                    say(f"[{clock() - start:5.0f}s] {name}: {state.describe()}")
                if state.done:
                    return
        except BaseException as exc:  # reported by the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=follow, args=(name,), daemon=True) for name in states]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(timeout_s - (clock() - start), 0) + 5)
    if failures:
        raise failures[0]
    return dict(states)


class PrintedLines:
    """The lines printed of one attempt's driver log, so that reading it again prints only what is new: a stream that
    broke mid-run is read again from the start, and a replacement submitter pod (the Job's next pod, same Ray job)
    replays the whole log (``ray job logs --follow``). A re-read is aligned with what was printed, line by line in
    order; a line not printed before is new (issue 49)."""

    def __init__(self) -> None:
        self.count = 0
        self._at: dict[str, list[int]] = {}  # line -> its positions among those printed, ascending

    def reader(self) -> Callable[[str], bool]:
        """One read of the log: called with each line, True when it is new (then counted as printed)."""
        behind, position = self.count, 0  # a re-read replays the first `behind` lines printed

        def new(line: str) -> bool:
            nonlocal position
            if position < behind:
                seen = self._at.get(line, [])
                at = bisect.bisect_left(seen, position)
                if at < len(seen) and seen[at] < behind:
                    position = seen[at] + 1
                    return False
            self._at.setdefault(line, []).append(self.count)
            self.count += 1
            return True

        return new


LOG_POLL_S = 3.0
"""How often :class:`LogStreamer` looks again for a pod to read (a broken stream, a replacement pod)."""


class LogStreamer:
    """Streams a K8sJobMode RayJob's driver log (its submitter Job's pod) to ``sink`` while it runs: every ``poll_s``
    it looks for a pod whose log has not ended (once the Ray cluster is up; a retry's new pod; a stream that broke,
    read again) until :meth:`stop`. Each line is printed once per attempt (:class:`PrintedLines`): a retry is a new
    Ray job (``status.jobId``), whose lines all print. Source: KubeRay v1.7.0 ``rayjob_controller.go`` (a retry clears
    ``jobId``; ``initRayJobStatusIfNeed`` makes a new one; docs/FACTS.md#kuberay-retries)."""

    def __init__(self, client: KubeClient, job_name: str, sink: Callable[[str], Any],
                 poll_s: float | None = None) -> None:
        self.client = client
        self.job_name = job_name
        self.sink = sink
        self.poll_s = LOG_POLL_S if poll_s is None else poll_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Starts streaming in a background thread."""
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """The job is over: read what is left of the log (one last look for a pod), then stop."""
        self._done.set()
        self._thread.join(timeout=timeout_s)

    def _attempt(self, pod: str) -> str:
        """The Ray job the pod's log belongs to (the RayJob's ``status.jobId``), else the pod."""
        with contextlib.suppress(RuntimeFailure, AttributeError):
            job_id = ((self.client.get("RayJob", self.job_name) or {}).get("status") or {}).get("jobId")
            if job_id:
                return f"job:{job_id}"
        return f"pod:{pod}"

    def _run(self) -> None:
        ended: set[str] = set()  # a pod whose log ended; a newer one is a replacement or the next attempt's
        printed: dict[str, PrintedLines] = {}
        while True:
            last_look = self._done.is_set()
            with contextlib.suppress(RuntimeFailure):  # no pod yet, or a broken stream: look again
                if (pod := self.client.job_pod(self.job_name)) is not None and pod not in ended:
                    new = printed.setdefault(self._attempt(pod), PrintedLines()).reader()
                    for line in self.client.logs(pod, follow=True):
                        if new(line):
                            self.sink(line)
                    ended.add(pod)  # the stream ended whole: the container exited
            if last_look:
                return
            self._done.wait(self.poll_s)


def service_ready(obj: Mapping[str, Any] | None) -> bool:
    """A RayService is serving: condition ``Ready`` is True (KubeRay >= 1.3) or ``serviceStatus: Running``."""
    status = (obj or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status")) == "True"
    return status.get("serviceStatus") == "Running"


def apps_running(obj: Mapping[str, Any] | None) -> bool:
    """Every Serve application the serving cluster lists is RUNNING (none listed: nothing to contradict ``Ready``).
    KubeRay's Ready counts serve endpoints, which the head's proxy gives as soon as routes exist, before replicas run.
    Source: KubeRay v1.7.0 ``calculateConditions`` (NumServeEndpoints); Ray 2.60 ``ProxyRouter.ready_for_traffic``."""
    apps = (((obj or {}).get("status") or {}).get("activeServiceStatus") or {}).get("applicationStatuses") or {}
    return all(isinstance(a, Mapping) and a.get("status") == "RUNNING" for a in apps.values())


OPERATOR_GRACE_S = 180.0
"""How long a RayService's head may be Ready with no Serve application status before :func:`wait_for_service` says the
operator cannot reach it (reachable, the app is listed in seconds). Source: docs/FACTS.md#ray-serve-operator-grace."""
CHECK_EVERY_S = 30.0
"""How often :func:`wait_for_service` looks at a RayService that is not changing."""


def operator_unreached(client: KubeClient, obj: Mapping[str, Any]) -> bool:
    """An operator that cannot reach the head: a Ready head pod, yet no ``applicationStatuses`` in the pending or active
    status (only the operator's dashboard reads fill them). Source: KubeRay v1.7.0 ``utils/constant.go``."""
    status = obj.get("status") or {}
    sides = [status.get(k) or {} for k in ("pendingServiceStatus", "activeServiceStatus")]
    if any(side.get("applicationStatuses") for side in sides):
        return False
    for cluster in filter(None, (side.get("rayClusterName") for side in sides)):
        for pod in client.pods(f"ray.io/cluster={cluster},ray.io/node-type=head"):
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and str(c.get("status")) == "True" for c in conditions):
                return True
    return False


DEPLOY_FAILED = "DEPLOY_FAILED"
"""A Serve application that failed to deploy (its import, a missing requirement, a deployment asking more than a host
has): terminal for that config, so waiting on is pointless. Source: Ray 2.60 ``ray.serve.schema.ApplicationStatus``;
KubeRay v1.7.0 copies each application's status and message into the RayService's ``status.activeServiceStatus`` /
``pendingServiceStatus.applicationStatuses`` (``ray.io_rayservices.yaml``)."""


FAILED_GRACE_S = 60.0
"""How long an application must stay DEPLOY_FAILED before ``--wait`` fails on it: Serve moves a deployment whose health
check failed while updating to DEPLOY_FAILED and back to HEALTHY when it recovers, and the first status after an
in-place update may still be the previous config's. Source: Ray 2.60 ``DeploymentStatusInfo.handle_transition``;
KubeRay v1.7.0 ``reconcileServe`` (statuses read before ``updateServeDeployment``)."""


def failed_applications(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(application, Serve's message) of every application of the RayService that failed to deploy, on its active or
    its pending cluster; the failing deployment's own message where the application's only names it."""
    status = service.get("status") or {}
    found = []
    for side in ("pendingServiceStatus", "activeServiceStatus"):
        for app, state in sorted(((status.get(side) or {}).get("applicationStatuses") or {}).items()):
            if isinstance(state, Mapping) and state.get("status") == DEPLOY_FAILED:
                deployments = [str((d or {}).get("message") or "") for d in
                               (state.get("serveDeploymentStatuses") or {}).values() if isinstance(d, Mapping)]
                found.append((str(app), "\n".join([str(state.get("message") or ""), *filter(None, deployments)])))
    return found


def wait_for_service(client: KubeClient, name: str, *, timeout_s: float, progress: Progress | None = None,
                     clock: Callable[[], float] = time.monotonic, unreached: str | None = None) -> bool:
    """Watches RayService ``name`` until ready (True) or ``timeout_s`` passes (False); prints ``unreached`` (the fix)
    once when :func:`operator_unreached` holds for :data:`OPERATOR_GRACE_S`, and waits on. RuntimeFailure quoting
    Serve's message as soon as an application failed to deploy (:func:`failed_applications`)."""
    say = progress or _stderr
    start = clock()
    last = ""
    stuck_since: float | None = None
    failing_since: float | None = None
    while (left := timeout_s - (clock() - start)) > 0:
        seen: Mapping[str, Any] | None = None
        for seen in client.watch("RayService", name, timeout_s=min(left, CHECK_EVERY_S)):
            ready = service_ready(seen) and apps_running(seen)
            failed = failed_applications(seen)
            failing_since = (failing_since or clock()) if failed else None
            if failed and failing_since is not None and clock() - failing_since >= FAILED_GRACE_S:
                app, message = failed[0]
                raise errors.RuntimeFailure(
                    f"{name}: Serve application {app} {DEPLOY_FAILED}: {errors.exception_line(message)}",
                    f"fix what the message names (the app's import, its requirements, what a deployment asks of a "
                    f"host), then submit again; `raytpu runs logs {name}` has the head's log")
            status = seen.get("status") or {}
            now = "ready" if ready else str(status.get("serviceStatus") or "not ready")
            if now != last:
                say(f"[{clock() - start:5.0f}s] {name}: {now}")
                last = now
            if ready and not failed:
                return True
        if seen is not None and client.get("RayService", name) is None:
            return False  # deleted
        if unreached is None or seen is None:
            continue
        if not operator_unreached(client, seen):
            stuck_since = None
        elif stuck_since is None:
            stuck_since = clock()
        if stuck_since is not None and clock() - stuck_since >= OPERATOR_GRACE_S:
            say(unreached)
            unreached = None
    return False
